-- Reports about a whole community, to the instance's operators, and what they decided.
-- No reference to the communities table: a report outlives the community's removal from
-- the index, so it keeps the community's name and handle as they were when reported.
CREATE TABLE instance_reports (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    community_did    TEXT NOT NULL,
    community_name   TEXT NOT NULL,
    community_handle TEXT NOT NULL,
    reporter_did     TEXT NOT NULL,
    reason           TEXT NOT NULL CHECK (reason IN ('spam', 'illegal', 'harassment', 'other')),
    body             TEXT,                       -- the reporter's words (at most 2,000 characters)
    app_id           TEXT,                       -- the app that reported; NULL: the site's page
    status           TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'settled')),
    outcome          TEXT CHECK (outcome IN ('dismissed', 'suspended', 'removed')),
    decided_by       TEXT,                       -- the operator; never shown to the reporter
    created_at       TEXT NOT NULL,
    decided_at       TEXT
);
-- one open report per reporter and community
CREATE UNIQUE INDEX instance_reports_open_once ON instance_reports (community_did, reporter_did) WHERE status = 'open';
CREATE INDEX instance_reports_open ON instance_reports (status, community_did, id);
CREATE INDEX instance_reports_reporter ON instance_reports (reporter_did, created_at);
