-- Record writes in progress. A row is written (with the record key chosen up front)
-- before the PDS call and deleted in the transaction that indexes the result and emits
-- the event, so a crash or a failed index transaction leaves a trace that the reconciler
-- (plugins/records/writes.py) finishes or drops after reading the repo. At most one write
-- per record is in progress.
CREATE TABLE record_pending_writes (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    op               TEXT NOT NULL CHECK (op IN ('create', 'update', 'delete')),
    community_did    TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    collection       TEXT NOT NULL,
    rkey             TEXT NOT NULL,
    value            TEXT,                 -- JSON record written (create, update); NULL for delete
    cid              TEXT,                 -- update: the indexed CID (swapRecord); delete: the deleted version's
    author_did       TEXT NOT NULL,        -- the record's author (create: the acting user)
    user_did         TEXT NOT NULL,        -- the user who acted
    app_id           TEXT,                 -- the app that acted
    created_at       TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,   -- reconciliation attempts that could not read the repo
    next_attempt_at  TEXT,                 -- no reconciliation before this (backoff)
    last_error       TEXT,
    UNIQUE (community_did, collection, rkey)
);
CREATE INDEX record_pending_writes_by_age ON record_pending_writes (created_at);
