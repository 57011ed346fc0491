-- Core schema: apps and their API keys, browser sessions, the domain-event outbox.

CREATE TABLE apps (
    id                          TEXT PRIMARY KEY,             -- app_ + 16 hex
    owner_did                   TEXT NOT NULL,
    name                        TEXT NOT NULL,
    domain                      TEXT NOT NULL,
    key_hash                    BLOB NOT NULL UNIQUE,         -- SHA-256 of the API key
    active                      INTEGER NOT NULL DEFAULT 1,
    rate_limit_requests         INTEGER,                      -- NULL: the configured default
    rate_limit_window_seconds   REAL,
    created_at                  TEXT NOT NULL,
    updated_at                  TEXT NOT NULL,
    key_rotated_at              TEXT,
    deactivated_at              TEXT
);
CREATE INDEX apps_by_owner ON apps (owner_did, created_at, id);
CREATE INDEX apps_by_owner_domain ON apps (owner_did, domain) WHERE active = 1;

CREATE TABLE sessions (
    id_hash       TEXT PRIMARY KEY,       -- SHA-256 (hex) of the sid cookie value
    did           TEXT NOT NULL,
    handle        TEXT,
    csrf_token    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    last_seen_at  REAL NOT NULL,
    expires_at    REAL NOT NULL
);
CREATE INDEX sessions_by_did ON sessions (did);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- Every domain event, written in the transaction of the change that caused it.
CREATE TABLE events (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT NOT NULL UNIQUE,  -- evt_ + 24 hex, stable across redeliveries
    type           TEXT NOT NULL,
    community_did  TEXT,
    app_id         TEXT,                  -- the app whose request caused the change, if any
    actor_did      TEXT,
    data           TEXT NOT NULL,         -- JSON
    created_at     TEXT NOT NULL
);
CREATE INDEX events_by_community ON events (community_did, seq);
