-- Roster visibility (issue 22, hole 4): a delivery to an app that may not see the
-- community's roster (daemon.security.access.app_sees_roster, decided when the event is
-- queued) is sent with the event's data as `event_data_for` shows it to such an app:
-- without the keys that name a person. Member events are not queued for such apps at all.
ALTER TABLE webhook_deliveries ADD COLUMN hide_people INTEGER NOT NULL DEFAULT 0;
