-- The pending writes move to the core's one intents table (store/migrations/0003);
-- the kind is the key's prefix (proof, remove, admins, membership).
INSERT INTO write_intents (kind, key, community_did, operation, rkey, payload, created_at, tries)
SELECT 'communities.' || substr(key, 1, instr(key, ':') - 1), key, community_did, operation, rkey,
       payload, created_at, attempts
FROM community_pending_writes;
DROP TABLE community_pending_writes;
