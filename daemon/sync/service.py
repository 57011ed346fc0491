"""The sync component (``app.sync``): follows the network's event stream and hands the
relevant events to plugins in the transaction that saves the cursor (docs/sync.md).

Two tasks:

* the **reader** keeps a connection open (`daemon.sync.reader`, over the `websockets`
  client), dialling again after a failure, filters every frame as it arrives
  (`daemon.sync.filters`) and queues the relevant events;
* the **applier** takes up to ``sync.batch_size`` queued events, and in one transaction
  calls ``cr_sync_events_tx`` and saves the cursor; after the commit it calls
  ``cr_sync_events`` (work that needs the network, made durable in the transaction).

A connection that fails is dialled again after a backoff (1 s doubling up to
``sync.max_backoff_seconds``) slept on the application's clock. A batch whose transaction
fails is tried again the same way: the cursor never passes an event that was not applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Iterator

from daemon.sync.events import Interest, SyncEvent
from daemon.sync.filters import FilterState, FirehoseFilter, JetstreamFilter, StreamError
# daemon.sync.reader (websockets, pydantic-core) is imported when a stream is followed.
from store import sync as store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.sync")

_STOP = object()


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None



async def _call_hook(hook: Any, **kwargs: Any) -> list[Any]:
    """Call a broadcast hook and await each awaitable result, in order (the sync sits below
    the runtime layer, so it does not import `daemon.runtime.app.call_hook`)."""
    return [await result if inspect.isawaitable(result) else result for result in hook(**kwargs)]


class _Recheck:
    """A frame filtered out while the interest set may have been stale: filtered again
    after it is brought up to date."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | str) -> None:
        self.data = data


