"""The background-work kit a plugin gets (docs/plugins.md, "Background work"): `app.spawn`,
`app.spawn_periodic`, `app.clock.wait`, and `Alarm` / `app.spawn_deadlines` ("run this at
T, wake me earlier if a new deadline comes"), shown with a throwaway polls plugin
(tests/plugin_polls) whose polls close at their time; and the `follower_app` fixture: on a
follower the closer does not run and a new poll goes to the primary, with no SQL on the
core's tables."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.plugin import Alarm
from daemon.plugin.testing import FakeClock
from tests.fixtures_webhooks import wait_until
from tests.plugin_polls import plugin as polls_plugin


@pytest.fixture
def extra_plugins():
    return (polls_plugin,)


async def polls(client: Any) -> list[dict[str, Any]]:
    resp = await client.get("/test/polls")
    assert resp.status == 200, resp.text
    return resp.json()["polls"]


async def open_poll(client: Any, seconds: float, question: str = "Lunch?") -> int:
    resp = await client.post("/test/polls", json={"question": question, "seconds": seconds})
    assert resp.status == 201, resp.text
    return resp.json()["id"]


async def settle_sleepers(clock: FakeClock, count: int = 1) -> None:
    """Wait (briefly, in memory) until `count` tasks sleep on the fake clock."""
    await wait_until(lambda: clock.sleepers >= count, 5, "a task to sleep on the clock")


async def test_an_alarm_wakes_at_its_deadline_or_earlier_when_a_sooner_one_is_set():
    clock = FakeClock()
    alarm = Alarm(clock)
    alarm.set(clock.time() + 60)
    waiting = asyncio.ensure_future(alarm.wait())
    await settle_sleepers(clock)
    clock.advance(59)
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.advance(1)
    await asyncio.wait_for(waiting, 5)
    assert alarm.due is None

    alarm.set(clock.time() + 600)
    waiting = asyncio.ensure_future(alarm.wait())
    await settle_sleepers(clock)
    alarm.set(clock.time() + 10)       # sooner: the waiter sleeps until then, not 600 s
    alarm.set(clock.time() + 300)      # later than the one set: changes nothing
    await asyncio.sleep(0)
    clock.advance(10)
    await asyncio.wait_for(waiting, 5)

    waiting = asyncio.ensure_future(alarm.wait())   # no deadline: sleeps until one is set
    await asyncio.sleep(0)
    assert not waiting.done()
    alarm.wake()
    await asyncio.wait_for(waiting, 5)


async def test_clock_wait_returns_when_the_event_is_set_or_the_time_passed():
    clock = FakeClock()
    event = asyncio.Event()
    waiting = asyncio.ensure_future(clock.wait(event, 30))
    await settle_sleepers(clock)
    clock.advance(30)
    assert await asyncio.wait_for(waiting, 5) is False
    waiting = asyncio.ensure_future(clock.wait(event, 30))
    await asyncio.sleep(0)
    event.set()
    assert await asyncio.wait_for(waiting, 5) is True


async def test_a_poll_closes_at_its_time_and_a_sooner_one_wakes_the_closer(app, client, clock):
    await open_poll(client, 3600, "Long")
    await settle_sleepers(clock)
    await open_poll(client, 60, "Short")        # sooner than the closer's deadline
    clock.advance(59)
    await asyncio.sleep(0.05)
    assert [p["open"] for p in await polls(client)] == [True, True]
    clock.advance(1)
    await wait_until(lambda: _open_of(client, "Short", False), 5, "the short poll to close")
    assert [p["open"] for p in await polls(client)] == [True, False]
    await settle_sleepers(clock)
    clock.advance(3600 - 60)
    await wait_until(lambda: _open_of(client, "Long", False), 5, "the long poll to close")


async def _open_of(client: Any, question: str, expected: bool) -> bool:
    return any(p["question"] == question and p["open"] is expected for p in await polls(client))


async def test_spawn_periodic_runs_now_and_every_interval(app, clock):
    app.repeat_periodic = True
    passes: list[bool] = []

    async def work(first: bool) -> None:
        passes.append(first)

    app.spawn_periodic("test.periodic", 300, work)
    await wait_until(lambda: passes == [True], 5, "the first pass")
    await settle_sleepers(clock)
    clock.advance(300)
    await wait_until(lambda: passes == [True, False], 5, "the second pass")


async def test_on_a_follower_no_poll_closes_and_a_new_one_goes_to_the_primary(app, client, clock, follower_app):
    await open_poll(client, 60, "Written on the primary")
    follower = await follower_app.start()
    assert follower.app.read_only
    assert follower.app.extensions["test_polls"]["closer"] is None   # spawn_deadlines(writes=True)
    assert "test_polls.closer" not in {t.get_name() for t in follower.app._tasks}

    listed = await polls(follower.client)
    assert [(p["question"], p["open"]) for p in listed] == [("Written on the primary", True)]
    refused = await follower.client.post("/test/polls", json={"question": "Here?", "seconds": 5})
    assert refused.status == 307 and refused.json()["error"] == "use_primary"
    assert refused.headers["Location"].endswith("/test/polls")
    assert len(await polls(follower.client)) == 1


async def test_an_app_key_made_on_the_primary_works_on_the_follower(app, client, follower_app):
    made = await follower_app.app_key(owner="did:plc:keyowner")
    follower = await follower_app.start()
    listed = await follower.client.get("/api/v1/communities", api_key=made["apiKey"])
    assert listed.status == 200, listed.text
    created = await follower.client.post("/api/v1/communities", api_key=made["apiKey"],
                                         json={"displayName": "Elsewhere"})
    assert created.status == 307 and created.json()["error"] == "use_primary"
