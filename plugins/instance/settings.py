"""The `instance` section of config.yaml (docs/configuration.md, "instance"): who runs the
instance. The config file is the source of truth for operators: nothing in the database
can make someone an operator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from daemon.plugin import ConfigError, check_range, is_did


@dataclass(frozen=True)
class InstanceConfig:
    #: DIDs of the people who run this instance (the console at /admin, instance-wide actions).
    operators: tuple[str, ...] = ()
    #: Who may create a community here: anyone signed in, only those the allowlist names,
    #: anyone after an operator approves their creation request, or only operators.
    creation: Literal["anyone", "allowlist", "approval", "operators"] = "anyone"
    #: Under `creation: allowlist`: DIDs, and handle domains as `*.example.org` (any handle
    #: under it) or `example.org` (that handle exactly). Operators may always create.
    creation_allowlist: tuple[str, ...] = ()
    #: Communities one person may have as primary admin (creation requests waiting count
    #: too); 0: no limit. Operators are not limited.
    max_communities_per_person: int = 0
    #: Apps (by app id) the operators trust with the instance's own events
    #: (`instance.report.created`, `instance.report.decided`): their moderation tools. No
    #: other app hears of them.
    trusted_apps: tuple[str, ...] = ()
    #: Where people write to appeal an operator's decision (an email address or a URL):
    #: shown to the admins of a suspended community and in ban refusals. Empty: the
    #: notices say "the instance's operators" only.
    appeal_contact: str = ""
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
        for i, entry in enumerate(self.creation_allowlist):
            wildcard = entry.startswith("*.")
            domain = entry[2:] if wildcard else entry
            looks_like_domain = bool(domain) and (wildcard or "." in domain) and not domain.startswith("did:") \
                and all(part and " " not in part and "*" not in part for part in domain.split("."))
            if not (is_did(entry) or looks_like_domain):
                raise ConfigError(f"not a DID or a handle domain: {entry!r} (e.g. did:plc:… or *.example.org)",
                                  f"instance.creation_allowlist[{i}]")
        for i, app_id in enumerate(self.trusted_apps):
            if not isinstance(app_id, str) or not app_id.startswith("app_") or len(app_id) > 64:
                raise ConfigError(f"not an app id: {app_id!r} (e.g. app_0123456789abcdef)",
                                  f"instance.trusted_apps[{i}]")
        check_range(self.max_communities_per_person, "instance.max_communities_per_person", minimum=0)
        if not isinstance(self.appeal_contact, str) or len(self.appeal_contact) > 300:
            raise ConfigError("a string of at most 300 characters (an email address or a URL)",
                              "instance.appeal_contact")
        check_range(self.audit_retention_days, "instance.audit_retention_days", minimum=0)
        check_range(self.prune_interval_seconds, "instance.prune_interval_seconds", above=0)

    def is_operator(self, did: str | None) -> bool:
        return bool(did) and did in self.operators

    def allows_handle(self, handle: str | None) -> bool:
        """Whether the allowlist names this handle by domain."""
        if not handle:
            return False
        handle = handle.lower()
        for entry in self.creation_allowlist:
            entry = entry.lower()
            if entry.startswith("*.") and handle.endswith(entry[1:]):
                return True
            if handle == entry:
                return True
        return False
