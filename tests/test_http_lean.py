"""membership/check is a lean route (daemon/http/lean.py): served without a Tornado
RequestHandler, it must still answer exactly as every other route does."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.fixtures_communities import seed_community
from tests.helpers import login_as, register_app


@pytest.fixture
def config_overrides():
    return {"rate_limits": {"api": {"requests": 6, "window_seconds": 60},
                            "failed_auth": {"requests": 2, "window_seconds": 60}},
            "server": {"max_body_bytes": 2048}}


async def setup(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    did = await seed_community(app, "did:plc:admin", members=("did:plc:member",))
    return alice, created["apiKey"], did


def check_path(did: str) -> str:
    return f"/api/v1/communities/{did}/membership/check"


def same_error(lean, base, status, code):
    assert lean.status == base.status == status, (lean.text, base.text)
    for resp in (lean, base):
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
    lean_body, base_body = lean.json(), base.json()
    assert lean_body["error"] == base_body["error"] == code
    return lean_body, base_body


async def test_check_answers_with_the_same_headers_as_other_routes(app, client):
    _, key, did = await setup(app, client)
    lean = await client.post(check_path(did), json={"userDid": "did:plc:member"}, api_key=key)
    base = await client.get("/api/v1/communities", api_key=key)
    assert lean.status == 200 and lean.json() == {"isMember": True, "isAdmin": False, "isPending": False}
    for name in ("Cache-Control", "X-Content-Type-Options", "Content-Type", "Date", "Server",
                 "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"):
        assert name in lean.headers and name in base.headers, name
        if name not in ("Date", "RateLimit-Remaining", "RateLimit-Reset"):
            assert lean.headers[name] == base.headers[name], name
    assert int(lean.headers["RateLimit-Remaining"]) == int(base.headers["RateLimit-Remaining"]) + 1
    assert re.fullmatch(r"[0-9a-f]{16}", lean.headers["X-Request-Id"])
    assert lean.headers["Content-Length"] == str(len(lean.body))
    echoed = await client.get(check_path(did), params={"userDid": "did:plc:admin"}, api_key=key,
                              headers={"X-Request-Id": "trace-42"})
    assert echoed.headers["X-Request-Id"] == "trace-42"
    assert echoed.json() == {"isMember": True, "isAdmin": True, "isPending": False}
    encoded = await client.post(check_path(did).replace("did:plc:", "did%3Aplc%3A"),
                                json={"userDid": "did:plc:nobody"}, api_key=key)
    assert encoded.json() == {"isMember": False, "isAdmin": False, "isPending": False}


async def test_check_refuses_bad_input_like_other_routes(app, client):
    alice, key, did = await setup(app, client)
    path = check_path(did)
    cases = [
        ({}, {}, 401, "unauthorized"),                                         # no credentials
        ({"api_key": "cr_" + "0" * 64}, {"api_key": "cr_" + "0" * 64}, 401, "invalid_api_key"),
        ({"session": alice}, {"session": alice}, 401, "unauthorized"),          # a session, not a key
    ]
    for lean_kw, base_kw, status, code in cases:
        lean = await client.post(path, json={"userDid": "did:plc:x"}, **lean_kw)
        base = await client.post(f"/api/v1/communities/{did}/members/join",
                                 json={"userDid": "did:plc:x"}, **base_kw)
        lean_body, base_body = same_error(lean, base, status, code)
        assert lean_body == base_body
    # the bad-key budget (2) is spent: a bad key now gets 429, a good one still passes
    lean = await client.post(path, json={"userDid": "did:plc:x"}, api_key="cr_" + "1" * 64)
    assert lean.status == 429 and lean.json()["error"] == "rate_limited" and "Retry-After" in lean.headers
    assert (await client.post(path, json={"userDid": "did:plc:x"}, api_key=key)).status == 200


async def test_check_validates_its_body_like_other_routes(app, client):
    _, key, did = await setup(app, client)
    path, base_path = check_path(did), f"/api/v1/communities/{did}/members/join"
    for kw, status, code in [
        ({"body": b"{nope", "headers": {"Content-Type": "application/json"}}, 400, "invalid_json"),
        ({"body": b"userDid=x", "headers": {"Content-Type": "application/x-www-form-urlencoded"}}, 415,
         "unsupported_media_type"),
        ({"json": {"userDid": "not-a-did"}}, 400, "invalid_request"),
        ({"body": b'{"userDid": "' + b"x" * 4096 + b'"}', "headers": {"Content-Type": "application/json"}},
         413, "payload_too_large"),
    ]:
        lean = await client.post(path, api_key=key, **kw)
        base = await client.post(base_path, api_key=key, **kw)
        lean_body, base_body = same_error(lean, base, status, code)
        assert lean_body == base_body
        assert lean.headers["X-Request-Id"] and lean.headers["Cache-Control"] == "no-store"


async def test_check_unknown_community_and_methods(app, client):
    _, key, did = await setup(app, client)
    missing = await client.post(check_path("did:plc:nosuchcommunity"), json={"userDid": "did:plc:x"}, api_key=key)
    assert missing.status == 404 and missing.json()["error"] == "community_not_found"
    lean = await client.put(check_path(did), json={"userDid": "did:plc:x"}, api_key=key)
    base = await client.put(f"/api/v1/communities/{did}/members/join", json={"userDid": "did:plc:x"}, api_key=key)
    lean_body, base_body = same_error(lean, base, 405, "method_not_allowed")
    assert lean_body == base_body
    head = await client.request("HEAD", check_path(did), params={"userDid": "did:plc:x"}, api_key=key)
    assert head.status == 405 and head.body == b""


async def test_check_counts_against_the_apps_rate_limit(app, client):
    _, key, did = await setup(app, client)
    statuses = [(await client.post(check_path(did), json={"userDid": "did:plc:x"}, api_key=key)).status
                for _ in range(7)]
    assert statuses == [200] * 6 + [429]
    limited = await client.post(check_path(did), json={"userDid": "did:plc:x"}, api_key=key)
    assert limited.json()["error"] == "rate_limited" and limited.headers["RateLimit-Remaining"] == "0"


async def test_a_failing_check_is_a_500_with_its_request_id(app, client, monkeypatch, caplog):
    from plugins.communities import api
    _, key, did = await setup(app, client)

    async def broken(*args, **kwargs):
        raise RuntimeError("index on fire")

    monkeypatch.setattr(api, "checked_status", broken)
    resp = await client.post(check_path(did), json={"userDid": "did:plc:x"}, api_key=key)
    assert resp.status == 500 and resp.json()["error"] == "internal_error"
    assert resp.headers["X-Request-Id"] in resp.json()["message"]
    assert "index on fire" in caplog.text


async def test_shutdown_waits_for_a_check_in_flight(app, client, monkeypatch):
    from plugins.communities import api
    _, key, did = await setup(app, client)
    release = asyncio.Event()
    real = api.checked_status

    async def slow(*args, **kwargs):
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(api, "checked_status", slow)
    pending = asyncio.ensure_future(client.post(check_path(did), json={"userDid": "did:plc:member"}, api_key=key))
    for _ in range(1000):                   # until the request reaches the server (a busy machine: seconds)
        if not await app.drain(0.01):
            break
        await asyncio.sleep(0.01)
    assert not await app.drain(0.05)       # the check is still in flight
    release.set()
    assert await app.drain(5)
    resp = await pending
    assert resp.status == 200 and resp.json()["isMember"] is True


async def test_start_eagerly_runs_like_a_task():
    import contextvars

    from daemon.http.lean import start_eagerly
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outside")
    seen: list[str] = []

    async def quick() -> None:
        var.set("inside")
        seen.append("quick")

    assert start_eagerly(quick(), contextvars.copy_context()) is None   # finished at once
    assert seen == ["quick"] and var.get() == "outside"                 # its context stayed its own

    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def waits() -> int:
        var.set("inside")
        value = await gate
        await asyncio.sleep(0)
        try:
            await failing
        except KeyError:
            pass
        return value + (var.get() == "inside")

    failing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    failing.set_exception(KeyError("x"))
    task = start_eagerly(waits(), contextvars.copy_context())
    assert task is not None and not task.done()
    gate.set_result(41)
    assert await task == 42 and var.get() == "outside"

    async def forever() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(forever(), contextvars.copy_context())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[-1] == "cancelled"


async def test_a_suspended_lean_coroutine_waits_like_a_task():
    """When a lean handler has to wait, the task that carries it on waits exactly as an
    asyncio Task would: a future it waits for may be awaited by others too, and cancelling
    the task cancels the future it waits for."""
    import contextvars

    from daemon.http.lean import start_eagerly
    loop = asyncio.get_running_loop()
    shared: asyncio.Future[str] = loop.create_future()

    async def first() -> str:
        return await shared

    task = start_eagerly(first(), contextvars.copy_context())
    assert task is not None
    other = asyncio.ensure_future(asyncio.shield(shared))   # a second waiter, as a plain task
    await asyncio.sleep(0)
    other_direct = asyncio.ensure_future(_await(shared))
    await asyncio.sleep(0)
    shared.set_result("ok")
    assert await task == "ok" and await other == "ok" and await other_direct == "ok"

    waited: asyncio.Future[None] = loop.create_future()

    async def second() -> None:
        await waited

    task = start_eagerly(second(), contextvars.copy_context())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waited.cancelled()                # as a Task cancels what it awaits


async def _await(future):
    return await future


def test_lean_routes_use_no_library_internals():
    """daemon/http/lean.py builds on public Tornado and asyncio APIs only (issue 23, item 8):
    no private name of another module, no asyncio future protocol flags."""
    import ast
    import inspect

    from daemon.http import lean
    tree = ast.parse(inspect.getsource(lean))
    imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    foreign = sorted(f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and node.attr.startswith("_")
                     and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                     and node.value.id in imported)
    assert not foreign, foreign
    assert "_asyncio_future_blocking" not in inspect.getsource(lean)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("tornado", "asyncio"):
            assert not any(a.name.startswith("_") for a in node.names), node.module
