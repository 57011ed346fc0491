"""The `instance` section of config.yaml (docs/configuration.md, "instance"): who runs the
instance. The config file is the source of truth for operators: nothing in the database
can make someone an operator."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.plugin import ConfigError, check_range, is_did


@dataclass(frozen=True)
class InstanceConfig:
    #: DIDs of the people who run this instance (the console at /admin, instance-wide actions).
    operators: tuple[str, ...] = ()
    #: Days an entry of the instance audit log is kept; 0 keeps them for good.
    audit_retention_days: int = 730
    #: Seconds between pruning passes of the audit log.
    prune_interval_seconds: float = 3600.0

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for i, did in enumerate(self.operators):
            if not isinstance(did, str) or not is_did(did):
                raise ConfigError(f"not a DID: {did!r} (an operator is named by DID, e.g. did:plc:…)",
                                  f"instance.operators[{i}]")
            if did in seen:
                raise ConfigError(f"{did} is listed twice", f"instance.operators[{i}]")
            seen.add(did)
        check_range(self.audit_retention_days, "instance.audit_retention_days", minimum=0)
        check_range(self.prune_interval_seconds, "instance.prune_interval_seconds", above=0)

    def is_operator(self, did: str | None) -> bool:
        return bool(did) and did in self.operators
