"""The Application: config, plugins, store, clock, outbound HTTP, background tasks."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import logging
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Iterable, Mapping, TypeVar

import pluggy
import tornado.web

from daemon.http import apidocs
from daemon.base import Alarm, Clock
from daemon.runtime.config import Config, ConfigError
from daemon.runtime.declarations import Declarations, EventKind, check_user_methods, collect as collect_declarations
from daemon.http.base import BaseHandler, FirstResult, HealthHandler, NotFoundHandler
from daemon.http.accesslog import AccessLog
from daemon.http.lean import LeanDelegate, LeanHandler
from daemon.atproto import proofs
from daemon.atproto import xrpc
from daemon.http.metrics import Metrics, MetricsHandler
from daemon.runtime.plugins import build_plugin_manager, dependency_order, results_by_plugin, results_in_call_order
from daemon.security.ratelimit import RateLimiter
from daemon.http.routing import RouteTable
from daemon.http.server import ConnectionLimits
from daemon.security.secretbox import SecretBox, parse_key
from store.db import Database
from store.migrate import CORE_MIGRATIONS, migrate

if TYPE_CHECKING:  # pragma: no cover
    from daemon.atproto.lexicons import Lexicons
    from daemon.runtime.backup import SigningKey
    from daemon.runtime.replication import Follower
    from daemon.runtime.replication import Primary as ReplicationPrimary
    from daemon.runtime.services import AppsService, CommunitiesService, OAuthService, WebhooksService, WebService

S = TypeVar("S")

log = logging.getLogger("commonroom")
_access_log = logging.getLogger("commonroom.access")

# httpcore (under httpx, our outbound client) tries to import the optional `sniffio` on
# every request; when it is not installed each attempt walks sys.path (~0.7 ms a request).
# Record its absence once.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


def load_config(path: str | os.PathLike[str], *, extra_plugins: Iterable[Any] = (),
                load_entry_points: bool = True) -> tuple[Config, pluggy.PluginManager]:
    """Read `config.yaml` with the sections of the plugins it enables.

    Besides the default plugins and entry points, `COMMONROOM_EXTRA_PLUGINS` may name
    plugin objects as comma-separated ``module`` or ``module:attribute`` (development and
    tests: a plugin that is not installed as a distribution)."""
    disabled = Config.peek_disabled_plugins(path)
    extra = [*env_plugins(os.environ.get("COMMONROOM_EXTRA_PLUGINS", "")), *extra_plugins]
    pm = build_plugin_manager(disabled, extra, load_entry_points)
    collect_declarations(pm)  # a bad declaration stops every command, `migrate` too
    return Config.load(path, plugin_sections(pm), frozenset(disabled)), pm


def env_plugins(spec: str) -> list[Any]:
    import importlib
    out = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        module_name, _, attr = item.partition(":")
        try:
            obj = importlib.import_module(module_name)
            out.append(getattr(obj, attr) if attr else obj)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load plugin {item!r}: {exc}", "COMMONROOM_EXTRA_PLUGINS") from None
    return out


def plugin_sections(pm: pluggy.PluginManager) -> dict[str, type]:
    sections: dict[str, type] = {}
    for result in pm.hook.cr_config_section():
        if result:
            name, section_type = result
            if name in sections:
                raise ConfigError(f"two plugins declare the config section {name!r}")
            sections[name] = section_type
    return sections


def migration_components(pm: pluggy.PluginManager) -> list[tuple[str, str | Path]]:
    """Core first, then each plugin's migrations after those of the plugins it requires."""
    from store.replication import MIGRATIONS as REPLICATION_MIGRATIONS
    components: list[tuple[str, str | Path]] = [("core", CORE_MIGRATIONS), ("replication", REPLICATION_MIGRATIONS)]
    for _name, result in results_by_plugin(pm, "cr_migrations", dependency_order(pm)):
        if result:
            components.append(result)
    return components


