-- Each member's part of a member-list page as JSON text, kept by triggers, so a page of
-- 100 is read by concatenating three strings per member (store/members.py `member_page`;
-- docs/performance.md, issue 16). The objects are exactly `views.member_json`'s:
--   page_head         {"did":"…"
--   user_profiles     ,"handle":…,"displayName":…,"avatar":…   (absent: all three null)
--   page_tail         ,"isAdmin":…,"isPrimaryAdmin":…,"confirmedAt":"…","roles":[…]}
-- Role names are `[a-z][a-z0-9-]*` (capabilities.ROLE_NAME), so the space-separated list
-- becomes a JSON array by replacing the spaces. Roles that do not look like that (written
-- by hand, say) leave page_tail NULL, and a page holding such a member is built the slow
-- way. Changing the shape means a new migration that replaces these triggers and refills
-- the columns (tests/test_communities_member_page.py holds the two ways equal).
ALTER TABLE members ADD COLUMN page_head TEXT;
ALTER TABLE members ADD COLUMN page_tail TEXT;
ALTER TABLE user_profiles ADD COLUMN page_json TEXT;

CREATE TRIGGER members_page_json_changed AFTER UPDATE OF member_did, admin_rank, confirmed_at, roles ON members
BEGIN
    UPDATE members SET page_head = '{"did":' || json_quote(NEW.member_did),
        page_tail = ',"isAdmin":' || CASE WHEN NEW.admin_rank IS NULL THEN 'false' ELSE 'true' END
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

CREATE TRIGGER user_profiles_page_json_changed AFTER UPDATE OF handle, display_name, avatar_url ON user_profiles
BEGIN
    UPDATE user_profiles SET page_json = ',"handle":' || json_quote(NEW.handle)
        || ',"displayName":' || json_quote(NEW.display_name) || ',"avatar":' || json_quote(NEW.avatar_url)
    WHERE did = NEW.did;
END;

-- A new row, and the rows there already, take the same path: an UPDATE of a column
-- the trigger watches (to the same value) fires it.
CREATE TRIGGER members_page_json_added AFTER INSERT ON members BEGIN
    UPDATE members SET roles = roles WHERE id = NEW.id;
END;
CREATE TRIGGER user_profiles_page_json_added AFTER INSERT ON user_profiles BEGIN
    UPDATE user_profiles SET handle = handle WHERE did = NEW.did;
END;
UPDATE members SET roles = roles;
UPDATE user_profiles SET handle = handle;
