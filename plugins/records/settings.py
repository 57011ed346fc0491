"""The `records` section of config.yaml."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordsConfig:
    max_record_bytes: int = 32768
    reconcile_after_seconds: float = 30.0
    reconcile_max_backoff_seconds: float = 3600.0
    # Collection patterns (an NSID, or `org.example.*`) apps may write; empty: any collection
    # that is not protected or denied (plugins/records/collections.py).
    allowed_collections: tuple[str, ...] = ()
    # Collection patterns apps may never write (on top of the protected namespaces).
    denied_collections: tuple[str, ...] = ()


def check(config: RecordsConfig, namespace: str = "") -> None:
    """Refuse values the plugin cannot work with (ConfigError naming the key). `namespace`
    is ``atproto.namespace``: an allowed pattern inside it, or inside the protocol's and
    Bluesky's namespaces, could never take effect."""
    from daemon.plugin import ConfigError
    from plugins.records.collections import parse, pattern_problem, protected_by
    if config.reconcile_after_seconds <= 0:
        raise ConfigError("must be more than 0", "records.reconcile_after_seconds")
    if config.reconcile_max_backoff_seconds < config.reconcile_after_seconds:
        raise ConfigError("must be at least records.reconcile_after_seconds",
                          "records.reconcile_max_backoff_seconds")
    for key in ("allowed_collections", "denied_collections"):
        for i, text in enumerate(getattr(config, key)):
            problem = pattern_problem(text)
            if problem:
                raise ConfigError(problem, f"records.{key}[{i}]")
            inside = protected_by(parse(text), namespace) if namespace else None
            if inside and key == "allowed_collections":
                raise ConfigError(f"{text} lies in {inside}.*, which is never writable through the "
                                  "records API", f"records.{key}[{i}]")