class Sync:
    """The application's network sync. ``state`` is ``off`` (``sync.source: off``),
    ``connecting``, ``live``, ``backoff`` (waiting to reconnect or to retry a batch) or
    ``stopped``."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        self.config = app.config.sync
        self.state = "off" if self.config.source == "off" else "stopped"
        self.cursor: int | None = None
        self.lag_seconds: float | None = None
        self.filter_state = FilterState()
        # Made with the stream's decoders only if there is a stream to follow (filters.py).
        self.filter: Any = None if self.config.source == "off" else \
            (JetstreamFilter if self.config.source == "jetstream" else FirehoseFilter)(self.filter_state)
        self.counts = {"frames": 0, "relevant": 0, "applied": 0, "batches": 0, "reconnects": 0}
        self._interests: list[Interest] = []
        self._marks: dict[str, Any] = {}
        self._interest_version = -1
        self._seen: int | None = None
        self._received: int | None = None  # the newest seq read from the stream
        self._writing: dict[str, int] = {}  # repos this service is writing to, and how many writes
        self._writes_done = asyncio.Event()
        self._saved: int | None = None
        self._from_live = False  # the stream refused our cursor: resume from now, not _saved
        self._failures = 0
        self._queue: asyncio.Queue[Any] | None = None
        self._connection: Any = None  # the open WebSocket connection (daemon.sync.reader)
        self._tasks: list[asyncio.Task[Any]] = []
        #: The last commit rev seen per followed repo (in stream order), to notice a gap.
        self._last_rev: dict[str, str] = {}

    @property
    def source_key(self) -> str:
        return f"{self.config.source} {self.config.url}"

    def health(self) -> dict[str, Any]:
        """``{state, cursor, lagSeconds}`` for ``/health``."""
        lag = None if self.lag_seconds is None else round(self.lag_seconds, 3)
        return {"state": self.state, "cursor": self.cursor, "lagSeconds": lag}

    # ---------------------------------------------------------------- own writes

    def note_own_commit(self, did: str, response: Any) -> None:
        """Remember a commit this service made (a PDS write's answer), so that the stream's
        copy of it is recognised (``SyncEvent.own``) and left alone."""
        commit = response.get("commit") if isinstance(response, dict) else None
        rev = commit.get("rev") if isinstance(commit, dict) else None
        if isinstance(rev, str):
            self.filter_state.note_own(did, rev)

    @contextlib.contextmanager
    def writing(self, did: str) -> Iterator[None]:
        """Around a write of this service to `did`'s repo: until its answer (and commit rev)
        is known, the stream's commits of that repo wait before they are applied, so one
        that arrives before the answer is still recognised as our own."""
        self._writing[did] = self._writing.get(did, 0) + 1
        try:
            yield
        finally:
            left = self._writing[did] - 1
            if left:
                self._writing[did] = left
            else:
                del self._writing[did]
                self._writes_done.set()
                self._writes_done = asyncio.Event()

    async def _recognise(self, event: SyncEvent) -> SyncEvent:
        """`event`, marked ``own`` if it is a commit this service made: a commit of a repo
        the service is writing to waits for those writes' answers first (bounded)."""
        if event.kind != "commit" or event.own:
            return event
        deadline = time.monotonic() + 2 * self.app.config.atproto.request_timeout_seconds
        while event.did in self._writing and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(self._writes_done.wait(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
        if (event.did, event.rev) in self.filter_state.own:
            return dataclasses.replace(event, own=True)
        return event

    # ---------------------------------------------------------------- interest

    async def load_interest(self, full: bool = False) -> None:
        """Bring the followed DIDs up to date (only what was added since the last load,
        unless `full`)."""
        if not self._interests:
            self._interests = [i for i in self.app.pm.hook.cr_sync_interest(app=self.app) if i is not None]
            collections = frozenset().union(*(i.collections for i in self._interests)) if self._interests else frozenset()
            self.filter_state.prefixes = tuple(sorted(c + "/" for c in collections))
            self.filter_state.decode = frozenset().union(*(i.decode for i in self._interests)) \
                if self._interests else frozenset()
        version = self.app.db.commits
        if full:
            self._marks.clear()
            self.filter_state.dids = set()
        for interest in self._interests:
            dids, self._marks[interest.name] = await interest.load(self.app.db, self._marks.get(interest.name))
            self.filter_state.dids.update(dids)
        self._interest_version = version

    def _interest_stale(self) -> bool:
        return self.app.db.commits != self._interest_version

    # ---------------------------------------------------------------- reading

    def receive(self, data: bytes | str) -> Any:
        """Filter one raw frame: the item to queue (an event, or a frame to filter again
        once the interest is up to date), or None."""
        self.counts["frames"] += 1
        got = self.filter(data)
        if isinstance(got, SyncEvent):
            self.counts["relevant"] += 1
            if got.seq >= 0:
                self._received = got.seq
            return got
        if got is not None:
            self._received = got
            if self._interest_stale():
                return _Recheck(data)
            self._seen = got
        return None

    async def _before_connect(self) -> str:
        """Before every dial: the backoff (on the app's clock); the URL that resumes at the
        cursor."""
        if self._failures:
            delay = min(float(self.config.max_backoff_seconds), 2.0 ** (self._failures - 1))
            self.state = "backoff"
            log.info("sync: reconnecting to %s in %.0f s", self.config.url, delay)
            self.counts["reconnects"] += 1
            await self.app.clock.sleep(delay)
        self._failures += 1  # reset by the first frame that arrives
        self.state = "connecting"
        # What was received is queued or was irrelevant: resume after it (the saved cursor
        # only matters after a restart, when the queue is gone too).
        # After a refused cursor, from the live stream: not from what the applier saves for
        # the events received before the refusal.
        cursor = self._received if self._received is not None else None if self._from_live else self._saved
        if cursor is not None and self.config.source == "jetstream":
            cursor += 1  # the firehose resumes after the cursor; Jetstream replays from it (inclusive)
        from daemon.sync.reader import stream_url
        return stream_url(self.config.source, self.config.url or "", cursor)

    def _opened(self, connection: Any) -> None:
        """The connection is open: the sync is ``live`` (a quiet stream, a small PDS nobody
        writes to, is live too, not still "connecting")."""
        self._connection = connection
        if self.state != "stopped":
            self.state = "live"

    def _frame(self, data: bytes | str) -> Any:
        """One raw frame of the stream, filtered: the item to queue, or None."""
        self._failures = 0  # a frame came: the connection works (backoff starts over)
        if isinstance(data, str) and self.config.source != "jetstream":
            return None  # the firehose's frames are binary (DAG-CBOR)
        try:
            return self.receive(data)
        except StreamError:
            raise
        except Exception as exc:  # noqa: BLE001 (one bad frame does not end the stream)
            log.warning("sync: skipped a frame that could not be decoded: %r", exc)
            return None

    async def _deliver(self, item: Any) -> None:
        assert self._queue is not None
        await self._queue.put(item)

    async def _read(self) -> None:
        from daemon.sync.reader import read_stream
        while True:
            url = await self._before_connect()
            try:
                await read_stream(self.config.source, url, on_open=self._opened, on_frame=self._frame,
                                  deliver=self._deliver)
                if self.state == "stopped":
                    return
                log.info("sync: the stream at %s closed", self.config.url)
            except asyncio.CancelledError:
                raise
            except StreamError as refusal:
                log.warning("sync: the stream at %s refused us: %s", self.config.url, refusal)
                if refusal.error in ("FutureCursor", "OutdatedCursor", "CursorTooOld"):
                    await self._queue_gap()
            except Exception as exc:  # noqa: BLE001 (a failed connection is dialled again)
                log.warning("sync: the connection to %s failed: %r", self.config.url, exc)
            finally:
                self._connection = None
            self._failures = max(self._failures, 1)

    async def _queue_gap(self) -> None:
        """A cursor the stream cannot resume from: start again from now, and have every
        community rebuilt from its repo."""
        log.warning("sync: cursor %s cannot be resumed at %s: starting from the live stream "
                    "and reindexing every community", self._saved, self.config.url)
        self._saved = self.cursor = self._received = None
        self._from_live = True
        assert self._queue is not None
        await self._queue.put(SyncEvent("gap", "", -1))

    # ---------------------------------------------------------------- applying

    async def _apply_loop(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            try:
                first = await asyncio.wait_for(queue.get(), self.config.cursor_save_seconds)
            except asyncio.TimeoutError:
                if self._seen is not None and self._seen != self._saved:
                    await self._apply([])
                if self._interest_stale():
                    await self.load_interest()
                continue
            if first is _STOP:
                return
            batch = [first]
            while len(batch) < self.config.batch_size and not queue.empty():
                item = queue.get_nowait()
                if item is _STOP:
                    queue.put_nowait(_STOP)
                    break
                batch.append(item)
            await self._apply_with_retry(batch)

    def _follows(self, event: SyncEvent) -> SyncEvent:
        """Check, in stream order, that a followed repo's commit follows the last one seen
        (its ``since`` is that commit's rev); if not, or for a ``#sync`` that moves the repo
        elsewhere, events were missed: a gap."""
        if event.kind == "commit" and event.did in self.filter_state.dids:
            last = self._last_rev.get(event.did)
            self._last_rev[event.did] = event.rev or ""
            if last and event.since and event.since != last:
                return SyncEvent("gap", event.did, event.seq, event.time, rev=event.rev)
        elif event.kind == "gap" and event.did and event.rev:
            if self._last_rev.get(event.did) == event.rev:
                return SyncEvent("commit", event.did, event.seq, event.time, rev=event.rev)  # nothing missed
            self._last_rev[event.did] = event.rev
        return event

    async def _apply_with_retry(self, batch: list[Any]) -> None:
        failures = 0
        while True:
            try:
                await self._apply(batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                failures += 1
                delay = min(float(self.config.max_backoff_seconds), 2.0 ** (failures - 1))
                log.exception("sync: applying %d event(s) failed; trying again in %.0f s", len(batch), delay)
                previous, self.state = self.state, "backoff"
                await self.app.clock.sleep(delay)
                self.state = previous

    async def _apply(self, batch: list[Any]) -> None:
        if any(isinstance(item, _Recheck) for item in batch) and self._interest_stale():
            await self.load_interest()
        events: list[SyncEvent] = []
        cursor = self._saved
        for item in batch:
            got = self.filter(item.data) if isinstance(item, _Recheck) else item
            if isinstance(got, SyncEvent):
                if isinstance(item, _Recheck):
                    self.counts["relevant"] += 1
                got = self._follows(await self._recognise(got))
                events.append(got)
                if got.seq >= 0:
                    cursor = got.seq
            elif isinstance(got, int):
                cursor = got
        assert self._queue is not None
        if self._queue.empty() and self._seen is not None and (cursor is None or self._seen > cursor):
            cursor = self._seen  # every frame up to it was irrelevant or is in this batch
        now = self.app.clock.iso_now()
        newest = next((e.time for e in reversed(events) if e.time), None)
        before = self.app.db.commits
        async with self.app.db.transaction("sync.apply") as tx:
            if events:
                await _call_hook(self.app.pm.hook.cr_sync_events_tx, app=self.app, tx=tx, events=events)
            if cursor is not None and cursor != self._saved:
                await store.save_cursor_tx(tx, self.source_key, cursor, newest, now)
        if self.app.db.commits == before + 1 and self._interest_version == before:
            self._interest_version = self.app.db.commits  # our own commit changed no interest
        self._saved = self.cursor = cursor if cursor is not None else self.cursor
        self.counts["applied"] += len(events)
        self.counts["batches"] += 1
        stamp = _parse_time(newest)
        if stamp is not None:
            self.lag_seconds = max(0.0, self.app.clock.time() - stamp)
        elif self._queue.empty():
            self.lag_seconds = 0.0 if self.lag_seconds is not None else None
        if events:
            try:
                await _call_hook(self.app.pm.hook.cr_sync_events, app=self.app, events=events)
            except Exception:  # noqa: BLE001 (the work is durable: the reconciler finishes it)
                log.exception("sync: the work after applying %d event(s) failed", len(events))

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Load the cursor and the interest, and start reading (no-op when ``off``)."""
        if self.config.source == "off":
            return
        row = await store.get_cursor(self.app.db, self.source_key)
        if row is not None:
            self._saved = self.cursor = row["cursor"]
        await self.load_interest(full=True)
        self._queue = asyncio.Queue(maxsize=self.config.queue_size)
        self.state = "connecting"
        log.info("sync: following %s from %s", self.source_key,
                 f"cursor {self.cursor}" if self.cursor is not None else "the live stream")
        self._tasks = [self.app.spawn(self._apply_loop(), name="sync.apply"),
                       self.app.spawn(self._read(), name="sync.read")]

    async def stop(self) -> None:
        """Stop reading, apply what is queued, and stop."""
        if self.state == "off" or not self._tasks:
            return
        self.state = "stopped"
        reader, applier = self._tasks[1], self._tasks[0]
        if self._connection is not None:
            try:
                await asyncio.wait_for(self._connection.close(), 2.0)
            except Exception:  # noqa: BLE001
                pass
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        assert self._queue is not None
        try:
            self._queue.put_nowait(_STOP)
            await asyncio.wait_for(asyncio.shield(applier), 5.0)
        except (asyncio.QueueFull, asyncio.TimeoutError):
            applier.cancel()  # what was not applied is read again from the saved cursor
        except Exception:  # noqa: BLE001
            pass
        self._tasks = []
