-- The pending record writes move to the core's one intents table (store/migrations/0003).
INSERT INTO write_intents (kind, key, community_did, operation, rkey, payload, created_at, tries,
                           attempts, next_attempt_at, last_error)
SELECT 'records.write', 'record:' || community_did || ' ' || collection || ' ' || rkey,
       community_did, op, rkey,
       json_object('collection', collection, 'value', json(value), 'cid', cid,
                   'authorDid', author_did, 'userDid', user_did, 'appId', app_id),
       created_at, 1, attempts, next_attempt_at, last_error
FROM record_pending_writes;
DROP TABLE record_pending_writes;
