"""The event stream: the outbox read back in commit order, for pulls and WebSocket
subscribers (docs/events.md).

A cursor is the outbox ``seq`` of the last event a reader has passed (seen or filtered
out), encoded as every cursor of the API is (`daemon.http.base.encode_cursor`). What an
app may hear of was decided when each event was recorded (``events.audience``, from
`CommunitiesService.event_audience`, the decision webhook fan-out uses too).

Live events reach subscribers through one reader, the hub: woken after each commit (the
`cr_event` hook) and once a second (events written by another process, e.g. the
operator's CLI), it reads what follows its position once and hands each subscriber the
events its filter takes. A subscriber replays from its cursor with its own reads first;
it goes live only when a read finds nothing more and the hub handed out nothing while it
read (``dirty``), so no event falls between replay and live, and ``seq`` order drops any
event seen twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from daemon.plugin import ApiError, encode_cursor, hookimpl
from daemon.plugin import EventKind
from daemon.plugin.events import AppSet, Audience, event_data_for
from daemon.plugin.events import Outbox
from daemon.plugin import Row

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application
    from plugins.events.metrics import StreamMetrics
    from plugins.events.settings import EventsConfig

log = logging.getLogger("commonroom.events")

#: Events one pull may return (and one replay read takes).
MAX_LIMIT = 1000
#: Outbox rows one read looks through: a filter that takes few events still answers fast,
#: with a cursor past the rows it looked at.
SCAN_WINDOW = 10_000
#: Reads one pull makes before it answers with what it found (an empty page whose cursor
#: moved means: pull again at once).
MAX_READS = 20
#: Longest long-poll (`wait`), in seconds.
MAX_WAIT = 30.0
#: Close codes of the WebSocket (docs/events.md, "Close codes").
CLOSE_GOING_AWAY = 1001
CLOSE_SLOW_CONSUMER = 4008
CLOSE_CURSOR_EXPIRED = 4010
#: Seconds between the hub's reads when nothing woke it.
POLL_SECONDS = 1.0


def known_kinds(app: "Application") -> tuple[str, ...]:
    """The event kinds an app may filter on: every kind the plugins declared
    (`cr_event_kinds`, the built-in ones included), as webhooks accept."""
    return tuple(app.event_kinds)


def stream_of(app: "Application") -> "EventStream":
    """The application's running stream (registered by the plugin's `cr_services`)."""
    return app.extensions["events"]  # type: ignore[no-any-return]


@hookimpl
def cr_event(app: Any, event: Any) -> None:
    """After each commit, wake the hub (registered with the plugin's package, which imports
    it). Plain def: the hub is woken in commit order, before any other observer awaits."""
    stream_of(app).notify()


def invalid_cursor(message: str = "The cursor is not one this service issued.") -> ApiError:
    return ApiError(400, "invalid_cursor", message)


def cursor_expired(oldest: int) -> ApiError:
    oldest_cursor = encode_cursor([oldest])
    return ApiError(410, "cursor_expired",
                    f"Events before this cursor were pruned (events.retention_days). The oldest cursor "
                    f"still replayable is {oldest_cursor}; events between yours and it are lost to "
                    "this stream.", details={"oldestCursor": oldest_cursor})


@dataclass(frozen=True)
class Filter:
    """What one reader takes: the app's events, maybe only some kinds or one community."""

    app_id: str
    kinds: frozenset[str] | None = None
    community_did: str | None = None

    def takes(self, type: str, community_did: str | None, audience: Audience) -> bool:
        return (audience.admits(self.app_id) and (self.kinds is None or type in self.kinds)
                and (self.community_did is None or community_did == self.community_did))


def event_message(row: Row, app_id: str, kinds: Mapping[str, EventKind]) -> bytes:
    """An event as the stream shows it to `app_id` (one WebSocket message, one item of a
    pull): the webhook body (`Event.payload`: type, timestamp, data) after the event id (the
    webhook-id header of its deliveries), then its cursor. SQLite built the rest
    (`Outbox.after`). An app that may not see the people the event names (``events.people``,
    the roster rule of `event_audience`) gets the data without them (`event_data_for`, by
    the kind's declared person keys, `kinds`: ``app.event_kinds``), as its webhooks do."""
    body: str = row["body"]
    if not AppSet.from_stored(row["people"]).has(app_id):
        whole = json.loads(body)
        whole["data"] = event_data_for(kinds.get(row["type"]), whole["data"], sees_people=False) or {}
        body = json.dumps(whole, separators=(",", ":"), ensure_ascii=False)
    return (body[:-1] + ',"cursor":"' + encode_cursor([row["seq"]]) + '"}').encode()


