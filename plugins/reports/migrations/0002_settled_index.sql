-- Retention (reports.settled_retention_days) finds the settled reports oldest first.
CREATE INDEX reports_settled ON reports (resolved_at) WHERE status != 'open';
