-- Reports members make of a member or a record of their community, and what a reviewer
-- did about them. It references the communities plugin's table (cr_plugin_requires).
CREATE TABLE reports (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    reporter_did  TEXT NOT NULL,
    subject       TEXT NOT NULL,                  -- a member's DID, or a record's at:// URI
    subject_kind  TEXT NOT NULL CHECK (subject_kind IN ('member', 'record')),
    subject_did   TEXT NOT NULL,                  -- the reported person (a record: its author)
    reason        TEXT NOT NULL CHECK (reason IN ('spam', 'harassment', 'off-topic', 'illegal', 'other')),
    body          TEXT,                           -- the reporter's words (at most 2,000 characters)
    app_id        TEXT,                           -- the app that reported; NULL: the site's pages
    status        TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'acted', 'dismissed')),
    outcome       TEXT,                           -- dismissed, record_removed, member_removed, member_banned
    note          TEXT,                           -- the reviewer's note (reviewers and the audit only)
    reviewer_did  TEXT,                           -- never shown to the reporter
    created_at    TEXT NOT NULL,
    resolved_at   TEXT
);
-- one open report per reporter and subject
CREATE UNIQUE INDEX reports_open_once ON reports (community_did, reporter_did, subject) WHERE status = 'open';
-- the queue (open ones oldest first), one subject's open ones, a person's day and own list
CREATE INDEX reports_queue ON reports (community_did, status, id);
CREATE INDEX reports_open_subject ON reports (community_did, subject) WHERE status = 'open';
CREATE INDEX reports_by_reporter ON reports (community_did, reporter_did, created_at);
CREATE INDEX reports_by_person ON reports (reporter_did, id);
