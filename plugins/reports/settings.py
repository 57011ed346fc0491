"""The `reports` section of config.yaml (docs/configuration.md, "reports")."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.plugin import check_range


@dataclass(frozen=True)
class ReportsConfig:
    #: Days a settled report (acted on or dismissed) is kept after it was resolved; 0 keeps
    #: them for good. Open reports are never pruned.
    settled_retention_days: int = 365
    #: Seconds between pruning passes.
    prune_interval_seconds: float = 3600.0

    def __post_init__(self) -> None:
        check_range(self.settled_retention_days, "reports.settled_retention_days", minimum=0)
        check_range(self.prune_interval_seconds, "reports.prune_interval_seconds", above=0)
