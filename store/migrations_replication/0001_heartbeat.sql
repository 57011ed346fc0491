-- The primary's heartbeat (daemon/runtime/replication.py): with replication on, the primary
-- rewrites this one row every replication.heartbeat_seconds, so a follower reading its
-- Litestream copy can tell how far behind it is even while nothing else is written.
CREATE TABLE replication_heartbeat (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at REAL NOT NULL
);
