-- Each member's object of a member-list page as JSON text, kept by triggers, so a page of
-- 100 is one indexed read of 101 strings that SQLite concatenates (store/members.py
-- `member_page`; docs/performance.md, issue 16). The object is exactly
-- `views.member_json`'s (the non-admin view; the admin view appends two keys at read time):
--   {"did":…,"handle":…,"displayName":…,"avatar":…,"isAdmin":…,"isPrimaryAdmin":…,
--    "confirmedAt":…,"roles":[…]}
-- The profile part comes from user_profiles (all three null without a cached profile);
-- a profile change rewrites the objects of that user's memberships.
-- Role names are `[a-z][a-z0-9-]*` (capabilities.ROLE_NAME), so the space-separated list
-- becomes a JSON array by replacing the spaces. Roles that do not look like that (written
-- by hand, say) leave page_json NULL, and a page holding such a member is built the slow
-- way. Changing the shape means a new migration that replaces these triggers and refills
-- the column (tests/test_communities_member_page.py holds the two ways equal).
ALTER TABLE members ADD COLUMN page_json TEXT;

CREATE TRIGGER members_page_json_changed AFTER UPDATE OF member_did, admin_rank, confirmed_at, roles ON members
BEGIN
    UPDATE members SET page_json = '{"did":' || json_quote(NEW.member_did)
        || ifnull((SELECT ',"handle":' || json_quote(p.handle) || ',"displayName":' || json_quote(p.display_name)
                          || ',"avatar":' || json_quote(p.avatar_url)
                   FROM user_profiles p WHERE p.did = NEW.member_did),
                  ',"handle":null,"displayName":null,"avatar":null')
        || ',"isAdmin":' || CASE WHEN NEW.admin_rank IS NULL THEN 'false' ELSE 'true' END
        || ',"isPrimaryAdmin":' || CASE WHEN NEW.admin_rank = 0 THEN 'true' ELSE 'false' END
        || ',"confirmedAt":' || json_quote(NEW.confirmed_at) || ',"roles":'
        || CASE WHEN NEW.roles IS NULL OR NEW.roles = '' THEN
                CASE WHEN NEW.admin_rank IS NULL THEN '["member"]' ELSE '["admin","member"]' END
            WHEN NEW.roles GLOB '[a-z]*' AND NEW.roles NOT GLOB '*[^a-z0-9 -]*'
                 AND NEW.roles NOT GLOB '* ' AND NEW.roles NOT GLOB '*  *' THEN
                CASE WHEN NEW.admin_rank IS NULL THEN '["member","' ELSE '["admin","member","' END
                || replace(NEW.roles, ' ', '","') || '"]'
            END || '}'
    WHERE id = NEW.id;
END;

-- A new member, a profile added, changed or dropped, and the rows there already, all take
-- the same path: an UPDATE of a column the trigger above watches (to the same value).
CREATE TRIGGER members_page_json_added AFTER INSERT ON members BEGIN
    UPDATE members SET roles = roles WHERE id = NEW.id;
END;
CREATE TRIGGER user_profiles_page_json_added AFTER INSERT ON user_profiles BEGIN
    UPDATE members SET roles = roles WHERE member_did = NEW.did;
END;
CREATE TRIGGER user_profiles_page_json_changed AFTER UPDATE OF handle, display_name, avatar_url ON user_profiles
BEGIN
    UPDATE members SET roles = roles WHERE member_did = NEW.did;
END;
CREATE TRIGGER user_profiles_page_json_dropped AFTER DELETE ON user_profiles BEGIN
    UPDATE members SET roles = roles WHERE member_did = OLD.did;
END;
UPDATE members SET roles = roles;
