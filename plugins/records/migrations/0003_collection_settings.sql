-- A community's own allowlist of the collections apps may write through the records API
-- (plugins/records/collections.py). No row: any collection the operator allows.
CREATE TABLE record_collection_settings (
    community_did        TEXT PRIMARY KEY REFERENCES communities (did) ON DELETE CASCADE,
    allowed_collections  TEXT NOT NULL,   -- JSON list of patterns (an NSID, or org.example.*)
    updated_at           TEXT NOT NULL,
    updated_by           TEXT NOT NULL,   -- the admin who set it
    app_id               TEXT             -- the app that set it
);
