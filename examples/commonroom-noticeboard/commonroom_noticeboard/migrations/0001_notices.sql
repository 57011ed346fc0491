-- The noticeboard's one table: short notices members post to a community's board.
-- It references the communities plugin's table (declared: cr_plugin_requires).
CREATE TABLE notices (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,   -- keyset order (newest first)
    community_did TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    author_did    TEXT NOT NULL,
    body          TEXT NOT NULL,
    app_id        TEXT,                                 -- the app that posted it; NULL: the web page
    created_at    TEXT NOT NULL
);
CREATE INDEX notices_by_community ON notices (community_did, id);
