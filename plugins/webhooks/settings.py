"""The `webhooks` section of config.yaml."""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds between attempts of one delivery: 11 attempts over about 23.7 hours.
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)


@dataclass(frozen=True)
class WebhooksConfig:
    allow_http: bool = False
    allowed_targets: tuple[str, ...] = ()
    max_in_flight: int = 16
    request_timeout_seconds: float = 10.0
    retry_schedule_seconds: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    retry_jitter: float = 0.2
    max_retry_after_seconds: float = 3600.0
    disable_after_failed_deliveries: int = 20
    poll_interval_seconds: float = 30.0
    secret_overlap_seconds: float = 86400.0
    max_webhooks_per_app: int = 25
    delivery_log_retention_days: int = 30


def check(config: WebhooksConfig) -> None:
    """Refuse values the loop cannot work with (ConfigError naming the key)."""
    import ipaddress

    from daemon.plugin import ConfigError
    if config.max_in_flight < 1:
        raise ConfigError("must be at least 1", "webhooks.max_in_flight")
    if config.request_timeout_seconds <= 0:
        raise ConfigError("must be more than 0", "webhooks.request_timeout_seconds")
    if not 0 <= config.retry_jitter < 1:
        raise ConfigError("must be from 0 to less than 1", "webhooks.retry_jitter")
    if any(s < 0 for s in config.retry_schedule_seconds):
        raise ConfigError("waits must not be negative", "webhooks.retry_schedule_seconds")
    if config.poll_interval_seconds <= 0:
        raise ConfigError("must be more than 0", "webhooks.poll_interval_seconds")
    for i, entry in enumerate(config.allowed_targets):
        if "/" in entry:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError(f"{entry!r} is not a CIDR range", f"webhooks.allowed_targets[{i}]") from None