@dataclass
class Page:
    rows: list[Row]
    cursor: int
    more: bool


@dataclass(eq=False)
class Subscriber:
    """One WebSocket subscription, as the hub sees it."""

    filter: Filter
    last_seq: int
    #: Called (once) when the subscriber must go: (close code, reason).
    close: Callable[[int, str], None]
    live: bool = False
    dirty: bool = False
    closing: bool = False
    queue: deque[tuple[int, bytes]] = field(default_factory=deque)
    queued_bytes: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class EventStream:
    """The stream's running parts for one application (``app.extensions["events"]``)."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        self.subscribers: set[Subscriber] = set()
        self.per_app: dict[str, int] = {}
        self.head = 0
        self.metrics: StreamMetrics | None = None
        self.stopping = False
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def config(self) -> "EventsConfig":
        return self.app.config.plugin("events")

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.head = (await Outbox.bounds(self.app.db))[1]
        self._task = self.app.spawn(self._run(), name="events.hub")
        self.app.spawn(self._watch_stopping(), name="events.stopping")

    async def _watch_stopping(self) -> None:
        await self.app.stopping.wait()
        self.stop_clients()

    def stop_clients(self) -> None:
        """Shutdown: close every subscriber with 1001 and answer every long-poll now."""
        self.stopping = True
        self._stopped.set()
        for sub in list(self.subscribers):
            self.close_subscriber(sub, CLOSE_GOING_AWAY, "server shutting down; reconnect with your last cursor")

    async def stop(self) -> None:
        self.stop_clients()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def notify(self) -> None:
        """An event was committed (`cr_event`)."""
        self._wake.set()

    # ---------------------------------------------------------------- reads

    async def check_cursor(self, after: int) -> None:
        """400 `invalid_cursor` for a cursor past the newest event, 410 `cursor_expired`
        for one older than what retention kept."""
        oldest, head = await Outbox.bounds(self.app.db)
        if after < 0 or after > head:
            raise invalid_cursor("The cursor is ahead of this service's events: it is not one this "
                                 "service issued.")
        if after < oldest - 1:
            raise cursor_expired(oldest - 1)

    async def now(self) -> int:
        """The cursor of "now": after the newest event."""
        return (await Outbox.bounds(self.app.db))[1]

    async def read(self, f: Filter, after: int, limit: int) -> Page:
        """Events after `after` that `f` takes, up to `limit`, looking through at most
        `SCAN_WINDOW` outbox rows; the cursor is past everything looked at."""
        oldest, head = await Outbox.bounds(self.app.db)
        if after < oldest - 1:
            raise cursor_expired(oldest - 1)
        upto = min(after + SCAN_WINDOW, head)
        if upto <= after:
            return Page([], after, False)
        kinds = sorted(f.kinds) if f.kinds is not None else None
        rows = await Outbox.after(self.app.db, after, upto, app_id=f.app_id, kinds=kinds,
                                        community_did=f.community_did, limit=limit)
        if len(rows) == limit:
            return Page(rows, rows[-1]["seq"], True)
        return Page(rows, upto, upto < head)

    async def pull(self, f: Filter, after: int, limit: int, wait: float) -> Page:
        """A pull: reads until it finds events, catches up or has made `MAX_READS`; with
        `wait`, a caught-up pull waits that long for the next event it takes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        reads = 0
        while True:
            changed = self._changed  # before the read: a commit during it wakes the wait
            page = await self.read(f, after, limit)
            reads += 1
            after = page.cursor
            if page.rows or (page.more and reads >= MAX_READS):
                return page
            if page.more:
                continue
            remaining = deadline - loop.time()
            if remaining <= 0 or self.stopping:
                return page
            await self._wait_for_change(changed, remaining)

    async def _wait_for_change(self, changed: asyncio.Event, timeout: float) -> None:
        waits = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(self._stopped.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    # ---------------------------------------------------------------- subscribers

    def register(self, sub: Subscriber) -> None:
        self.subscribers.add(sub)
        self.per_app[sub.filter.app_id] = self.per_app.get(sub.filter.app_id, 0) + 1

    def unregister(self, sub: Subscriber) -> None:
        if sub in self.subscribers:
            self.subscribers.discard(sub)
            left = self.per_app.get(sub.filter.app_id, 1) - 1
            if left > 0:
                self.per_app[sub.filter.app_id] = left
            else:
                self.per_app.pop(sub.filter.app_id, None)

    def subscribers_of(self, app_id: str) -> int:
        return self.per_app.get(app_id, 0)

    async def replay(self, sub: Subscriber, send: Callable[[Sequence[bytes]], Any]) -> None:
        """Send what follows the subscriber's cursor, then switch it to live events.
        `send(messages)` writes them and returns an awaitable that completes once they are
        flushed to the connection."""
        while not sub.closing:
            sub.dirty = False
            page = await self.read(sub.filter, sub.last_seq, MAX_LIMIT)
            if page.rows:
                await send([event_message(r, sub.filter.app_id, self.app.event_kinds) for r in page.rows])
                self.record_sent(len(page.rows))
            sub.last_seq = max(sub.last_seq, page.cursor)
            if not page.more and not sub.dirty:
                sub.live = True  # no await since the check: nothing the hub sent is missed
                return

    def record_sent(self, count: int) -> None:
        if self.metrics is not None:
            self.metrics.sent.inc(count)

    def close_subscriber(self, sub: Subscriber, code: int, reason: str) -> None:
        if sub.closing:
            return
        sub.closing = True
        sub.queue.clear()
        sub.queued_bytes = 0
        sub.wake.set()
        if code == CLOSE_SLOW_CONSUMER and self.metrics is not None:
            self.metrics.slow_closes.inc()
        try:
            sub.close(code, reason)
        except Exception:  # noqa: BLE001 (a closed connection; it goes away all the same)
            log.debug("closing a subscriber failed", exc_info=True)
        self.unregister(sub)

    # ---------------------------------------------------------------- the hub

    async def _run(self) -> None:
        while not self.stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._pump()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event stream hub pass failed")

    async def _pump(self) -> None:
        if not self.subscribers:
            # Nobody to hand events to: move past them without reading them. Long-polls only
            # need the signal; they read for themselves.
            head = (await Outbox.bounds(self.app.db))[1]
            if not self.subscribers:  # (a subscriber that came meanwhile needs the full read)
                if head > self.head:
                    self.head = head
                    self._signal_change()
                return
        while True:
            rows = await Outbox.after(self.app.db, self.head, 2 ** 62, app_id=None, kinds=None,
                                            community_did=None, limit=MAX_LIMIT)
            if not rows:
                return
            self.head = rows[-1]["seq"]
            self._dispatch(rows)
            self._signal_change()
            if len(rows) < MAX_LIMIT:
                return

    def _signal_change(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()  # long-polls read again

    def _dispatch(self, rows: Iterable[Row]) -> None:
        if not self.subscribers:
            return
        bound = self.config.subscriber_buffer_bytes
        prepared = [(r["seq"], r["type"], r["community_did"],
                     Audience.from_stored(r["audience"], r["people"]), r) for r in rows]
        messages: dict[tuple[int, bool], bytes] = {}
        for sub in list(self.subscribers):
            if sub.closing:
                continue
            if not sub.live:
                sub.dirty = True  # its replay reads these itself
                continue
            took = False
            for seq, type, community, audience, row in prepared:
                if seq <= sub.last_seq:
                    continue
                sub.last_seq = seq
                if not sub.filter.takes(type, community, audience):
                    continue
                shown = audience.shows_people_to(sub.filter.app_id)
                message = messages.get((seq, shown))
                if message is None:
                    message = messages[(seq, shown)] = event_message(row, sub.filter.app_id, self.app.event_kinds)
                sub.queue.append((seq, message))
                sub.queued_bytes += len(message)
                took = True
            if sub.queued_bytes > bound:
                self.close_subscriber(sub, CLOSE_SLOW_CONSUMER,
                            "slow consumer: the send buffer passed its bound; reconnect with your last cursor")
            elif took:
                sub.wake.set()


def parse_kinds(app: "Application", raw: str | None) -> frozenset[str] | None:
    """`kinds=a,b` (comma-separated): None for every kind; 400 naming an
    unknown kind."""
    if raw is None or raw == "":
        return None
    known = known_kinds(app)
    kinds = [k.strip() for k in raw.split(",") if k.strip()]
    if len(kinds) > 64:
        raise ApiError(400, "invalid_kinds", "At most 64 kinds.")
    for k in kinds:
        if k not in known:
            shown = k if len(k) <= 100 and k.isprintable() else repr(k[:100])
            raise ApiError(400, "unknown_kind", f"Unknown event kind {shown!s}: known kinds are "
                           f"{', '.join(known)}.", details=[{"field": "kinds", "message": f"unknown kind {shown}"}])
    return frozenset(kinds) or None
