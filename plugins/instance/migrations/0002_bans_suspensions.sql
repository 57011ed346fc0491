-- Instance-wide bans (issue 38, item 3): a DID, or a handle domain written `*.spam.example`.
-- A ban past its `expires_at` is no longer in force (kept until lifted, for the record).
CREATE TABLE instance_bans (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    subject         TEXT NOT NULL UNIQUE,          -- did:... or *.domain (lower case)
    kind            TEXT NOT NULL CHECK (kind IN ('did', 'domain')),
    reason          TEXT NOT NULL DEFAULT '',
    expires_at      TEXT,                          -- ISO 8601 UTC; NULL: until lifted
    end_memberships INTEGER NOT NULL DEFAULT 0,
    operator_did    TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
-- Suspended communities (item 4): hidden from discovery and search, read-only; the
-- reason is public (shown on the community's pages).
CREATE TABLE instance_suspensions (
    community_did TEXT PRIMARY KEY,
    reason        TEXT NOT NULL,
    operator_did  TEXT NOT NULL,
    created_at    TEXT NOT NULL
);
