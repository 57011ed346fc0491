"""Fan-out of events to webhooks, and the delivery loop.

Fan-out (`enqueue_tx`) runs inside the transaction of the change: it selects the
webhooks that may hear about the event and writes one delivery row for each, so a
change and its deliveries commit or roll back together.

The loop (`Dispatcher`) runs in the daemon's event loop. It keeps, in memory, when each
webhook next has work (`_due`); the database is the truth and is rescanned at start-up,
on `kick()` and every `poll_interval_seconds`. Each webhook with due work gets one
worker, which reads its pending deliveries a batch at a time (one transaction: the
webhook and up to `BATCH` deliveries with their events) and sends them in event order,
up to the webhook's `concurrency` at once. With concurrency 1 (the default) event N+1 is
not sent before N is settled (delivered, or given up). A failed attempt stops the batch
(requests in flight finish) and the webhook waits for that retry. At most
`max_in_flight` workers run. Results are written in one transaction per batch, the one
that reads the next batch when every request of the batch was delivered (one transaction
per batch in a drain, not two); a crash before they are written means those events are
sent again (at least once, never lost).
Requests go out through `sender.Sender` (keep-alive connections, the outbound guard on
each new one).

The queue's queries (its table, `webhook_deliveries`, and what fan-out and the loop read
of the webhooks) are at the end of this module; the webhooks' registration and listing
queries are `store.py`'s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import random
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from daemon.plugin import Reader, Row, Transaction, hookimpl, iso
from daemon.plugin.events import Event
from daemon.plugin.security import AddressRefused, Guard, TargetRefused
from daemon.plugin import EventKind
from daemon.plugin.events import decide_audience, event_data_for
from plugins.webhooks import metrics, signing
from plugins.webhooks.sender import Sender, SendError
from plugins.webhooks.settings import WebhooksConfig
from plugins.webhooks import store as store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.webhooks")

BATCH = 100

def secret_context(webhook_id: str) -> str:
    return f"webhooks.secret:{webhook_id}"


def previous_secret_context(webhook_id: str) -> str:
    return f"webhooks.previous_secret:{webhook_id}"


# ------------------------------------------------------------------ fan-out


@hookimpl
def cr_event_tx(app: "Application", tx: Transaction, event: Event) -> Any:
    """The hook (re-exported by the plugin's module): an event's deliveries join its transaction."""
    return enqueue_tx(app, tx, event)


async def enqueue_tx(app: "Application", tx: Transaction, event: Event) -> None:
    """Queue the event for every webhook that subscribed to it and whose app may see
    its community, as that app may see the event: where the roster is hidden from the app
    (`app_sees_roster`), member events are not queued and others are sent without the
    keys that name a person (`event_data_for`; the event stream reads the same decision)."""
    candidates = await subscribed_webhooks_tx(tx, event.type, event.community_did)
    if not candidates:
        return
    # Who may hear of it, and who of them may see the people it names, was decided when
    # the event was recorded (`decide_audience`, the decision the events stream reads back).
    audience = event.audience
    if audience is None:
        audience = await decide_audience(app, tx, event.community_did, event.app_id, event.type)
    chosen = [(row["id"], event.id, not audience.shows_people_to(row["app_id"]))
              for row in candidates if audience.admits(row["app_id"])]
    if not chosen:
        return
    await insert_deliveries_tx(tx, chosen, app.clock.time(), app.clock.iso_now())
    ids = [w for w, _, _ in chosen]
    from plugins.webhooks.service import webhooks_of
    d = webhooks_of(app).dispatcher
    if d is not None:
        tx.after_commit(lambda: d.notify(ids))


# ------------------------------------------------------------------ one attempt


#: How much of a receiver's answer is kept for the delivery page.
ANSWER_BYTES = 2048


@dataclass
class Outcome:
    status_code: int | None
    error: str | None
    retry: bool
    retry_after: float | None = None
    #: The first `ANSWER_BYTES` of the receiver's answer, as text (None: no answer)
    body: str | None = None

    @property
    def delivered(self) -> bool:
        return self.error is None


def classify(status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> Outcome:
    outcome = _classify(status, body, headers)
    outcome.body = body[:ANSWER_BYTES].decode("utf-8", "replace")
    return outcome


def _classify(status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> Outcome:
    if 200 <= status < 300:
        return Outcome(status, None, False)
    snippet = body[:200].decode("utf-8", "replace").strip()
    error = f"HTTP {status}" + (f": {snippet}" if snippet else "")
    if status == 429 or status == 408 or status >= 500:
        retry_after = None
        for k, v in headers:
            if k.lower() == b"retry-after":
                try:
                    retry_after = max(0.0, float(v.decode().strip()))
                except ValueError:
                    retry_after = None
        return Outcome(status, error, True, retry_after)
    if 300 <= status < 400:
        location = next((v.decode("latin-1") for k, v in headers if k.lower() == b"location"), "")
        error = f"HTTP {status}: redirects are not followed" + (f" (to {location})" if location else "")
    return Outcome(status, error, False)


def payload_body(row: Row, kinds: Mapping[str, EventKind]) -> bytes:
    """The event as delivered: the same bytes on every attempt. Where the app may not see
    the people it names (``hide_people``, decided when it was queued), without the keys that
    name a person (`event_data_for`, by the kind's declaration in `kinds`: ``app.event_kinds``)."""
    data = json.loads(row["data"])
    if row["hide_people"]:
        data = event_data_for(kinds.get(row["type"]), data, sees_people=False) or {}
    event = Event(row["event_id"], 0, row["type"], row["community_did"], None, None, data,
                  row["event_created_at"])
    return json.dumps(event.payload(), separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class Hook:
    """What a worker needs of a webhook, refreshed when it changes."""

    id: str
    url: str
    keys: list[bytes]
    concurrency: int = 1


# ------------------------------------------------------------------ the loop


class Dispatcher:
    def __init__(self, app: "Application") -> None:
        self.app = app
        self.config: WebhooksConfig = app.config.plugin("webhooks")
        self.guard = Guard(self.config.allow_http, self.config.allowed_targets)
        self.random = random.Random()
        self.sender = Sender(self.guard)
        self._keys: dict[str, tuple[tuple[str, str | None], list[bytes]]] = {}  # opened secrets
        self._due: dict[str, float] = {}          # webhook id -> when it next has work
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._notified: set[str] = set()         # new work arrived while its worker ran
        self._changed: set[str] = set()          # the webhook changed while its worker ran
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._rescan = True
        self._generation = 0
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._last_prune = 0.0
        self._next_poll = 0.0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._task = self.app.spawn(self._run(), name="webhooks.dispatcher")

    async def stop(self) -> None:
        """Let in-flight deliveries finish (bounded by the caller's timeout); anything not
        settled stays pending for the next start."""
        self._stopping = True
        self._wake.set()
        workers = list(self._workers.values())
        if workers:
            await asyncio.gather(*workers, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.sender.aclose()

    # ---------------------------------------------------------------- signals

    def notify(self, webhook_ids: list[str]) -> None:
        """New deliveries were committed for these webhooks."""
        now = self.app.clock.time()
        woke = False
        for w in webhook_ids:
            due = self._due.get(w)
            if w in self._workers:
                self._notified.add(w)
            elif due is None:
                self._due[w] = now
                woke = True
            elif due <= now:
                woke = True
            # else: its oldest delivery waits for a retry; the new ones queue behind it
        if woke:
            self._idle.clear()
            self._wake.set()

    def webhook_changed(self, webhook_id: str) -> None:
        """A webhook was edited, rotated, re-enabled or deleted: rescan."""
        self._changed.add(webhook_id)
        self._keys.pop(webhook_id, None)
        self.kick()

    def kick(self) -> None:
        """Rescan the queue now (a webhook changed; `settle`)."""
        self._rescan = True
        self._generation += 1
        self._idle.clear()
        self._wake.set()

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait until nothing is due and no worker runs (tests)."""
        self.kick()
        await asyncio.wait_for(self._idle.wait(), timeout)

    # ---------------------------------------------------------------- the main loop

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            generation = self._generation
            try:
                if self._rescan or self._poll_due():
                    self._rescan = False
                    await self._scan()
                self._start_workers()
                self.sender.sweep()
                await self._maybe_prune()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook dispatcher pass failed")
            now = self.app.clock.time()
            if not self._workers and not any(t <= now for t in self._due.values()) \
                    and generation == self._generation:
                self._idle.set()
            timeout = self.config.poll_interval_seconds
            if self._due:
                timeout = max(0.0, min(timeout, min(self._due.values()) - now))
            if self._workers and len(self._workers) >= self.config.max_in_flight:
                timeout = self.config.poll_interval_seconds
            # On the app's clock: the next retry falls due when the clock reaches it (a
            # test's clock.advance wakes this loop as the passing of time does).
            await self.app.clock.wait(self._wake, timeout)

    def _poll_due(self) -> bool:
        mono = self.app.clock.monotonic()
        if mono >= self._next_poll:
            self._next_poll = mono + self.config.poll_interval_seconds
            return True
        return False

    async def _scan(self) -> None:
        heads = await pending_heads(self.app.db)
        # Merged with what is known in memory: a notification that arrived while the scan
        # ran may be newer than what the scan read.
        scanned = {r["webhook_id"]: float(r["next_attempt_at"]) for r in heads}
        for w, t in self._due.items():
            scanned[w] = min(t, scanned.get(w, t))
        self._due = {w: t for w, t in scanned.items() if w not in self._workers}

    def _start_workers(self) -> None:
        if self._stopping:
            return
        now = self.app.clock.time()
        ready = sorted((t, w) for w, t in self._due.items() if t <= now and w not in self._workers)
        for _, webhook_id in ready:
            if len(self._workers) >= self.config.max_in_flight:
                break
            del self._due[webhook_id]
            self._notified.discard(webhook_id)
            task = asyncio.get_running_loop().create_task(self._work(webhook_id),
                                                          name=f"webhooks.worker.{webhook_id}")
            self._workers[webhook_id] = task

    async def _maybe_prune(self) -> None:
        now = self.app.clock.time()
        if now - self._last_prune < 3600:
            return
        self._last_prune = now
        await self.prune(iso(now - self.config.delivery_log_retention_days * 86400))

    async def prune(self, cutoff: str) -> int:
        """Remove settled deliveries completed before `cutoff`, a batch per transaction (a
        pending delivery is never removed)."""
        from daemon.plugin.storage import prune_in_batches

        async def batch(limit: int) -> int:
            async with self.app.db.transaction("webhooks.prune") as tx:
                return await prune_completed_tx(tx, cutoff, limit)

        return await prune_in_batches("webhooks.deliveries", batch)

    # ---------------------------------------------------------------- a worker

    def _hook(self, row: Row) -> Hook:
        """The webhook as the worker sends to it; its secrets are opened once per sealed value."""
        webhook_id = row["id"]
        previous = row["previous_secret_sealed"]
        if not previous or (row["previous_secret_until"] or 0) <= self.app.clock.time():
            previous = None
        sealed = (row["secret_sealed"], previous)
        cached = self._keys.get(webhook_id)
        if cached is None or cached[0] != sealed:
            keys = [signing.secret_key(self.app.secrets.open(row["secret_sealed"], secret_context(webhook_id)))]
            if previous is not None:
                keys.append(signing.secret_key(self.app.secrets.open(
                    previous, previous_secret_context(webhook_id))))
            cached = self._keys[webhook_id] = (sealed, keys)
        return Hook(webhook_id, row["url"], cached[1], max(1, row["concurrency"]))

    async def _work(self, webhook_id: str) -> None:
        next_due: float | None = None
        # A batch that was all delivered has its results written in the transaction that
        # reads the next batch (one transaction per batch instead of two: the drain's pace).
        unwritten: list[tuple[int, int, str, str, str | None]] = []
        try:
            while not self._stopping:
                self._notified.discard(webhook_id)
                self._changed.discard(webhook_id)
                # The webhook is read afresh with each batch (URL, secrets, concurrency, and
                # whether it and its app are still active), in the batch's transaction: on the
                # writer connection, see pending_batch_tx.
                async with self.app.db.transaction("webhooks.next_batch") as tx:
                    if unwritten:
                        await mark_delivered_tx(tx, webhook_id, unwritten)
                    row = await delivery_target_tx(tx, webhook_id)
                    batch = await pending_batch_tx(tx, webhook_id, BATCH) if row else []
                if unwritten:
                    metrics.record(self.app, "delivered", len(unwritten))
                    unwritten = []
                if not batch:
                    break
                next_due, go_on, unwritten = await self._send_batch(self._hook(row), batch)
                if not go_on:
                    break
            if unwritten:  # stopping: written now, not with a next batch
                await self._write_delivered(webhook_id, unwritten)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("webhook worker for %s failed", webhook_id)
            next_due = self.app.clock.time() + 5.0
        finally:
            self._workers.pop(webhook_id, None)
        if self._stopping:
            return
        if webhook_id in self._notified or webhook_id in self._changed:
            self._notified.discard(webhook_id)
            self._rescan = self._rescan or webhook_id in self._changed
            self._due[webhook_id] = self.app.clock.time() if next_due is None else next_due
        elif next_due is not None:
            self._due[webhook_id] = next_due
        self._wake.set()

    async def _send_batch(self, hook: Hook, batch: list[Row]) -> tuple[float | None, bool, list[Any]]:
        """Send a batch in order, up to `hook.concurrency` at once, and write the results.
        Returns when the webhook next has work if that is a retry (else None), whether to
        go on with the next batch, and, when every request was delivered and the worker goes
        on, the deliveries whose results the caller writes with its next read (else they are
        written here, before any failure's: a failure counts after them in the streak).

        A failed attempt stops the batch: nothing new starts, the requests in flight finish,
        and the webhook waits for the retry (strict order with concurrency 1)."""
        results: list[tuple[Row, str, Outcome]] = []
        rows = iter(batch)  # shared by the lanes: each takes the next row, in event order
        stop = False
        next_due: float | None = None

        async def lane() -> None:
            nonlocal stop, next_due
            for row in rows:
                if stop or self._stopping or hook.id in self._changed:
                    return
                if row["next_attempt_at"] > self.app.clock.time():
                    next_due, stop = float(row["next_attempt_at"]), True
                    return
                result = await self._send(hook, row)
                results.append(result)
                stop = stop or not result[2].delivered

        lanes = min(hook.concurrency, len(batch))
        if lanes == 1:
            await lane()
        else:
            await asyncio.gather(*(lane() for _ in range(lanes)))
        delivered = [(row["id"], o.status_code or 0, row["first_attempt_at"] or at, at, o.body)
                     for row, at, o in results if o.delivered]
        if len(delivered) == len(results) and next_due is None and not self._stopping:
            return None, True, delivered
        if delivered:
            await self._write_delivered(hook.id, delivered)
        failed = sorted(((row, at, o) for row, at, o in results if not o.delivered), key=lambda r: r[0]["id"])
        disabled = False
        for row, attempted_at, outcome in failed:
            retry_at, now_disabled = await self._record_failure(hook, row, outcome, attempted_at)
            disabled = disabled or now_disabled
            if retry_at is not None:
                next_due = retry_at if next_due is None else min(next_due, retry_at)
        if disabled:
            return None, False, []
        if next_due is not None:
            return next_due, False, []
        return None, not self._stopping, []

    async def _write_delivered(self, webhook_id: str, delivered: list[Any]) -> None:
        async with self.app.db.transaction("webhooks.delivered") as tx:
            await mark_delivered_tx(tx, webhook_id, delivered)
        metrics.record(self.app, "delivered", len(delivered))

    async def _send(self, hook: Hook, row: Row) -> tuple[Row, str, Outcome]:
        attempted_at = self.app.clock.iso_now()
        return row, attempted_at, await self._attempt(hook, row)

    async def _attempt(self, hook: Hook, row: Row) -> Outcome:
        timeout = self.config.request_timeout_seconds
        try:
            body = payload_body(row, self.app.event_kinds)
            timestamp = int(self.app.clock.time())
            headers = {"Content-Type": "application/json", "User-Agent": "commonroom-webhooks",
                       **signing.signed_headers(hook.keys, row["event_id"], timestamp, body)}
            response = await self.sender.post(hook.url, headers, body, timeout)
        except TimeoutError:
            return Outcome(None, f"timed out after {timeout:g} s", True)
        except (SendError, TargetRefused, AddressRefused) as exc:
            return Outcome(None, str(exc), True)
        except OSError as exc:  # ssl.SSLError included
            return Outcome(None, _describe(exc), True)
        except Exception as exc:  # noqa: BLE001 (counted like any failure, so it cannot loop)
            log.exception("webhook %s: unexpected error sending delivery %s", hook.id, row["id"])
            return Outcome(None, f"internal error: {type(exc).__name__}", True)
        return classify(response.status, response.body, response.headers)

    async def _record_failure(self, hook: Hook, row: Row, outcome: Outcome,
                              attempted_at: str) -> tuple[float | None, bool]:
        """Schedule a retry or give the delivery up: (when to retry or None, whether the
        webhook was disabled)."""
        schedule = self.config.retry_schedule_seconds
        attempt = row["attempts"] + 1
        now = self.app.clock.time()
        if outcome.retry and attempt <= len(schedule):
            delay = schedule[attempt - 1] * (1 + self.random.uniform(-1, 1) * self.config.retry_jitter)
            if outcome.retry_after is not None:
                delay = max(delay, min(outcome.retry_after, self.config.max_retry_after_seconds))
            next_at = now + max(0.0, delay)
            async with self.app.db.transaction("webhooks.retry") as tx:
                await mark_retry_tx(tx, row["id"], status_code=outcome.status_code,
                                          error=outcome.error or "", attempted_at=attempted_at,
                                          next_attempt_at=next_at, response_body=outcome.body)
            metrics.record(self.app, "retry")
            log.info("webhook %s: delivery %s attempt %d failed (%s); next in %.0f s",
                     hook.id, row["id"], attempt, outcome.error, next_at - now)
            return next_at, False
        error = outcome.error or ""
        reason = None
        if outcome.retry:
            first = row["first_attempt_at"] or attempted_at
            span = _hours_between(first, attempted_at)
            error = f"gave up after {attempt} attempts over {span:.1f} h: {error}"
            reason = (f"Disabled after delivery {row['id']} (event {row['event_id']}) failed {attempt} "
                      f"times over {span:.1f} hours; last error: {outcome.error}. Fix the endpoint, "
                      "then set active to true to resume the queued deliveries.")
        async with self.app.db.transaction("webhooks.failed") as tx:
            streak = await mark_failed_tx(tx, hook.id, row["id"], status_code=outcome.status_code,
                                                error=error, attempted_at=attempted_at,
                                                response_body=outcome.body)
            limit = self.config.disable_after_failed_deliveries
            if reason is None and limit > 0 and streak >= limit:
                reason = (f"Disabled after {streak} deliveries in a row were refused; last error: "
                          f"{outcome.error}. Fix the endpoint, then set active to true.")
            if reason is not None:
                await store.disable_webhook_tx(tx, hook.id, reason, attempted_at)
        metrics.record(self.app, "failed")
        log.warning("webhook %s: delivery %s failed: %s", hook.id, row["id"], error)
        if reason is not None:
            log.warning("webhook %s disabled: %s", hook.id, reason)
        return None, reason is not None


def _describe(exc: BaseException) -> str:
    """A short reason for the delivery log, from the most specific cause in the chain."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, ssl.SSLError):
            return f"TLS error: {seen.reason or seen}"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror.lower()
        if isinstance(seen, BaseExceptionGroup):  # anyio's happy eyeballs
            nested = [_describe(e) for e in seen.exceptions]
            return "; ".join(dict.fromkeys(nested))
        seen = seen.__cause__ or seen.__context__
    text = str(exc) or type(exc).__name__
    return text[:300]


def _hours_between(start_iso: str, end_iso: str) -> float:
    def parse(s: str) -> dt.datetime:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    try:
        return max(0.0, (parse(end_iso) - parse(start_iso)).total_seconds() / 3600)
    except ValueError:
        return 0.0


# ------------------------------------------------------------------ the queue's queries: fan-out
# The SQL the delivery queue runs (its table, `webhook_deliveries`, and what it reads of the
# webhooks it serves); the webhooks' registration and listing queries are `store.py`'s.


async def subscribed_webhooks_tx(tx: Transaction, event_type: str,
                                 community_did: str | None) -> list[Row]:
    """Active webhooks of active apps subscribed to `event_type`, unscoped or scoped to
    `community_did`."""
    return await tx.fetchall(
        "SELECT w.id, w.app_id FROM webhook_events e "
        "JOIN webhooks w ON w.id = e.webhook_id JOIN apps a ON a.id = w.app_id "
        "WHERE e.event_type = ? AND w.active = 1 AND a.active = 1 "
        "AND (w.community_did IS NULL OR w.community_did IS ?) ORDER BY w.id",
        (event_type, community_did))


async def insert_deliveries_tx(tx: Transaction, rows: Iterable[tuple[str, str, bool]], next_attempt_at: float,
                     now: str) -> None:
    """Queue deliveries: `rows` are (webhook_id, event_id, hide_people: send the data
    without the keys that name a person)."""
    await tx.executemany(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at, hide_people) "
        "VALUES (?, ?, ?, ?, ?)", [(w, e, next_attempt_at, now, 1 if hide else 0) for w, e, hide in rows])


async def redeliver_tx(tx: Transaction, delivery: Row, next_attempt_at: float, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at, redelivery_of, "
        "hide_people) SELECT ?, ?, ?, ?, ?, hide_people FROM webhook_deliveries WHERE id = ?",
        (delivery["webhook_id"], delivery["event_id"], next_attempt_at, now, delivery["id"], delivery["id"]))
    return cur.lastrowid


# ------------------------------------------------------------------ the queue's queries: the delivery loop


async def pending_heads(db: Reader) -> list[Row]:
    """For every active webhook (of an active app) with pending deliveries: the oldest
    one's due time."""
    return await db.fetchall(
        "SELECT h.webhook_id, d.next_attempt_at FROM "
        "(SELECT webhook_id, MIN(id) AS head FROM webhook_deliveries WHERE status = 'pending' "
        " GROUP BY webhook_id) h "
        "JOIN webhook_deliveries d ON d.id = h.head JOIN webhooks w ON w.id = h.webhook_id "
        "JOIN apps a ON a.id = w.app_id WHERE w.active = 1 AND a.active = 1")


async def delivery_target_tx(tx: Transaction, webhook_id: str) -> Row | None:
    """What the delivery loop needs of a webhook (URL, secrets, concurrency), or None if it
    or its app is not active (or it is gone)."""
    return await tx.fetchone(
        "SELECT w.id, w.url, w.concurrency, w.secret_sealed, w.previous_secret_sealed, "
        "w.previous_secret_until FROM webhooks w JOIN apps a ON a.id = w.app_id "
        "WHERE w.id = ? AND w.active = 1 AND a.active = 1", (webhook_id,))


async def pending_batch_tx(tx: Transaction, webhook_id: str, limit: int) -> list[Row]:
    """The webhook's pending deliveries in send order, with their events. Read on the
    writer connection: a reader connection shared by overlapping statements can keep
    an older snapshot, and a stale batch would send delivered events again."""
    return await tx.fetchall(
        "SELECT d.id, d.event_id, d.attempts, d.next_attempt_at, d.first_attempt_at, d.hide_people, "
        "e.type, e.community_did, e.data, e.created_at AS event_created_at "
        "FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
        "WHERE d.webhook_id = ? AND d.status = 'pending' ORDER BY d.id LIMIT ?",
        (webhook_id, limit))


async def mark_delivered_tx(tx: Transaction, webhook_id: str,
                            results: Sequence[tuple[int, int, str, str, str | None]]) -> None:
    """`results`: (delivery id, status code, first attempt at, attempted at, the answer's
    first 2 KB)."""
    await tx.executemany(
        "UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, "
        "status_code = ?, error = NULL, first_attempt_at = COALESCE(first_attempt_at, ?), "
        "last_attempt_at = ?, completed_at = ?, response_body = ? WHERE id = ? AND status = 'pending'",
        [(code, first, at, at, answer, did) for did, code, first, at, answer in results])
    await tx.execute("UPDATE webhooks SET failed_streak = 0 WHERE id = ? AND failed_streak != 0",
                     (webhook_id,))


async def mark_retry_tx(tx: Transaction, delivery_id: int, *, status_code: int | None, error: str,
                        attempted_at: str, next_attempt_at: float, response_body: str | None = None) -> None:
    await tx.execute(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, status_code = ?, error = ?, "
        "first_attempt_at = COALESCE(first_attempt_at, ?), last_attempt_at = ?, next_attempt_at = ?, "
        "response_body = ? WHERE id = ? AND status = 'pending'",
        (status_code, error, attempted_at, attempted_at, next_attempt_at, response_body, delivery_id))


async def mark_failed_tx(tx: Transaction, webhook_id: str, delivery_id: int, *,
                         status_code: int | None, error: str, attempted_at: str,
                         response_body: str | None = None) -> int:
    """Give a delivery up; return the webhook's count of deliveries given up in a row."""
    await tx.execute(
        "UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, status_code = ?, "
        "error = ?, first_attempt_at = COALESCE(first_attempt_at, ?), last_attempt_at = ?, "
        "completed_at = ?, response_body = ? WHERE id = ? AND status = 'pending'",
        (status_code, error, attempted_at, attempted_at, attempted_at, response_body, delivery_id))
    await tx.execute("UPDATE webhooks SET failed_streak = failed_streak + 1 WHERE id = ?", (webhook_id,))
    return await tx.fetchval("SELECT failed_streak FROM webhooks WHERE id = ?", (webhook_id,)) or 0


async def reschedule_pending_tx(tx: Transaction, webhook_id: str, next_attempt_at: float) -> None:
    """Make every pending delivery of a (re-enabled) webhook due at `next_attempt_at`."""
    await tx.execute(
        "UPDATE webhook_deliveries SET next_attempt_at = ? WHERE webhook_id = ? AND status = 'pending'",
        (next_attempt_at, webhook_id))


async def oldest_pending_event_seq(db: Reader) -> int | None:
    """The lowest outbox ``seq`` of an event a pending delivery still has to send."""
    return await db.fetchval(
        "SELECT MIN(e.seq) FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
        "WHERE d.status = 'pending'")


async def prune_completed_tx(tx: Transaction, before: str, limit: int = 5000) -> int:
    cur = await tx.execute(
        "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries "
        "WHERE status != 'pending' AND completed_at < ? LIMIT ?)", (before, limit))
    return cur.rowcount
