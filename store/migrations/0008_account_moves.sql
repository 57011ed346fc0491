-- A community account moving to another PDS (daemon/atproto/moves.py): the next step to run,
-- and the account's password on the new PDS, sealed as "account_moves.password:<did>" and kept
-- before createAccount is called. While a row exists the account's repo is read-only.
CREATE TABLE account_moves (
    did                 TEXT PRIMARY KEY,
    from_pds            TEXT NOT NULL,
    to_pds              TEXT NOT NULL,
    step                TEXT NOT NULL CHECK (step IN ('account', 'repo', 'blobs', 'identity', 'activate', 'finish')),
    password_sealed     TEXT NOT NULL,
    invite_code_sealed  TEXT,
    error               TEXT,
    started_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL
);
