-- Management grants: an app with `manage = 1` may act for a community's admins
-- (adminDid / currentOwnerDid in API-key bodies). `manage = 0`: the app may only see the
-- community (private communities). The creating app always manages (communities.creator_app_id).
ALTER TABLE community_apps ADD COLUMN manage INTEGER NOT NULL DEFAULT 0 CHECK (manage IN (0, 1));
