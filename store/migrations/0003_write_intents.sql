-- Writes to a repo on a PDS in progress: one table for every kind of write (issue 12).
-- A row (an *intent*) is written before the PDS call, with the record key chosen up front,
-- and deleted in the local transaction that records the result, so a retried request
-- reuses the same key and a crash leaves a trace that the reconciler settles
-- (daemon/atproto/writes.py). `kind` names the plugin's registered way to finish or undo
-- the write (hook cr_write_kinds). The plugins' own pending-write tables move their rows
-- here in their next migration (a new database creates those tables after this one).
CREATE TABLE write_intents (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT NOT NULL,        -- e.g. communities.proof, records.write
    key              TEXT NOT NULL UNIQUE, -- the subject: at most one write in progress per key
    community_did    TEXT,                 -- the community it belongs to (dropped with it)
    operation        TEXT NOT NULL,        -- what the request was doing (event name, create/update/delete)
    rkey             TEXT,                 -- the record key chosen up front
    payload          TEXT NOT NULL DEFAULT '{}',  -- JSON: what the kind needs to settle it
    created_at       TEXT NOT NULL,
    tries            INTEGER NOT NULL DEFAULT 1,  -- requests that began it (a retry reuses the row)
    attempts         INTEGER NOT NULL DEFAULT 0,  -- settlement attempts that failed
    next_attempt_at  TEXT,                 -- no settlement before this (backoff)
    last_error       TEXT
);
CREATE INDEX write_intents_by_kind ON write_intents (kind, id);
CREATE INDEX write_intents_by_community ON write_intents (community_did);
