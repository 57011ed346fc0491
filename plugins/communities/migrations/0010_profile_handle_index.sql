-- The history page's person filter finds a person typed by handle in the profile cache
-- (plugins/web/queries.py `did_of_person`): without this index that is a scan of every
-- profile the service knows (tests/test_query_plans.py, issue 26).
CREATE INDEX user_profiles_handle ON user_profiles (handle);
