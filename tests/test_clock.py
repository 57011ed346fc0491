"""The injected clock can sleep: on the fake clock, a sleep ends when the test advances
time past its deadline, never by itself."""

from __future__ import annotations

import asyncio

from daemon.base import Clock, FakeClock


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_fake_sleep_ends_when_advance_passes_its_deadline_and_not_before():
    clock = FakeClock()
    woke: list[str] = []

    async def nap(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.ensure_future(nap("hour", 3600)), asyncio.ensure_future(nap("minute", 60))]
    await settle()
    assert woke == [] and clock.sleepers == 2
    clock.advance(59)
    await settle()
    assert woke == []
    clock.advance(1)
    await settle()
    assert woke == ["minute"]
    clock.advance(10_000)
    await settle()
    assert woke == ["minute", "hour"] and clock.sleepers == 0
    await asyncio.gather(*tasks)


async def test_a_zero_fake_sleep_returns_at_once_and_a_cancelled_one_is_forgotten():
    clock = FakeClock()
    await asyncio.wait_for(clock.sleep(0), 1)
    task = asyncio.ensure_future(clock.sleep(5))
    await settle()
    task.cancel()
    await settle()
    assert task.cancelled() and clock.sleepers == 0
    clock.advance(10)  # waking a cancelled sleep is not an error


async def test_wait_returns_on_the_event_or_on_the_clock_whichever_comes_first():
    clock = FakeClock()
    event = asyncio.Event()
    by_time = asyncio.ensure_future(clock.wait(event, 30))
    await settle()
    assert not by_time.done()
    clock.advance(30)
    assert await asyncio.wait_for(by_time, 1) is False

    by_event = asyncio.ensure_future(clock.wait(event, 30))
    await settle()
    event.set()
    assert await asyncio.wait_for(by_event, 1) is True
    assert clock.sleepers == 0


async def test_the_real_clock_sleeps_and_waits_in_real_time():
    clock = Clock()
    await clock.sleep(0.01)
    assert await clock.wait(asyncio.Event(), 0.01) is False
    event = asyncio.Event()
    event.set()
    assert await clock.wait(event, 10) is True
