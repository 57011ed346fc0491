from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ApiKeysConfig:
    max_apps_per_owner: int = 25
