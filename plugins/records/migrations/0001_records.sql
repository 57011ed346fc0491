-- Records: the local index of the records this service wrote into community repos on
-- behalf of users. The PDS repo is the source of truth; the index answers list and get.

CREATE TABLE records (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,   -- list order (keyset)
    community_did  TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    collection     TEXT NOT NULL,
    rkey           TEXT NOT NULL,
    uri            TEXT NOT NULL,
    cid            TEXT NOT NULL,
    author_did     TEXT NOT NULL,                       -- the user who created it
    app_id         TEXT,                                -- the app that created it
    value          TEXT NOT NULL,                       -- JSON, as written to the repo
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    updated_by     TEXT,                                -- the user who last changed it
    UNIQUE (community_did, collection, rkey)
);
CREATE INDEX records_by_collection ON records (community_did, collection, id);
CREATE INDEX records_by_author ON records (author_did, id);