def state_files(config: Config, pm: pluggy.PluginManager) -> list[str]:
    """The generated key files plugins declare (`cr_state_files`)."""
    return [name for names in pm.hook.cr_state_files(config=config) for name in (names or [])]


def backup_keys(config: Config) -> list[SigningKey]:
    """The keys that sign and check backups, the signing one first: `storage.backup_key`,
    then `secret_key` and `previous_secret_keys` when configured (a key generated into the
    state directory travels inside the backup, so it proves nothing and is never used)."""
    from daemon.runtime.backup import SigningKey

    keys = []
    if config.storage.backup_key:
        keys.append(SigningKey("backup_key", parse_key(config.storage.backup_key)))
    if config.secret_key:
        try:
            keys.append(SigningKey("secret_key", parse_key(config.secret_key)))
        except ValueError as exc:
            raise ConfigError(str(exc), "secret_key") from None
        keys += [SigningKey("secret_key", parse_key(k)) for k in config.previous_secret_keys]
    return keys


async def migrate_with_backup(db: Database, config: Config, pm: pluggy.PluginManager) -> list[Any]:
    """Apply pending migrations; an existing database is backed up completely first
    (`storage.pre_migration_backups`), so an upgrade can always be undone."""
    from daemon.runtime import backup
    from store.migrate import pending

    components = migration_components(pm)
    keep = config.storage.pre_migration_backups
    from daemon import __version__
    plan, existing = await pending(db, components, version=__version__)
    if plan and existing and keep:
        parent = config.state_dir / "backups"
        dest = parent / f"pre-migrate-{backup.stamp()}"
        keys = backup_keys(config)
        await asyncio.to_thread(backup.backup, config.database_path, config.state_dir, dest,
                                declared_files=state_files(config, pm),
                                secret_key_configured=bool(config.secret_key),
                                signing_key=keys[0] if keys else None)
        await asyncio.to_thread(backup.prune, parent, keep, "pre-migrate-")
        log.warning("backed up %s to %s before applying %d migration(s)", config.database_path, dest, len(plan))
    return await migrate(db, components, version=__version__)


def load_secret_key(config: Config) -> SecretBox:
    """The key that seals secrets at rest: from config, or generated into the state dir."""
    previous = tuple(parse_key(k) for k in config.previous_secret_keys)
    if config.secret_key:
        try:
            return SecretBox(parse_key(config.secret_key), previous)
        except ValueError as exc:
            raise ConfigError(str(exc), "secret_key") from None
    path = config.state_dir / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        log.warning("no secret_key configured: generated one into %s. Back it up: without it the "
                    "stored credentials cannot be decrypted.", path)
    return SecretBox(parse_key(path.read_text()), previous)


# ------------------------------------------------------------------ calling hooks
# Request-time hook calls (an event's `cr_event_tx`, `cr_event`) are the Application's; loading
# the plugins that implement them is start-up's (daemon/runtime/plugins.py).


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def call_hook(hook: Any, **kwargs: Any) -> list[Any]:
    """Call a broadcast hook and await every awaitable result, in order: each
    implementation in pluggy's call order (last registered first, ``tryfirst``/``trylast``
    honoured), awaited before the next is called, so that one raising (a configuration error
    at start-up) leaves no coroutine of another made and never awaited. The results are a
    plain call's: the non-None ones."""
    if not hasattr(hook, "get_hookimpls"):  # a plain callable standing in for a hook
        return [await maybe_await(r) for r in hook(**kwargs)]
    out = []
    for impl in reversed(hook.get_hookimpls()):
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            continue
        result = await maybe_await(impl.function(**{arg: kwargs[arg] for arg in impl.argnames}))
        if result is not None:
            out.append(result)
    return out


