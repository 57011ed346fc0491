"""The `communities` section of config.yaml (documented in docs/communities.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CommunityType = Literal["open", "admin-approved", "private"]
TYPES: tuple[str, ...] = ("open", "admin-approved", "private")


@dataclass(frozen=True)
class CommunitiesConfig:
    default_type: CommunityType = "open"
    allow_provision: bool = True
    allow_bring_own: bool = True
    max_upload_bytes: int = 1024 * 1024
    profile_fetch_timeout_seconds: float = 3.0
    delete_pds_records: bool = True
