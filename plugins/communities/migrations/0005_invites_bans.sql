-- Invite links, bans, and who may see a community's roster and find it in lists
-- (docs/communities.md, "Invites", "Bans", "Visibility"). All of it lives only in this
-- service: nothing here is mirrored to the community's repo.

-- An invite link. Only the SHA-256 of the code is stored: the code is shown once, to the
-- admin who creates it. `uses` is counted in the transaction that admits the member, with
-- the limit in the same UPDATE, so racing joins never pass `max_uses`.
CREATE TABLE community_invites (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did   TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    code_hash       TEXT NOT NULL UNIQUE,     -- hex SHA-256 of the code
    max_uses        INTEGER CHECK (max_uses IS NULL OR max_uses >= 1),
    uses            INTEGER NOT NULL DEFAULT 0,
    expires_at      TEXT,                     -- ISO 8601 UTC, same shape as the clock's
    note            TEXT,
    created_by      TEXT NOT NULL,
    app_id          TEXT,
    created_at      TEXT NOT NULL,
    revoked_at      TEXT,
    revoked_by      TEXT
);
CREATE INDEX community_invites_by_community ON community_invites (community_did, id);

-- A ban: the user may not join, ask to join or use an invite until `expires_at` (NULL:
-- until lifted). One row per user and community; an expired row is replaced by a new ban.
CREATE TABLE community_bans (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did   TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    member_did      TEXT NOT NULL,
    reason          TEXT,
    expires_at      TEXT,
    banned_by       TEXT NOT NULL,
    app_id          TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (community_did, member_did)
);
CREATE INDEX community_bans_by_community ON community_bans (community_did, id);

-- Who may list the members, and whether the community appears in lists and search.
ALTER TABLE communities ADD COLUMN roster_visibility TEXT NOT NULL DEFAULT 'public'
    CHECK (roster_visibility IN ('public', 'members', 'admins'));
ALTER TABLE communities ADD COLUMN listed INTEGER NOT NULL DEFAULT 1 CHECK (listed IN (0, 1));
