-- Which apps may hear of each event, decided in the transaction that records it
-- (daemon/security/access.py `event_audience`): the event stream (GET /api/v1/events,
-- docs/events.md) filters by it, so a pull or a replay shows what the app could see when
-- the event was committed, as webhook fan-out does.
--   '*'              every app
--   ' app_a app_b '  these apps (space-separated, padded: matched with instr)
--   ''               no app
-- Events recorded before this migration get '': their audience was never decided, and no
-- app can hold a stream cursor from before the stream existed.
ALTER TABLE events ADD COLUMN audience TEXT NOT NULL DEFAULT '';
-- Who of those apps may see the people the event's data names (the same forms; '*' where
-- the community shows its roster). The others get the data without the keys that name a
-- person (daemon/security/access.py `event_data_for`): issue 22's roster rule.
ALTER TABLE events ADD COLUMN people TEXT NOT NULL DEFAULT '*';
