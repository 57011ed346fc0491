-- Creation requests under `instance.creation: approval`: what a person asked to create, and
-- what an operator decided. An approved request is created for the person by the service;
-- a creation that failed stays 'approved' (error set) until it is approved again.
CREATE TABLE creation_requests (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    requester_did     TEXT NOT NULL,                  -- the person; primary admin once created
    display_name      TEXT NOT NULL,
    description       TEXT NOT NULL DEFAULT '',
    type              TEXT NOT NULL,                  -- open, admin-approved, private
    handle            TEXT,                           -- the handle asked for (NULL: made from the name)
    roster_visibility TEXT,
    listed            INTEGER,                        -- NULL: the default
    recovery_key      TEXT,                           -- a did:key the person holds (public half only)
    app_id            TEXT,                           -- the app that asked for them; NULL: the site's form
    state             TEXT NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'approved', 'created', 'declined')),
    reason            TEXT,                           -- a decline's reason, shown to the person
    error             TEXT,                           -- why the last creation attempt failed
    community_did     TEXT,                           -- once created
    decided_by        TEXT,                           -- the operator (never shown to the person)
    created_at        TEXT NOT NULL,
    decided_at        TEXT
);
CREATE INDEX creation_requests_state ON creation_requests (state, id);
CREATE INDEX creation_requests_person ON creation_requests (requester_did, id);
