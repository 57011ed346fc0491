-- Role names are checked with a full match now (issue 22, hole 1). Before, `moderator\n`
-- passed (`$` also matches before a final line break), and since a member's `roles` column
-- is space-separated and read with str.split(), such a name turned into another one
-- (`moderator\n` read as the built-in `moderator`, `admin\n` shown as `admin`).
-- This drops every stored name that is not `[a-z][a-z0-9-]{0,31}`: the definitions, and the
-- names in each member's `roles`; then it recomputes `roles` and `grants` of every member who
-- held a role, exactly as capabilities.grants_of does (a name kept only if it is `moderator`
-- or a defined custom role, in the order held; grants space-separated and sorted), so a
-- capability a split name granted is gone. The page_json triggers of 0008 refill the member
-- list's JSON from the new `roles`. The community's `roles` record in its repo still names
-- the dropped roles until the next role change rewrites it; reindex skips them (they fail
-- the same check).

DELETE FROM community_roles
WHERE name NOT GLOB '[a-z]*' OR name GLOB '*[^a-z0-9-]*' OR length(name) > 32;

CREATE TEMP TABLE role_tokens AS
WITH RECURSIVE split(id, community_did, rest, token, pos) AS (
    SELECT id, community_did, roles || ' ', NULL, 0 FROM members WHERE roles IS NOT NULL
    UNION ALL
    SELECT id, community_did, substr(rest, instr(rest, ' ') + 1), substr(rest, 1, instr(rest, ' ') - 1), pos + 1
    FROM split WHERE rest <> ''
)
SELECT id, community_did, token, min(pos) AS pos FROM split
WHERE token IS NOT NULL AND (token = 'moderator' OR EXISTS (
    SELECT 1 FROM community_roles r WHERE r.community_did = split.community_did AND r.name = token))
GROUP BY id, token;

CREATE TEMP TABLE role_grants AS
SELECT DISTINCT t.id, m.cap FROM role_tokens t
JOIN (SELECT 'moderator' AS role, value AS cap FROM json_each(
          '["audit.read","invites.manage","members.approve","members.ban","members.remove"]')) m
    ON t.token = m.role
UNION
SELECT t.id, c.value FROM role_tokens t
JOIN community_roles r ON r.community_did = t.community_did AND r.name = t.token, json_each(r.capabilities) c
UNION
SELECT t.id, g.value || ':' || json_extract(col.value, '$.collection') FROM role_tokens t
JOIN community_roles r ON r.community_did = t.community_did AND r.name = t.token,
     json_each(r.collections) col, json_each(col.value, '$.capabilities') g;

UPDATE members SET
    roles = (SELECT group_concat(token, ' ') FROM (SELECT token FROM role_tokens t
                                                   WHERE t.id = members.id ORDER BY pos)),
    grants = (SELECT group_concat(cap, ' ') FROM (SELECT cap FROM role_grants g
                                                 WHERE g.id = members.id ORDER BY cap))
WHERE roles IS NOT NULL;

DROP TABLE role_tokens;
DROP TABLE role_grants;