class Application(tornado.web.Application):
    """The daemon's Tornado application. State hangs off this object, and everything it
    holds is declared in `__init__`: the core's parts, then the services plugins register
    (`cr_services`, interfaces in `daemon.runtime.services`)."""

    # Services other plugins reach (None while the plugin offering it is disabled).
    communities: CommunitiesService | None
    apps: AppsService | None
    webhooks: WebhooksService | None
    oauth: OAuthService | None
    web: WebService | None

    def __init__(self, config: Config, pm: pluggy.PluginManager, db: Database,
                 clock: Clock | None = None, declarations: Declarations | None = None) -> None:
        super().__init__(default_handler_class=NotFoundHandler, compress_response=False,
                         xsrf_cookies=False)
        self.config = config
        #: True on a follower: nothing may be written (its database is a read-only copy).
        #: Plugins start no background writers then (docs/scaling.md). The role is fixed
        #: for the process's life, so it is read from the config once here, not per request.
        self.read_only: bool = config.is_follower
        self.pm = pm
        #: What the plugins declared (event kinds, capabilities), checked at start-up.
        self.declarations = declarations if declarations is not None else collect_declarations(pm)
        self.db = db
        self.clock = clock or Clock()
        self.ratelimiter = RateLimiter(self.clock, config.rate_limits.max_tracked_keys)
        #: Open connections per client address: HTTP ones counted by the daemon's server,
        #: WebSocket subscribers by the routes that upgrade (daemon/http/server.py).
        self.connections = ConnectionLimits(config.server.max_connections_per_address,
                                            config.server.max_websockets_per_address,
                                            config.server.trusted_proxies)
        self.secrets = load_secret_key(config)
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Whether periodic work (`spawn_periodic`) runs again after its start-up pass. The
        #: test fixtures turn it off: a test that steps the fake clock runs the passes it
        #: wants itself, instead of racing the daemon's own.
        self.repeat_periodic = True
        self._inflight = 0
        self._draining: asyncio.Event | None = None   # while `drain` waits
        #: Set when the daemon begins to stop, before it waits for in-flight requests:
        #: long-lived answers (long-polls, WebSockets) end at once instead of holding the
        #: drain (`begin_stopping`).
        self.stopping = asyncio.Event()
        self._http: Any = None
        self._request_ids = itertools.count(1)
        self._request_id_prefix = secrets.token_hex(4)
        self.route_table = RouteTable(())
        self.routes: list[tuple] = []  # every route as served (OpenAPI, method ids)
        self.route_plugins: dict[str, str] = {}  # a route's pattern -> the plugin whose cr_routes gave it
        self.page_plugins: dict[type, str] = {}  # a plugin page's handler -> its plugin (pages.confine_pages)
        self._openapi: dict[str, Any] | None = None
        #: The XRPC methods and the lexicons they are checked against, built on first use
        #: (daemon/atproto/xrpc.py: `methods`, `lexicons`).
        self.xrpc_methods: dict[str, Any] | None = None
        self.xrpc_lexicons: Lexicons | None = None
        #: /api/v1/docs as sent, plain and gzipped: rendered once (daemon/http/apidocs.py)
        self.reference_page: tuple[bytes, bytes] | None = None
        self.metrics = Metrics(self)
        self.access_log = AccessLog(config.access_log.successful_reads, _access_log)
        #: `cr_authenticate`, called on every authenticated request (daemon/http/base.py)
        self.authenticators = FirstResult(pm.hook.cr_authenticate)
        self.proofs = proofs.Proofs(self)
        from daemon.atproto.accounts import AccountSessions
        from daemon.atproto.identity import IdentityCache
        from daemon.atproto.writes import Writes
        self.writes = Writes(self)  # the one PDS write path: intents, locks, reconciler
        from daemon.sync import Sync
        self.sync = Sync(self)  # the network's event stream (sync.source)
        self.accounts = AccountSessions()  # PDS sessions of the community accounts
        self.identity = IdentityCache()  # DID and handle resolution in flight
        self._lexicons: Lexicons | None = None
        #: Lean requests' tasks, referenced until they end (daemon/http/lean.py).
        self.request_tasks: set[asyncio.Task[None]] = set()
        # The plugins' services (declared above) and a third-party plugin's own state.
        self.communities = self.apps = self.webhooks = self.oauth = self.web = None
        #: The follower's watch on its copy (server.role: follower), or the replicated
        #: primary's heartbeat (replication.url); see daemon/runtime/replication.py.
        self.follower: Follower | None = None
        self.replication: ReplicationPrimary | None = None
        self.extensions: dict[str, Any] = {}
        self._services: dict[type, Any] = {}
        self._register_services()

    def _register_services(self) -> None:
        from daemon.runtime.services import SERVICE_NAMES, SERVICE_TYPES
        owners: dict[Any, str] = {}
        for plugin, result in results_by_plugin(self.pm, "cr_services", app=self):
            for key, service in (result or {}).items():
                interface = SERVICE_TYPES.get(key) if isinstance(key, str) else key
                for claimed in dict.fromkeys(filter(None, (key, interface))):
                    if claimed in owners:
                        what = claimed if isinstance(claimed, str) else claimed.__name__
                        raise ConfigError(f"plugins {owners[claimed]!r} and {plugin!r} both register the "
                                          f"service {what!r}")
                    owners[claimed] = plugin
                if isinstance(key, str) and key in SERVICE_NAMES:
                    setattr(self, key, service)
                elif isinstance(key, str):
                    self.extensions[key] = service
                elif not isinstance(key, type):
                    raise ConfigError(f"{plugin}.cr_services: a service is registered under a name or an "
                                      f"interface (a class), not {key!r}")
                if interface is not None:
                    self._services[interface] = service

    async def call_hook(self, hook: Any, **kwargs: Any) -> list[Any]:
        """Call a broadcast hook (``app.pm.hook.<name>``) with `kwargs` and await every
        awaitable result, in order (`call_hook`)."""
        return await call_hook(hook, **kwargs)

    async def check_action(self, action: str, actor_did: str | None, *, community_did: str | None = None,
                           app_id: str | None = None) -> None:
        """Ask every plugin's `cr_check_action` whether `actor_did` may do `action`; an
        implementation refuses by raising `ApiError`, which reaches the caller."""
        await self.call_hook(self.pm.hook.cr_check_action, app=self, action=action, actor_did=actor_did,
                             community_did=community_did, app_id=app_id)

    async def hold_action(self, action: str, actor_did: str | None, *, app_id: str | None = None,
                          data: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Ask every plugin's `cr_hold_action` whether `action` waits for approval: the
        first plugin's answer (a dict the caller shows), or None to go ahead now."""
        for answer in await self.call_hook(self.pm.hook.cr_hold_action, app=self, action=action,
                                           actor_did=actor_did, app_id=app_id, data=dict(data or {})):
            return dict(answer)
        return None

    async def page_notes(self, page: str, person_did: str) -> list[dict[str, Any]]:
        """Every plugin's `cr_page_notes` for a signed-in person on `page`, in plugin order."""
        notes: list[dict[str, Any]] = []
        for answer in await self.call_hook(self.pm.hook.cr_page_notes, app=self, page=page, person_did=person_did):
            notes.extend(answer)
        return notes

    async def community_notices(self, community_did: str, viewer_did: str | None, *,
                                admin: bool = False) -> list[dict[str, str]]:
        """Every plugin's `cr_community_notices` for this community and viewer, in order."""
        out: list[dict[str, str]] = []
        for answer in await self.call_hook(self.pm.hook.cr_community_notices, app=self,
                                           community_did=community_did, viewer_did=viewer_did, admin=admin):
            out.extend(answer)
        return out

    async def withheld_communities(self) -> list[str]:
        """The communities every plugin's `cr_withheld_communities` leaves out of discovery
        and search (suspended by an operator, ...)."""
        out: set[str] = set()
        for answer in await self.call_hook(self.pm.hook.cr_withheld_communities, app=self):
            if answer:
                out.update(answer)
        return sorted(out)

    def service(self, interface: type[S]) -> S | None:
        """The service registered for `interface` (a `Protocol` such as
        `daemon.plugin.CommunitiesService`, or a plugin's own interface class), or None
        when no enabled plugin offers it. Any plugin may ask; plugins publish services by
        returning ``{Interface: object}`` from `cr_services`."""
        return self._services.get(interface)

    @property
    def event_kinds(self) -> Mapping[str, EventKind]:
        """Every event kind the plugins declared (`cr_event_kinds`), by name: what apps may
        subscribe to (webhooks, the event stream)."""
        return self.declarations.event_kinds

    async def replica_lag_seconds(self) -> float | None:
        """/health's `replicaLagSeconds` (daemon/runtime/replication.py); None without replication."""
        from daemon.runtime.replication import replica_lag_seconds
        return await replica_lag_seconds(self)

    @property
    def lexicons(self) -> Lexicons:
        """The lexicons in the configured namespace, loaded on first use (validation of
        the records we write, daemon/atproto/lexicons.py)."""
        if self._lexicons is None:
            from daemon.atproto.lexicons import load_lexicons
            self._lexicons = load_lexicons(self.config.atproto.namespace)
        return self._lexicons

    def new_request_id(self) -> str:
        """16 hex digits for a request that brought no X-Request-Id: a random prefix chosen
        at start-up, then a counter (unique within this process's 4 billion requests, and
        across restarts but for a one-in-four-billion prefix clash). Not a secret."""
        return f"{self._request_id_prefix}{next(self._request_ids) & 0xFFFFFFFF:08x}"

    def openapi_document(self) -> dict[str, Any]:
        """The OpenAPI document of the routes this app serves (built once)."""
        if self._openapi is None:
            from daemon import __version__
            from daemon.http.openapi import build_document, event_webhooks
            self._openapi = build_document(self.routes, version=__version__, base_url=self.config.server.base_url,
                                           namespace=self.config.atproto.namespace, plugins=self.route_plugins,
                                           enums={"event_kinds": list(self.event_kinds),
                                                  "capabilities": sorted(
                                                      name for name, cap in self.declarations.capabilities.items()
                                                      if not cap.per_collection)})
            self._openapi["webhooks"] = event_webhooks(self.event_kinds.values(), {
                name: self.declarations.owner("event kind", name) or "" for name in self.event_kinds})
        return self._openapi

    def find_handler(self, request: Any, **kwargs: Any) -> Any:
        found = self.route_table.match(request)
        if found is not None:
            handler, target_kwargs, path_args, path_kwargs = found
            if isinstance(handler, type) and issubclass(handler, LeanHandler):
                return LeanDelegate(self, request, handler, target_kwargs, path_args)
            return self.get_handler_delegate(request, handler, target_kwargs, path_args, path_kwargs)
        # routes added later with add_handlers(), then the JSON 404
        return super().find_handler(request, **kwargs)

    def get_handler_delegate(self, request: Any, target_class: Any, target_kwargs: Any = None,
                             path_args: Any = None, path_kwargs: Any = None) -> Any:
        """Tornado's, with a `BaseHandler` route served by the class that fits the request's
        body (`BaseHandler.serving_class`: read whole when small, else streamed)."""
        if isinstance(target_class, type) and issubclass(target_class, BaseHandler):
            target_class = target_class.serving_class(request.headers, self.config.server.max_body_bytes)
        return super().get_handler_delegate(request, target_class, target_kwargs, path_args, path_kwargs)

    # ---------------------------------------------------------------- outbound HTTP

    @property
    def http(self) -> Any:
        """A shared `httpx.AsyncClient` for outbound calls (PDS, identity, OAuth).

        Every connection goes through the SSRF guard (daemon/security/netguard.py): only public
        addresses, plus `atproto.allowed_private_targets`. A refused target raises
        `daemon.security.netguard.RequestRefused` (an `httpx.ConnectError`); nothing is sent."""
        if self._http is None:
            import httpx

            from daemon.security.netguard import Guard, GuardedTransport
            cfg = self.config.atproto
            # Scheme rules (https, or http with atproto.allow_insecure_http) stay with the callers.
            guard = Guard(allow_http=True, allowed_targets=cfg.allowed_private_targets)
            self._http = httpx.AsyncClient(
                transport=GuardedTransport(guard, limits=httpx.Limits(
                    max_connections=100, max_keepalive_connections=20)),
                timeout=cfg.request_timeout_seconds, follow_redirects=False,
                headers={"User-Agent": "commonroom"})
        return self._http

    # ---------------------------------------------------------------- background work

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run `coro` as a background task owned by the app (cancelled at shutdown)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task %s failed", t.get_name(), exc_info=t.exception())

        task.add_done_callback(done)
        return task

    def spawn_periodic(self, name: str, interval: float,
                       work: Callable[[bool], Awaitable[Any]]) -> asyncio.Task[Any]:
        """Run ``work(first)`` now (``first=True``) and then every `interval` seconds of the
        app's clock (a test steps its `FakeClock` over the interval), as a background task;
        an exception is logged and the next pass runs anyway. Only the first pass runs while
        `repeat_periodic` is False."""
        async def loop() -> None:
            first = True
            while True:
                try:
                    await work(first)
                except Exception:
                    log.exception("background work %s failed; retrying in %.0f s", name, interval)
                if not self.repeat_periodic:
                    return
                first = False
                await self.clock.sleep(interval)

        return self.spawn(loop(), name=name)

    def spawn_deadlines(self, name: str, work: Callable[[], Awaitable[float | None]], *,
                        retry_seconds: float = 60.0, writes: bool = True) -> Alarm | None:
        """Run ``await work()`` now and again at each deadline it answers (seconds of
        ``clock.time()``; None: none until woken), as a background task; returns the
        `Alarm`, whose ``set(at)`` brings the next run earlier (``alarm.set(poll.closes_at)``
        when a poll closing sooner is created) and ``wake()`` runs it now. An exception is
        logged and the work runs again after `retry_seconds`. Work that `writes` (the
        default) does not run on a follower (``app.read_only``): None is returned there, and
        the primary does the work."""
        if writes and self.read_only:
            return None
        alarm = Alarm(self.clock)

        async def loop() -> None:
            while True:
                try:
                    alarm.set(await work())
                except Exception:
                    log.exception("background work %s failed; retrying in %.0f s", name, retry_seconds)
                    alarm.set(self.clock.time() + retry_seconds)
                await alarm.wait()

        self.spawn(loop(), name=name)
        return alarm

    # ---------------------------------------------------------------- in-flight requests

    def inflight_started(self) -> None:
        self._inflight += 1

    def inflight_finished(self) -> None:
        self._inflight -= 1
        if self._inflight <= 0:
            self._inflight = 0
            if self._draining is not None:
                self._draining.set()

    def begin_stopping(self) -> None:
        """The daemon stops: set `stopping` (SIGTERM, before `drain`; `shutdown` too)."""
        self.stopping.set()

    async def drain(self, timeout: float, arriving: Callable[[], int] | None = None) -> bool:
        """Wait until no request is in flight; False if `timeout` passed first. `arriving`
        (the server's `Server.receiving_bodies`) counts requests whose head is in and whose
        body is still coming: a small body is read whole before its handler starts, so such a
        request is not in flight yet, but it will be."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                if self._inflight:
                    self._draining = asyncio.Event()   # set by the last request to finish
                    await asyncio.wait_for(self._draining.wait(), max(0.0, deadline - loop.time()))
                elif arriving is not None and arriving():
                    if loop.time() >= deadline:
                        raise asyncio.TimeoutError
                    await asyncio.sleep(0.02)   # its body is on the way (bounded by body_timeout)
                else:
                    return True
        except asyncio.TimeoutError:
            log.warning("%d request(s) still running after %.0f s; stopping anyway",
                        self._inflight, timeout)
            return False

    async def shutdown(self) -> None:
        self.begin_stopping()
        timeout = self.config.server.shutdown_timeout_seconds
        await self.sync.stop()
        try:
            await asyncio.wait_for(call_hook(self.pm.hook.cr_shutdown, app=self), timeout)
        except asyncio.TimeoutError:
            log.warning("plugins did not stop within %.0f s", timeout)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        await self.db.close()

    # ---------------------------------------------------------------- logging

    def log_request(self, handler: tornado.web.RequestHandler) -> None:
        status = handler.get_status()
        seconds = handler.request.request_time()
        self.metrics.record_request(handler, status, seconds)
        if _access_log.isEnabledFor(logging.INFO if status < 400 else logging.WARNING):
            self.access_log.write(handler, status, seconds)


async def create_app(config: Config, pm: pluggy.PluginManager, *, clock: Clock | None = None,
                     start: bool = True, repeat_periodic: bool = True) -> Application:
    """Build the application and its routes, check what the plugins declared, migrate the
    store (a follower only checks its copy's schema), start the plugins' background work
    (periodic work after its start-up pass only with `repeat_periodic`). Nothing is
    migrated for plugins that fail their declarations (`cr_event_kinds`, `cr_capabilities`,
    `cr_lexicons`, method ids, routes)."""
    from daemon.runtime import replication
    from daemon.runtime.pages import confine_pages
    declarations = collect_declarations(pm)  # refuses a bad declaration before any migration
    db = replication.open_database(config)
    await db.open()
    try:
        app = Application(config, pm, db, clock, declarations)
        app.repeat_periodic = repeat_periodic
        routes: list[tuple] = [(r"/health", HealthHandler), (r"/metrics", MetricsHandler),
                               *apidocs.routes(),
                               *proofs.routes(), *xrpc.routes()]
        for plugin, contributed in results_in_call_order(pm, "cr_routes", app=app):
            for route in contributed or []:
                routes.append(route)
                app.route_plugins.setdefault(route[0], plugin)
        patterns = [r[0] for r in routes]
        duplicates = {p for p in patterns if patterns.count(p) > 1}
        if duplicates:
            raise ConfigError(f"two plugins claim the same route(s): {', '.join(sorted(duplicates))}")
        app.page_plugins = confine_pages(routes, app.route_plugins)
        app.route_table = RouteTable(routes)
        app.routes = routes
        check_user_methods(app, declarations.method_lexicons())
        # the Application's parts touch no table before this
        if config.is_follower:
            await replication.check_follower_schema(db, migration_components(pm))
        else:
            await migrate_with_backup(db, config, pm)
        app.metrics.name_routes(routes)
        for refresh in pm.hook.cr_metrics(app=app, registry=app.metrics.registry):
            if refresh is not None:
                app.metrics.add_refresh(refresh)
        if start:
            await start_background(app)
    except BaseException:
        if "app" in locals():
            await app.shutdown()
        else:
            await db.close()
        raise
    return app


async def start_background(app: Application) -> None:
    """The background work of a started app. A follower runs none that writes: no session
    clean-up, no reconciler, no network sync (and plugins check `app.read_only`)."""
    from daemon.runtime.replication import start_role
    start_role(app)
    if not app.read_only:
        from daemon.security.sessions import expire_sessions_pass
        app.spawn_periodic("sessions.janitor", 3600.0, lambda first: expire_sessions_pass(app))
    await call_hook(app.pm.hook.cr_startup, app=app)
    if not app.read_only:
        app.writes.start()
        await app.sync.start()
