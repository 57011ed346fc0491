"""The application and its lifecycle: config, plugins and hooks, events, services,
clock, locks, start-up, the command line, backups, systemd."""
