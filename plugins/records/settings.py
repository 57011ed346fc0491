"""The `records` section of config.yaml."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordsConfig:
    max_record_bytes: int = 32768
