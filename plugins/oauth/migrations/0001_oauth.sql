-- atproto OAuth: login flows in progress, and the grant behind each browser session.
-- Every credential column is sealed with the daemon's secret key (daemon/security/secretbox.py),
-- bound to its table, column and row; nothing here is usable without that key.

-- A flow lives from POST /login until its callback (single use) or its expiry.
CREATE TABLE oauth_flows (
    state_hash       TEXT PRIMARY KEY,     -- SHA-256 (hex) of the `state` sent to the server
    issuer           TEXT NOT NULL,        -- the authorization server the flow started with
    server_meta      TEXT NOT NULL,        -- JSON: the endpoints we use at that server
    expected_did     TEXT,                 -- set when the user typed a handle or DID
    pds_url          TEXT,
    redirect_uri     TEXT NOT NULL,
    client_id        TEXT NOT NULL,
    scope            TEXT NOT NULL,
    verifier_sealed  TEXT NOT NULL,        -- PKCE code verifier
    dpop_key_sealed  TEXT NOT NULL,        -- the ES256 key the grant will be bound to (JWK)
    return_to        TEXT,
    created_at       REAL NOT NULL,
    expires_at       REAL NOT NULL
);
CREATE INDEX oauth_flows_by_expiry ON oauth_flows (expires_at);

-- The grant of one browser session; goes when the session goes.
CREATE TABLE oauth_grants (
    session_id             TEXT PRIMARY KEY REFERENCES sessions (id_hash) ON DELETE CASCADE,
    did                    TEXT NOT NULL,
    issuer                 TEXT NOT NULL,
    server_meta            TEXT NOT NULL,  -- JSON: token / revocation endpoints
    pds_url                TEXT NOT NULL,
    client_id              TEXT NOT NULL,
    scope                  TEXT NOT NULL,  -- as granted
    access_token_sealed    TEXT NOT NULL,
    refresh_token_sealed   TEXT,
    dpop_key_sealed        TEXT NOT NULL,
    access_expires_at      REAL NOT NULL,
    created_at             REAL NOT NULL,
    refreshed_at           REAL
);
CREATE INDEX oauth_grants_by_did ON oauth_grants (did);
