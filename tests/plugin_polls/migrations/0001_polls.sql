-- The throwaway polls plugin's one table (tests/plugin_polls): polls that close at a time.
CREATE TABLE test_polls (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    question   TEXT NOT NULL,
    closes_at  REAL NOT NULL,     -- seconds of the app's clock
    closed_at  REAL               -- NULL: still open
);
