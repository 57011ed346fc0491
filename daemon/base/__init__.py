"""The bottom layer: what every other layer shares. It imports nothing of ``daemon`` and
nothing of Tornado, so ``daemon/http``, ``daemon/security``, ``daemon/atproto`` and
``daemon/runtime`` all use these without copying each other's helpers (``daemon.plugin``
exports them all):

- the types: :class:`ApiError` (an error answered as JSON) and :class:`Principal` (who is
  calling);
- time, passed in (`Clock`, `FakeClock`, `iso`), so tests step a fake clock instead of
  sleeping. Code that waits for time to pass (a retry's backoff, the next due delivery)
  waits on the clock too: ``await clock.sleep(seconds)``, or ``await clock.wait(event,
  timeout)`` for "this event, or that much time, whichever comes first". On the real clock
  these are asyncio's; on `FakeClock` they return when a test's ``clock.advance(...)``
  passes the deadline, so a test steps over an hour's backoff without waiting for it;
- keyed locks (`KeyedLocks`), one per community, record, account or OAuth session.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import heapq
import itertools
import time
from time import monotonic as _monotonic
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.client import responses
from typing import Any, AsyncIterator

_DEFAULT_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 429: "rate_limited", 500: "internal_error",
    502: "upstream_error", 503: "unavailable",
}


class ApiError(Exception):
    """An error answered as JSON with `status`."""

    def __init__(self, status: int, code: str | None = None, message: str | None = None,
                 details: Any = None, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.code = code or _DEFAULT_CODES.get(status, "error")
        self.message = message or responses.get(status, "Error")
        self.details = details
        self.headers = headers or {}
        super().__init__(f"{status} {self.code}: {self.message}")

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details is not None:
            out["details"] = self.details
        return out


@dataclass(frozen=True)
class Principal:
    """Who is calling: an app (API key) or a person (browser session). Read-only: one
    object may serve several requests (API-key principals are cached)."""

    kind: str                          # "app" or "session"
    did: str | None = None             # the session's user
    handle: str | None = None
    app_id: str | None = None
    app_owner_did: str | None = None
    session_id: str | None = None      # hash of the sid cookie
    csrf_token: str | None = None
    rate_limit: tuple[int, float] | None = None  # an app's custom (requests, window)
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ the clock

class Clock:
    """Wall-clock and monotonic time for the daemon."""

    def time(self) -> float:
        return time.time()

    #: Monotonic seconds (`time.monotonic` itself: read on every request, by the rate
    #: limiter and the point caches; a fake clock overrides it with a method).
    monotonic = staticmethod(_monotonic)

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.time(), tz=dt.timezone.utc)

    def iso_now(self) -> str:
        return iso(self.time())

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock (at once for 0 or less)."""
        await asyncio.sleep(max(0.0, seconds))

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Wait until `event` is set or `timeout` seconds passed on this clock, whichever
        comes first; whether the event is set."""
        if event.is_set():
            return True
        waiter = asyncio.ensure_future(event.wait())
        sleeper = asyncio.ensure_future(self.sleep(timeout))
        try:
            await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, sleeper):
                task.cancel()
            await asyncio.gather(waiter, sleeper, return_exceptions=True)
        return event.is_set()


class FakeClock(Clock):
    """A clock that moves only when told to (tests): `advance` moves it and wakes every
    `sleep` (and `wait`) whose deadline it passes, in deadline order."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._wall = start
        self._mono = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting for the clock to move (tests wait for a task to
        reach its sleep before advancing)."""
        return sum(not f.done() for _, _, f in self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # a zero sleep still lets other tasks run, as asyncio's does
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._order), future))
        await future  # cancelling the sleep cancels the future; advance skips it


class Alarm:
    """Sleep until a deadline, or until an earlier one is set: the loop of background work
    that acts at a time (a poll that closes at T, a ban that expires), woken when new work
    comes due sooner. Times are seconds of `clock.time()` (the wall clock; a `FakeClock`
    moves it with ``advance``). `Application.spawn_deadlines` runs such a loop for you::

        alarm = Alarm(app.clock)
        while True:
            alarm.set(await next_closing_time())   # None: nothing due, sleep until woken
            await alarm.wait()                      # returns at the deadline or when woken
            await close_due_polls()

    and elsewhere, when a poll closing sooner is created: ``alarm.set(poll.closes_at)``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._due: float | None = None
        self._changed = asyncio.Event()

    @property
    def due(self) -> float | None:
        """The deadline the next `wait` returns at (None: none set)."""
        return self._due

    def set(self, at: float | None) -> None:
        """Wake at `at` (seconds of ``clock.time()``), or earlier if an earlier deadline is
        set already; None changes nothing. A deadline in the past wakes at once."""
        if at is not None and (self._due is None or at < self._due):
            self._due = at
            self._changed.set()

    def wake(self) -> None:
        """Wake the waiting loop now (it looks for work again)."""
        self._due = self._clock.time()
        self._changed.set()

    async def wait(self) -> None:
        """Return when the deadline has come (clearing it) or `wake` was called; with no
        deadline, sleep until one is set."""
        while True:
            self._changed.clear()
            if self._due is None:
                await self._changed.wait()
                continue
            remaining = self._due - self._clock.time()
            if remaining <= 0:
                self._due = None
                return
            await self._clock.wait(self._changed, remaining)


def iso(ts: float) -> str:
    """ISO 8601 UTC with milliseconds and a Z, the shape atproto records use."""
    d = dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


# ------------------------------------------------------------------ keyed locks
# Per-key asyncio locks (one community, one record, one account, one OAuth session), for
# work that spans a network call and a transaction. They live in this process: one daemon
# per database. This is the one keyed-lock registry: the write path (``app.writes``), the
# community accounts' sessions (``app.accounts``) and the OAuth grants each hold one.


class KeyedLocks:
    """asyncio locks by key, forgotten when nobody holds or waits for them (each key counts
    its users, so no private attribute of :class:`asyncio.Lock` is read). A task that
    already holds a key holds it again without waiting (a request that holds a record's
    lock around its checks, then runs the command that names the same lock)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._owners: dict[str, "asyncio.Task[object] | None"] = {}

    def __len__(self) -> int:
        return len(self._locks)

    def busy(self, key: str) -> bool:
        entry = self._locks.get(key)
        return entry is not None and entry[0].locked()

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        me = asyncio.current_task()
        if me is not None and self._owners.get(key) is me:
            yield  # held by this task already
            return
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                self._owners[key] = me
                try:
                    yield
                finally:
                    self._owners.pop(key, None)
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
