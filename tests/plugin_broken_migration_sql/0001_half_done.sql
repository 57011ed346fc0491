-- Broken on purpose (tests/test_upgrades.py): a table made, a row written, then a statement
-- that fails; none of it may remain.
CREATE TABLE brokenmig_widgets (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO brokenmig_widgets (name) VALUES ('first');
INSERT INTO brokenmig_nowhere (name) VALUES ('this table does not exist');
