-- Sync with the network (daemon/sync/, docs/sync.md).
-- The position in each event stream, saved in the transaction that applies the events
-- up to it, so a restart resumes exactly where the last commit stopped. `source` names
-- the stream: `firehose <url>` or `jetstream <url>` (a cursor means nothing elsewhere).
CREATE TABLE sync_cursors (
    source      TEXT PRIMARY KEY,
    cursor      INTEGER NOT NULL,      -- the firehose seq / Jetstream seq applied up to
    event_time  TEXT,                  -- the `time` of the newest applied event
    updated_at  TEXT NOT NULL
) WITHOUT ROWID;

-- Accounts the network reported as not active (deactivated, suspended, takendown,
-- deleted, ...), among those the index knows. A row is deleted when the account is
-- active again. Members whose account is here are hidden from lists and counts.
CREATE TABLE account_status (
    did         TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    since       TEXT NOT NULL
) WITHOUT ROWID;
