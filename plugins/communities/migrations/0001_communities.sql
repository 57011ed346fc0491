-- Communities: the local read index of each community's repo (profile, admins,
-- membership proofs), join requests, app visibility, the audit log, a user-profile
-- cache for member lists, and the outbox of PDS writes in progress.

CREATE TABLE communities (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,   -- list order and FTS rowid
    did             TEXT NOT NULL UNIQUE,
    handle          TEXT NOT NULL,
    display_name    TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    type            TEXT NOT NULL CHECK (type IN ('open', 'admin-approved', 'private')),
    pds_url         TEXT NOT NULL,
    avatar_cid      TEXT,
    avatar_mime     TEXT,
    avatar_size     INTEGER,
    banner_cid      TEXT,
    banner_mime     TEXT,
    banner_size     INTEGER,
    account_kind    TEXT NOT NULL CHECK (account_kind IN ('provisioned', 'brought')),
    state           TEXT NOT NULL DEFAULT 'creating' CHECK (state IN ('creating', 'active')),
    creator_did     TEXT NOT NULL,
    creator_app_id  TEXT,                 -- the app whose request created it; NULL: browser
    proof_rkey      TEXT NOT NULL,        -- rkey of the creator's membershipProof
    member_count    INTEGER NOT NULL DEFAULT 0,
    pending_count   INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX communities_by_handle ON communities (handle);
CREATE INDEX communities_creating ON communities (creator_did) WHERE state = 'creating';

-- Word-prefix search over display name, handle and description (case-insensitive).
CREATE VIRTUAL TABLE communities_fts USING fts5(
    display_name, handle, description,
    content = 'communities', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2', prefix = '1 2 3');

CREATE TRIGGER communities_fts_insert AFTER INSERT ON communities BEGIN
    INSERT INTO communities_fts (rowid, display_name, handle, description)
    VALUES (new.id, new.display_name, new.handle, new.description);
END;
CREATE TRIGGER communities_fts_delete AFTER DELETE ON communities BEGIN
    INSERT INTO communities_fts (communities_fts, rowid, display_name, handle, description)
    VALUES ('delete', old.id, old.display_name, old.handle, old.description);
END;
CREATE TRIGGER communities_fts_update AFTER UPDATE OF display_name, handle, description ON communities BEGIN
    INSERT INTO communities_fts (communities_fts, rowid, display_name, handle, description)
    VALUES ('delete', old.id, old.display_name, old.handle, old.description);
    INSERT INTO communities_fts (rowid, display_name, handle, description)
    VALUES (new.id, new.display_name, new.handle, new.description);
END;

-- Confirmed members. `id` grows with every confirmation, so member lists ordered by it
-- are stable under concurrent joins (newcomers land after every existing cursor).
CREATE TABLE members (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did   TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    member_did      TEXT NOT NULL,
    admin_rank      INTEGER,              -- NULL: not an admin; 0: the primary admin
    admin_since     TEXT,
    confirmed_at    TEXT NOT NULL,
    proof_rkey      TEXT NOT NULL,
    proof_cid       TEXT,
    membership_uri  TEXT,                 -- the user's own membership record, if known
    membership_cid  TEXT,
    app_id          TEXT,                 -- the app that asked for the join, if any
    UNIQUE (community_did, member_did)
);
CREATE INDEX members_by_community ON members (community_did, id);
CREATE INDEX members_by_user ON members (member_did, id);
CREATE INDEX members_admins ON members (community_did, admin_rank) WHERE admin_rank IS NOT NULL;

CREATE TABLE join_requests (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did   TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    member_did      TEXT NOT NULL,
    requested_at    TEXT NOT NULL,
    membership_uri  TEXT,
    membership_cid  TEXT,
    app_id          TEXT,
    UNIQUE (community_did, member_did)
);
CREATE INDEX join_requests_by_community ON join_requests (community_did, id);
CREATE INDEX join_requests_by_user ON join_requests (member_did);

-- Apps allowed by admins to see a private community (its creating app always may).
CREATE TABLE community_apps (
    community_did   TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    app_id          TEXT NOT NULL,
    allowed_by      TEXT NOT NULL,
    allowed_at      TEXT NOT NULL,
    PRIMARY KEY (community_did, app_id)
) WITHOUT ROWID;

-- Handle, display name and avatar of users, filled when they join (best effort), so
-- member lists never call the PDS.
CREATE TABLE user_profiles (
    did             TEXT PRIMARY KEY,
    handle          TEXT,
    display_name    TEXT,
    avatar_url      TEXT,
    fetched_at      TEXT NOT NULL
) WITHOUT ROWID;

-- Every admin action and membership change. Kept after a community is deleted.
CREATE TABLE audit_log (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did   TEXT NOT NULL,
    action          TEXT NOT NULL,
    actor_did       TEXT,
    target_did      TEXT,
    reason          TEXT,
    metadata        TEXT NOT NULL DEFAULT '{}',   -- JSON object
    app_id          TEXT,
    created_at      TEXT NOT NULL
);
CREATE INDEX audit_by_community ON audit_log (community_did, id);

-- PDS writes in progress. A row is written (with the record keys chosen up front)
-- before the PDS call and deleted in the local transaction that records the result, so
-- a retried request reuses the same keys and a crash leaves a visible trace.
CREATE TABLE community_pending_writes (
    key             TEXT PRIMARY KEY,     -- operation:community:subject
    community_did   TEXT NOT NULL,
    operation       TEXT NOT NULL,
    rkey            TEXT,
    payload         TEXT NOT NULL DEFAULT '{}',
    created_at      TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
CREATE INDEX community_pending_writes_by_community ON community_pending_writes (community_did);
