-- Who may create, update and delete records in a collection of a community
-- (docs/records.md, "Who may write"). No row: members create, the author (or an admin,
-- or a role granting the capability) updates and deletes.
CREATE TABLE record_permissions (
    community_did  TEXT NOT NULL REFERENCES communities (did) ON DELETE CASCADE,
    collection     TEXT NOT NULL,
    create_rule    TEXT NOT NULL CHECK (create_rule IN ('members', 'role', 'admins')),
    update_rule    TEXT NOT NULL CHECK (update_rule IN ('members', 'author', 'role', 'admins')),
    delete_rule    TEXT NOT NULL CHECK (delete_rule IN ('members', 'author', 'role', 'admins')),
    PRIMARY KEY (community_did, collection)
);
