"""The plugin system: entry points, disabling, hook rules."""

from __future__ import annotations

import pytest

from daemon import hookimpl
from daemon.runtime.app import create_app
from daemon.runtime.events import emit_tx
from daemon.runtime.plugins import PluginError, build_plugin_manager
from tests.conftest import build_config


def make_app(io_loop, state_dir, clock, overrides=None, extra=()):
    config, pm = build_config(state_dir, overrides, extra)
    return io_loop.run_sync(lambda: create_app(config, pm, clock=clock))


async def emit(app, type_="member.joined", fail_after=False):
    async with app.db.transaction("test.emit") as tx:
        event = await emit_tx(app, tx, type_, community_did="did:plc:comm", data={"memberDid": "did:plc:x"})
        if fail_after:
            raise RuntimeError("the change failed after the event was recorded")
    return event


async def test_entry_point_plugin_adds_a_route_and_observes_events(app, client):
    assert app.pm.has_plugin("hello"), "examples/commonroom-hello must be installed (scripts/test does it)"
    resp = await client.get("/hello")
    assert resp.status == 200 and resp.json() == {"greeting": "hello", "events": []}
    await emit(app, "member.joined")
    await emit(app, "record.created")
    assert (await client.get("/hello")).json()["events"] == ["member.joined", "record.created"]


def test_disabling_a_plugin_in_config_removes_it(io_loop, state_dir, clock):
    app = make_app(io_loop, state_dir, clock, {"plugins": {"disabled": ["hello", "webhooks"]}})
    try:
        assert not app.pm.has_plugin("hello") and not app.pm.has_plugin("webhooks")
        assert app.pm.has_plugin("apikeys")

        async def fetch():
            from tornado.httpserver import HTTPServer
            from tornado.testing import bind_unused_port
            from tests.helpers import Client
            sock, port = bind_unused_port()
            srv = HTTPServer(app)
            srv.add_sockets([sock])
            c = Client(f"http://127.0.0.1:{port}")
            try:
                return await c.get("/hello")
            finally:
                c.close()
                srv.stop()
        assert io_loop.run_sync(fetch).status == 404
    finally:
        io_loop.run_sync(app.shutdown)


def test_plugin_config_section_is_validated(tmp_path):
    with pytest.raises(Exception) as info:
        build_config(tmp_path, {"hello": {"greeting": 5}})
    assert "hello.greeting" in str(info.value)
    config, _ = build_config(tmp_path, {"hello": {"greeting": "hi"}})
    assert config.plugin("hello").greeting == "hi"


def test_misspelt_hookimpl_fails_at_start_up():
    class Typo:
        @hookimpl
        def cr_rotues(self, app):  # noqa: D401 - deliberately misspelt
            return []

    with pytest.raises(PluginError, match="cr_rotues"):
        build_plugin_manager(extra=[Typo()], load_entry_points=False)


def test_async_authenticate_implementation_is_refused():
    class Greedy:
        @hookimpl
        async def cr_authenticate(self, handler):
            return None

    with pytest.raises(PluginError, match="plain def"):
        build_plugin_manager(extra=[Greedy()], load_entry_points=False)


class Recorder:
    """Async implementations of broadcast hooks: each result is awaited."""

    def __init__(self):
        self.started = False
        self.in_tx = []

    @hookimpl
    async def cr_startup(self, app):
        self.started = True

    @hookimpl
    async def cr_event_tx(self, app, tx, event):
        await tx.execute("INSERT INTO sessions (id_hash, did, csrf_token, created_at, last_seen_at, "
                         "expires_at) VALUES (?, 'did:plc:x', 'c', 0, 0, 0)", (event.id,))
        self.in_tx.append(event.id)


def test_async_broadcast_hooks_are_awaited_and_share_the_transaction(io_loop, state_dir, clock):
    rec = Recorder()
    app = make_app(io_loop, state_dir, clock, extra=(rec,))
    try:
        assert rec.started
        event = io_loop.run_sync(lambda: emit(app))
        assert io_loop.run_sync(lambda: app.db.fetchval(
            "SELECT count(*) FROM sessions WHERE id_hash = ?", (event.id,))) == 1
        # a change that fails after recording its event leaves neither the event nor
        # what observers wrote in the same transaction
        with pytest.raises(RuntimeError):
            io_loop.run_sync(lambda: emit(app, fail_after=True))
        failed_id = rec.in_tx[-1]
        assert io_loop.run_sync(lambda: app.db.fetchval(
            "SELECT count(*) FROM events WHERE id = ?", (failed_id,))) == 0
        assert io_loop.run_sync(lambda: app.db.fetchval(
            "SELECT count(*) FROM sessions WHERE id_hash = ?", (failed_id,))) == 0
    finally:
        io_loop.run_sync(app.shutdown)


