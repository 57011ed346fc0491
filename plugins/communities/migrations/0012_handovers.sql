-- Communities handed over to another Commonroom (issue 37): their index and credentials are
-- gone; this row remembers where they went, so reads and writes of the DID answer
-- 410 community_moved naming the new instance instead of a bare 404.
CREATE TABLE community_handovers (
    did             TEXT PRIMARY KEY,
    handle          TEXT NOT NULL,
    display_name    TEXT NOT NULL,
    moved_to        TEXT NOT NULL,      -- the importing instance's base URL
    handed_over_by  TEXT NOT NULL,
    handed_over_at  TEXT NOT NULL
) WITHOUT ROWID;
