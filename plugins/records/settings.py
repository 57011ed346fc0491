"""The `records` section of config.yaml."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordsConfig:
    max_record_bytes: int = 32768
    reconcile_after_seconds: float = 30.0
    reconcile_max_backoff_seconds: float = 3600.0


def check(config: RecordsConfig) -> None:
    """Refuse values the reconciler cannot work with (ConfigError naming the key)."""
    from daemon.config import ConfigError
    if config.reconcile_after_seconds <= 0:
        raise ConfigError("must be more than 0", "records.reconcile_after_seconds")
    if config.reconcile_max_backoff_seconds < config.reconcile_after_seconds:
        raise ConfigError("must be at least records.reconcile_after_seconds",
                          "records.reconcile_max_backoff_seconds")