async def test_periodic_background_work_survives_a_failing_pass(app, clock):
    import asyncio
    calls = []

    async def work(first):
        calls.append(first)
        if len(calls) == 1:
            raise RuntimeError("first pass fails")

    app.repeat_periodic = True  # the fixture's app runs only start-up passes
    task = app.spawn_periodic("test.periodic", 60.0, work)
    for _ in range(100):
        if len(calls) >= 3:
            break
        await asyncio.sleep(0)  # let the task reach its wait, then step over the interval
        clock.advance(60.0)
    task.cancel()
    assert calls[:3] == [True, False, False]


async def test_periodic_work_waits_for_the_apps_clock(app, clock):
    import asyncio
    calls = []

    async def work(first):
        calls.append(first)

    app.repeat_periodic = True
    task = app.spawn_periodic("test.periodic", 60.0, work)
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls == [True]  # the interval has not passed on the app's clock
    clock.advance(59.0)
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls == [True]
    clock.advance(1.0)
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    assert calls == [True, False]


def test_the_service_does_not_load_the_example_plugin():
    """`scripts/serve` runs `.venv`'s commonroom: the example plugin, installed for the tests
    only, must not be among its plugins (the test process itself has it on its path)."""
    import subprocess
    import sys

    from tests.conftest import REPO
    code = ("from daemon.runtime.app import load_config\nfrom daemon.runtime.plugins import plugin_names\n"
            "config, pm = load_config('config.yaml')\nprint(','.join(plugin_names(pm)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            timeout=60, env={k: v for k, v in __import__("os").environ.items()
                                             if k not in ("PYTHONPATH", "COMMONROOM_EXTRA_PLUGINS")})
    assert result.returncode == 0, result.stderr
    names = result.stdout.strip().split(",")
    assert "communities" in names and "hello" not in names


# ------------------------------------------------------------------ declared dependencies


class Needs:
    """A plugin object that declares what it needs, with an optional migration directory."""

    def __init__(self, name, requires, migrations=None):
        self.__name__ = name
        self.requires = list(requires)
        self.migrations = migrations

    @hookimpl
    def cr_plugin_requires(self):
        return self.requires

    @hookimpl
    def cr_migrations(self):
        return (self.__name__, str(self.migrations)) if self.migrations else None


def test_disabling_communities_while_records_is_enabled_fails_at_start_up_naming_both(tmp_path, capsys):
    from daemon.runtime.main import main
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{state_dir: {tmp_path / 'state'}}}\nplugins: {{disabled: [communities]}}\n")
    assert main(["-c", str(config), "check-config"]) == 2
    err = capsys.readouterr().err
    assert "'records'" in err and "'communities'" in err and "plugins.disabled" in err, err
    assert "'webhooks'" in err, err  # every plugin left without what it needs is named


def with_dependents(name):
    """`name` and every plugin that needs it, directly or not."""
    from daemon.runtime.plugins import dependency_order, plugin_requirements
    pm = build_plugin_manager()  # installed plugins too (the noticeboard example needs communities)
    needs = plugin_requirements(pm)
    out = [name]
    for plugin in dependency_order(pm):
        if any(r in out for r in needs[plugin]):
            out.append(plugin)
    return out


@pytest.mark.parametrize("name", ["communities", "oauth", "apikeys"])
def test_disabling_a_plugin_together_with_those_that_need_it_starts(io_loop, tmp_path, clock, name):
    disabled = with_dependents(name)
    if name == "communities":
        assert {"records", "webhooks"} <= set(disabled)
    state = tmp_path / "state"
    state.mkdir()
    app = make_app(io_loop, state, clock, {"plugins": {"disabled": disabled}})
    try:
        assert not any(app.pm.has_plugin(name) for name in disabled)
        assert app.pm.has_plugin("hello")
    finally:
        io_loop.run_sync(app.shutdown)


def test_built_in_plugins_declare_that_records_and_webhooks_need_communities():
    from daemon.runtime.plugins import plugin_requirements
    pm = build_plugin_manager(load_entry_points=False)
    needs = plugin_requirements(pm)
    assert needs["records"] == ("communities",) and needs["webhooks"] == ("communities",)
    assert needs["communities"] == () and needs["apikeys"] == () and needs["oauth"] == ()


