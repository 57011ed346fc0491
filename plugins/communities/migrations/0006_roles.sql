-- Roles (issue 14, docs/communities.md "Roles and capabilities"). The definitions of a
-- community's custom roles, and on each member row the roles they hold and what those
-- roles grant, so membership/check and every capability check stay one indexed read of
-- the member row.

CREATE TABLE community_roles (
    community_did  TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    description    TEXT NOT NULL DEFAULT '',
    capabilities   TEXT NOT NULL,   -- JSON list of catalogue capabilities (no records.*)
    collections    TEXT NOT NULL,   -- JSON [{collection, capabilities: [records.*]}]
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    PRIMARY KEY (community_did, name)
);

-- Space-separated role names (built-in `moderator` and custom roles; admin and member are
-- admin_rank and the row itself). NULL: none.
ALTER TABLE members ADD COLUMN roles TEXT;
-- Space-separated capabilities those roles grant, records.* as `records.create:<collection>`;
-- recomputed whenever a role is assigned, taken away, redefined or deleted. NULL: none.
ALTER TABLE members ADD COLUMN grants TEXT;
