-- A community's admins may require proofs of the acting user (daemon/atproto/proofs.py,
-- docs/identity.md) for every action taken in a user's name through an app.
ALTER TABLE communities ADD COLUMN require_user_proof INTEGER NOT NULL DEFAULT 0
    CHECK (require_user_proof IN (0, 1));
