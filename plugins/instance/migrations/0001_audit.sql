-- The instance audit log: every operator action, from the console or the command line.
CREATE TABLE instance_audit (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operator_did TEXT NOT NULL,                   -- who acted ('cli' entries name the --as DID)
    action       TEXT NOT NULL,                   -- e.g. community.suspend, person.ban
    subject      TEXT NOT NULL DEFAULT '',        -- a community's or person's DID, an app id
    detail       TEXT NOT NULL DEFAULT '{}',      -- JSON: reason, expiry, ...
    via          TEXT NOT NULL CHECK (via IN ('web', 'cli')),
    created_at   TEXT NOT NULL
);
CREATE INDEX instance_audit_time ON instance_audit (created_at);
CREATE INDEX instance_audit_subject ON instance_audit (subject, id);
