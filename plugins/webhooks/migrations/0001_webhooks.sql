-- Webhooks: each app's endpoints, the event kinds they subscribe to, and the durable
-- delivery queue (one row per event per webhook, written in the transaction of the
-- change that caused the event).

CREATE TABLE webhooks (
    id                      TEXT PRIMARY KEY,             -- wh_ + 16 hex
    app_id                  TEXT NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    url                     TEXT NOT NULL,
    community_did           TEXT,                         -- NULL: every community the app may see
    secret_sealed           TEXT NOT NULL,                -- SecretBox, context webhooks.secret:<id>
    previous_secret_sealed  TEXT,                         -- still signed with until ...
    previous_secret_until   REAL,                         -- ... this time (epoch seconds)
    active                  INTEGER NOT NULL DEFAULT 1,
    disabled_reason         TEXT,                         -- set when the service disabled it
    disabled_at             TEXT,
    failed_streak           INTEGER NOT NULL DEFAULT 0,   -- deliveries given up in a row
    created_at              TEXT NOT NULL,
    updated_at              TEXT NOT NULL,
    secret_rotated_at       TEXT
);
CREATE INDEX webhooks_by_app ON webhooks (app_id, created_at, id);

-- The event kinds a webhook subscribes to (the fan-out looks webhooks up by kind).
CREATE TABLE webhook_events (
    event_type  TEXT NOT NULL,
    webhook_id  TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    PRIMARY KEY (event_type, webhook_id)
) WITHOUT ROWID;
CREATE INDEX webhook_events_by_webhook ON webhook_events (webhook_id);

-- One row per (event, webhook). `id` order is event order, which is the send order of
-- each webhook. A redelivery is a new row for the same event.
CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id         TEXT NOT NULL,                       -- events.id = the webhook-id header
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  REAL NOT NULL,                       -- epoch seconds (app clock)
    status_code      INTEGER,                             -- of the last attempt
    error            TEXT,                                -- of the last attempt
    redelivery_of    INTEGER,
    created_at       TEXT NOT NULL,
    first_attempt_at TEXT,
    last_attempt_at  TEXT,
    completed_at     TEXT
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_completed ON webhook_deliveries (completed_at) WHERE status != 'pending';