def test_a_plugin_migration_can_build_on_the_tables_of_the_plugin_it_needs(io_loop, tmp_path, clock):
    """Migrations run in dependency order: a plugin registered last (whose hooks pluggy
    calls first) still migrates after the plugin it needs, so it can put a trigger on the
    `members` table of `communities`."""
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "0001_joins.sql").write_text(
        "CREATE TABLE joins_seen (member_did TEXT NOT NULL);\n"
        "CREATE TRIGGER joins_seen_insert AFTER INSERT ON members BEGIN\n"
        "  INSERT INTO joins_seen (member_did) VALUES (NEW.member_did);\nEND;\n")
    state = tmp_path / "state"
    state.mkdir()
    app = make_app(io_loop, state, clock, extra=(Needs("joinwatch", ["communities"], migrations),))
    try:
        from daemon.runtime.app import migration_components
        order = [component for component, _ in migration_components(app.pm)]
        assert order.index("communities") < order.index("records")
        assert order.index("communities") < order.index("webhooks")
        assert order.index("communities") < order.index("joinwatch")
        assert io_loop.run_sync(lambda: app.db.fetchval("SELECT count(*) FROM joins_seen")) == 0
    finally:
        io_loop.run_sync(app.shutdown)


def test_a_requirement_that_is_not_installed_fails_naming_both():
    with pytest.raises(PluginError, match="'ghostly'.*'nowhere'.*not installed"):
        build_plugin_manager(extra=[Needs("ghostly", ["nowhere"])], load_entry_points=False)


def test_plugins_that_need_each_other_are_refused():
    with pytest.raises(PluginError, match="cycle.*'ping'.*'pong'|cycle.*'pong'.*'ping'"):
        build_plugin_manager(extra=[Needs("ping", ["pong"]), Needs("pong", ["ping"])], load_entry_points=False)


class _Communities:
    """A plugin that claims the communities plugin's service name."""

    @hookimpl
    def cr_services(self, app):
        return {"communities": object()}


def test_two_plugins_registering_one_service_fail_at_start_up_naming_both(io_loop, state_dir, clock):
    from daemon.runtime.config import ConfigError
    with pytest.raises(ConfigError) as err:
        make_app(io_loop, state_dir, clock, extra=(_Communities(),))
    assert "'communities'" in str(err.value) and "both register the service" in str(err.value)


def test_plugin_services_are_typed_attributes_and_absent_with_their_plugin(io_loop, state_dir, clock):
    app = make_app(io_loop, state_dir, clock, {"plugins": {"disabled": ["web", "webhooks"]}})
    try:
        assert app.webhooks is None and app.web is None
        assert app.communities is not None and app.apps is not None and app.oauth is not None
        assert "hello" in app.extensions  # a third-party plugin's own state, under its name
    finally:
        io_loop.run_sync(app.shutdown)


def test_the_authentication_hook_is_called_as_pluggy_would():
    """`FirstResult` (every authenticated request's call of `cr_authenticate`, without
    pluggy's per-call machinery): last registered first, first answer not None wins,
    plugins registered or unregistered later count, wrappers are honoured."""
    import pluggy

    from daemon.http.base import FirstResult

    pm = build_plugin_manager((), (), load_entry_points=False)
    call = FirstResult(pm.hook.cr_authenticate)

    class Handler:
        class request:  # noqa: N801 - a stand-in
            headers: dict = {}
        def get_cookie(self, name, default=None):
            return default

    handler = Handler()
    assert call(handler) is None is pm.hook.cr_authenticate(handler=handler)

    class Named:
        def __init__(self, answer):
            self.answer = answer

        @hookimpl
        def cr_authenticate(self, handler):
            return self.answer

    first, second = Named("first"), Named("second")
    pm.register(first)
    assert call(handler) == "first"
    pm.register(second)                       # registered later: asked first
    assert call(handler) == "second" == pm.hook.cr_authenticate(handler=handler)
    pm.unregister(second)
    assert call(handler) == "first"
    pm.register(Named(None))                  # None: the next one answers
    assert call(handler) == "first"

    class Wrapper:
        @pluggy.HookimplMarker("commonroom")(wrapper=True)
        def cr_authenticate(self, handler):
            result = yield
            return f"wrapped {result}"

    pm.register(Wrapper())
    assert call(handler) == "wrapped first" == pm.hook.cr_authenticate(handler=handler)

    class NoArgument:
        @hookimpl
        def cr_authenticate(self):
            return "no argument"

    pm2 = build_plugin_manager((), (NoArgument(),), load_entry_points=False)
    assert FirstResult(pm2.hook.cr_authenticate)(handler) == "no argument"
