"""The `events` section of config.yaml (the event stream, docs/events.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EventsConfig:
    #: Days an event stays in the outbox, replayable by pull and subscribe. The one
    #: retention setting of the events outbox.
    retention_days: int = 7
    #: Bytes of events waiting to be sent to one WebSocket subscriber before it is closed
    #: as a slow consumer (close code 4008).
    subscriber_buffer_bytes: int = 1024 * 1024
    #: Seconds between WebSocket pings; a subscriber that does not answer one within the
    #: next interval is closed.
    ping_interval_seconds: float = 30.0
    #: Open WebSocket subscriptions per app at once.
    max_subscribers_per_app: int = 100
    #: Seconds between pruning passes.
    prune_interval_seconds: float = 3600.0


def check(config: EventsConfig) -> None:
    """Refuse values the stream cannot work with (ConfigError naming the key)."""
    from daemon.plugin import ConfigError
    if config.retention_days < 1:
        raise ConfigError("must be at least 1", "events.retention_days")
    if config.subscriber_buffer_bytes < 64 * 1024:
        raise ConfigError("must be at least 65536", "events.subscriber_buffer_bytes")
    if config.ping_interval_seconds <= 0:
        raise ConfigError("must be more than 0", "events.ping_interval_seconds")
    if config.max_subscribers_per_app < 1:
        raise ConfigError("must be at least 1", "events.max_subscribers_per_app")
    if config.prune_interval_seconds <= 0:
        raise ConfigError("must be more than 0", "events.prune_interval_seconds")
