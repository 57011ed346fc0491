"""The `communities` section of config.yaml (documented in docs/communities.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

CommunityType = Literal["open", "admin-approved", "private"]
TYPES: tuple[str, ...] = ("open", "admin-approved", "private")


@dataclass(frozen=True)
class CommunitiesConfig:
    default_type: CommunityType = "open"
    allow_provision: bool = True
    allow_bring_own: bool = True
    max_upload_bytes: int = 1024 * 1024
    profile_fetch_timeout_seconds: float = 3.0
    banner_fetch_timeout_seconds: float = 10.0
    delete_pds_records: bool = True
    reconcile_after_seconds: float = 300.0
    max_active_invites: int = 500
    #: Audit entries of refused actions (`outcome: denied`) are removed after this many days;
    #: 0 keeps them. Every other entry is kept (docs/communities.md, "Audit of denials").
    denied_audit_retention_days: int = 90


def check_limits(config: Any) -> None:
    """`communities.max_upload_bytes` must fit in `server.max_upload_bytes` (the HTTP
    server's body cap): a larger image would be cut off before the plugin sees it."""
    from daemon.plugin import ConfigError

    plugin = config.plugin("communities")
    server = config.server.max_upload_bytes
    if plugin.max_upload_bytes > server:
        raise ConfigError(
            f"is {plugin.max_upload_bytes}, more than server.max_upload_bytes ({server}), the "
            "HTTP server's cap on upload bodies: lower it or raise server.max_upload_bytes",
            "communities.max_upload_bytes")
    if plugin.max_upload_bytes < 1:
        raise ConfigError("must be a positive number of bytes", "communities.max_upload_bytes")
    if plugin.banner_fetch_timeout_seconds <= 0:
        raise ConfigError("must be positive", "communities.banner_fetch_timeout_seconds")
    if plugin.denied_audit_retention_days < 0:
        raise ConfigError("must be 0 (keep) or a number of days", "communities.denied_audit_retention_days")
    if plugin.reconcile_after_seconds <= 0:
        raise ConfigError("must be positive", "communities.reconcile_after_seconds")
    if plugin.max_active_invites < 1:
        raise ConfigError("must be 1 or more", "communities.max_active_invites")
