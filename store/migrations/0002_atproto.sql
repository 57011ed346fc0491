-- AT Protocol: the identity cache and the credentials of community accounts.

-- handle -> DID, as resolved (DNS TXT, HTTPS well-known or the configured PDS). Not verified
-- on its own: identity_dids.handle holds a handle only once it resolved back to the same DID.
CREATE TABLE identity_handles (
    handle       TEXT PRIMARY KEY,          -- lower-case
    did          TEXT NOT NULL,
    resolved_at  REAL NOT NULL,             -- unix seconds
    expires_at   REAL NOT NULL
);
CREATE INDEX identity_handles_by_expiry ON identity_handles (expires_at);

CREATE TABLE identity_dids (
    did          TEXT PRIMARY KEY,
    handle       TEXT,                      -- verified both ways, else NULL
    pds_url      TEXT,
    doc          TEXT NOT NULL,             -- the DID document, JSON
    resolved_at  REAL NOT NULL,
    expires_at   REAL NOT NULL
);
CREATE INDEX identity_dids_by_expiry ON identity_dids (expires_at);

-- Accounts the daemon acts as. Secrets are SecretBox-sealed text bound to the row
-- ("community_accounts.password:<did>", "community_accounts.session:<did>").
CREATE TABLE community_accounts (
    did              TEXT PRIMARY KEY,
    handle           TEXT NOT NULL,
    pds_url          TEXT NOT NULL,
    origin           TEXT NOT NULL CHECK (origin IN ('provisioned', 'brought')),
    password_sealed  TEXT NOT NULL,         -- account password (provisioned) or app password
    session_sealed   TEXT,                  -- JSON {accessJwt, refreshJwt, expiries}, sealed
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);

-- An account being created on the configured PDS: the generated password is kept here before
-- createAccount is called, so a crash or timeout after the PDS created the account never loses
-- it; a retry with the same handle reuses it. Sealed as "account_provisioning.password:<handle>".
CREATE TABLE account_provisioning (
    handle           TEXT PRIMARY KEY,
    pds_url          TEXT NOT NULL,
    email            TEXT NOT NULL,
    password_sealed  TEXT NOT NULL,
    created_at       TEXT NOT NULL
);
