"""One write path for everything the service writes to a repo on a PDS (``app.writes``).

Every command that writes to a repo is one straight line, run by :meth:`Writes.run`
while holding the command's locks (:meth:`Writes.lock`, one registry):

1. **check** the state from the local index (refusals change nothing), and in the same
   transaction
2. record the **intent**: a row in ``write_intents`` holding the record key chosen up
   front (a retry of the same subject reuses the row, so it writes the same record:
   ``putRecord`` at a known key and ``deleteRecord`` are idempotent);
3. the **PDS write(s)**, under one error policy (:func:`pds_failure`, and the command's
   ``on_pds_error``: keep the intent, drop it when surely unwritten, or take back what a
   multi-record write wrote with :func:`roll_back`);
4. **one local transaction**: re-check, change the index, delete the intent
   (:meth:`Writes.finish_tx`), emit the event and write the audit entry.

An intent no request finished (a crash, a failed local transaction) is settled by **one
reconciler** (:meth:`Writes.reconcile`, at start-up for any age, then periodically). What
settling means is the plugin's: each plugin registers a :class:`WriteKind` per kind of
write through the hook ``cr_write_kinds``, saying how to finish or undo it, how old an
intent must be before it is settled, and which other locks settling needs. A kind whose
``settle`` raises is tried again after a backoff doubling from its ``settle_after`` up to
its ``max_backoff`` (kept in the row, so it survives a restart; the start-up pass ignores
it).

A plugin writes this line as a :class:`Command` and runs it with :meth:`Writes.run`: the
runner holds the command's locks, records the intent its check plans, opens the repo, runs
its PDS writes under the command's PDS-error policy (keep the intent for the reconciler,
drop it when the PDS surely did not write, or roll back what was written), and commits the
local transaction that finishes the intent; a refusal found at the commit rolls back what
the command wrote. Nobody writes that sequence by hand.
"""

from __future__ import annotations

import json
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from daemon.base import KeyedLocks, iso
from daemon.base import ApiError
from store.db import Database, Reader, Row, Transaction, narrowed

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.writes")

_BATCH = 100


# ------------------------------------------------------------------ the PDS-error policy


def pds_failure(exc: BaseException, *, refusal_is_callers: bool = False) -> ApiError:
    """The answer for a failed PDS step. An `ApiError` (a `PdsError` included) stands;
    anything else (a bug in a lower layer, a network error that escaped) is a 502, so no
    PDS failure ever reads as success. With `refusal_is_callers` (the record came from the
    caller: community records) a record the PDS refuses as invalid is the caller's 400
    ``record_rejected``."""
    from daemon.atproto.pds import PdsError
    if isinstance(exc, PdsError):
        if refusal_is_callers and exc.status == 502 and exc.pds_status == 400:
            return ApiError(400, "record_rejected", f"The PDS refused the record: {exc.message}")
        return exc
    if isinstance(exc, ApiError):
        return exc
    log.warning("PDS call failed: %r", exc)
    return ApiError(502, "pds_error", f"The community's PDS failed: {exc}")


async def pds(step: Awaitable[Any], *, refusal_is_callers: bool = False) -> Any:
    """Await a PDS call, turning any failure into its answer (:func:`pds_failure`)."""
    try:
        return await step
    except Exception as exc:  # noqa: BLE001
        raise pds_failure(exc, refusal_is_callers=refusal_is_callers) from None


def surely_not_written(exc: BaseException) -> bool:
    """True if the PDS write certainly did not happen: the PDS refused it (a 4xx other
    than 429) or it was refused before anything was sent. A timeout or a 5xx may come
    after the write, so those are not."""
    from daemon.atproto.pds import PdsError
    if isinstance(exc, PdsError):
        return not exc.transient
    return isinstance(exc, ApiError)


async def roll_back(repo: Any, written: Sequence[tuple[str, str]]) -> bool:
    """Delete what a failed command wrote (collection, rkey), newest first, best effort:
    a retry finishes the command, or the reconciler repairs what is left. True if every
    record was deleted."""
    undone = True
    for collection, rkey in reversed(written):
        try:
            await repo.delete_record(collection, rkey)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not roll back %s/%s on %s: %r", collection, rkey, repo.did, exc)
            undone = False
    return undone


# ------------------------------------------------------------------ commands

#: PDS-error policies of a :class:`Command` (its ``on_pds_error``).
KEEP = "keep"                      # the intent stays: the reconciler settles the write
DROP_UNWRITTEN = "drop_unwritten"  # dropped if the PDS surely did not write, else kept
ROLL_BACK = "roll_back"            # what was written is deleted; dropped if all of it was


@dataclass(frozen=True)
class Plan:
    """The intent a command's check plans: recorded in the check's own transaction."""

    key: str
    operation: str
    rkey: str | None = None
    payload: dict[str, Any] | None = None
    community_did: str | None = None
    reuse: bool = True
    kind: str | None = None  # default: the command's


class Command:
    """One write to a repo on a PDS, run by ``app.writes.run(command)`` (steps 1-4 above).

    Subclass it and override what the write needs:

    * :attr:`kind` (its ``WriteKind``), :attr:`name` (the label of its transactions);
    * :meth:`locks`: the lock keys held, in this order, from the check to the commit;
    * :meth:`check` ``(tx)``: refuse (raise an ``ApiError``; nothing is written) and
      return the :class:`Plan` of its intent, or None when there is nothing to write to
      the PDS (the commit still runs);
    * :meth:`repo`: the repo to write (opened after the intent is recorded);
    * :meth:`write` ``(run)``: the PDS writes, through ``run.put`` / ``run.delete``; a
      write to a second repo records its own intent first with ``run.begin(plan)``;
    * :meth:`commit` ``(tx, run)``: the local transaction (index, event, audit); the
      runner finishes every intent of the run in it, after the commit's own work (or
      when the commit calls ``run.finish(tx)``: False if the intent had been settled
      elsewhere meanwhile). ``run.refuse(error, undo, keep)`` refuses after all: the
      transaction commits (without finishing the intents in `keep`: the reconciler
      undoes their writes), then the records in ``undo`` are deleted and `error` is raised;
    * :attr:`on_pds_error` (:data:`KEEP`, :data:`DROP_UNWRITTEN`, :data:`ROLL_BACK`),
      :attr:`refusal_is_callers`, and :meth:`failed` / :meth:`commit_failed` to word the
      answer of a failed PDS write or local commit.
    """

    name: str = "write"
    kind: str | None = None
    on_pds_error: str = KEEP
    refusal_is_callers: bool = False

    def locks(self) -> Sequence[str]:
        return ()

    async def check(self, tx: Transaction) -> Plan | None:
        return None

    async def repo(self) -> Any:
        return None

    async def write(self, run: "Run") -> None:
        return None

    async def commit(self, tx: Transaction, run: "Run") -> Any:
        return None

    def failed(self, answer: ApiError, run: "Run", maybe_written: bool) -> ApiError:
        """The answer for a failed PDS write (after the policy ran)."""
        return answer

    def commit_failed(self, exc: Exception, run: "Run") -> BaseException:
        """What a failed local commit raises (by default the failure itself)."""
        return exc


@dataclass
class Run:
    """One command being run: its intents, repo, what it wrote, and its results."""

    writes: "Writes"
    command: Command
    intent: "Intent | None" = None
    repo: Any = None
    written: list[tuple[str, str]] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    intents: list["Intent"] = field(default_factory=list)
    finished: dict[int, bool] = field(default_factory=dict)
    refusal: ApiError | None = None
    undo: list[tuple[str, str]] = field(default_factory=list)
    kept: list["Intent"] = field(default_factory=list)

    async def begin(self, plan: Plan) -> "Intent":
        """From `write`: record a further intent (in a transaction of its own), before a
        write to another repo. It is finished with the run's; a failed write keeps it."""
        kind = plan.kind or self.command.kind
        assert kind is not None
        intent = await self.writes.begin(kind=kind, key=plan.key, operation=plan.operation, rkey=plan.rkey,
                                         payload=plan.payload, community_did=plan.community_did,
                                         reuse=plan.reuse)
        self.intents.append(intent)
        return intent

    async def finish(self, tx: Transaction, intent: "Intent | None" = None) -> bool:
        """From `commit`: finish `intent` (default: the first) now. False if it was gone (a
        request or the reconciler settled it meanwhile)."""
        intent = intent or self.intent
        assert intent is not None
        if intent.id not in self.finished:
            self.finished[intent.id] = await self.writes.finish_tx(tx, intent)
        return self.finished[intent.id]

    async def put(self, collection: str, rkey: str, record: dict[str, Any], **options: Any) -> dict[str, Any]:
        """``putRecord`` (options: ``swap_record``, ``create_only``); remembered for a roll-back."""
        out = await self.repo.put_record(collection, rkey, record, **options)
        self.written.append((collection, rkey))
        self.results.append(out)
        return out

    async def delete(self, collection: str, rkey: str, **options: Any) -> None:
        """``deleteRecord`` (option: ``swap_record``)."""
        await self.repo.delete_record(collection, rkey, **options)

    def refuse(self, error: ApiError, undo: Sequence[tuple[str, str]] = (),
               keep: Sequence["Intent"] = ()) -> None:
        """From the commit: refuse after all (the transaction still commits, finishing
        every intent but those in `keep`; then the records in `undo` are deleted from the
        repo and `error` is raised)."""
        self.refusal = error
        self.undo = list(undo)
        self.kept = list(keep)


# ------------------------------------------------------------------ intents and kinds


@dataclass(frozen=True)
class Intent:
    """A write in progress, as recorded in ``write_intents``."""

    id: int
    kind: str
    key: str
    community_did: str | None
    operation: str
    rkey: str | None
    payload: dict[str, Any]
    created_at: str
    tries: int
    attempts: int

    @classmethod
    def from_row(cls, row: Row) -> "Intent":
        return cls(row["id"], row["kind"], row["key"], row["community_did"], row["operation"],
                   row["rkey"], json.loads(row["payload"] or "{}"), row["created_at"], row["tries"],
                   row["attempts"])


def _no_locks(intent: Intent) -> Sequence[str]:
    return ()


@dataclass(frozen=True)
class WriteKind:
    """How a plugin's kind of write is settled when no request finished it.

    :param name: the kind, ``<plugin>.<what>`` (stored in ``write_intents.kind``).
    :param settle: ``settle(app, intent)``: make the repo and the index agree (finish the
        write or undo it) and, in the same local transaction, delete the intent with
        ``app.writes.finish_tx(tx, intent, settling=True)``. Returns the outcome counted
        by the reconciler (one of `outcomes`), or None if the intent was gone (a request
        took it over). Raising (the PDS is down) postpones it with a backoff.
    :param settle_after: seconds an intent must be old before the periodic pass settles it
        (a request may still be working on it); usually a config value.
    :param max_backoff: the longest wait between failed settlement attempts, in seconds.
    :param locks: other lock keys to hold while settling (e.g. the community's lock, for a
        write that rewrites a record shared by several commands).
    :param outcomes: the outcomes `settle` may return (counted as 0 when none happened).
    """

    name: str
    settle: Callable[["Application", Intent], Awaitable[str | None]]
    settle_after: Callable[["Application"], float]
    max_backoff: Callable[["Application"], float] = lambda app: 3600.0
    locks: Callable[[Intent], Sequence[str]] = _no_locks
    outcomes: tuple[str, ...] = ("settled",)


@dataclass
class Writes:
    """The application's write path: intents, locks and the reconciler (``app.writes``)."""

    app: "Application"
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    _kinds: dict[str, WriteKind] | None = None

    # ---------------------------------------------------------------- kinds

    @property
    def kinds(self) -> dict[str, WriteKind]:
        """Every registered kind, by name (collected once from ``cr_write_kinds``)."""
        if self._kinds is None:
            kinds: dict[str, WriteKind] = {}
            for contributed in self.app.pm.hook.cr_write_kinds(app=self.app):
                for kind in contributed or ():
                    if kind.name in kinds:
                        raise ValueError(f"two plugins register the write kind {kind.name!r}")
                    kinds[kind.name] = kind
            self._kinds = kinds
        return self._kinds

    # ---------------------------------------------------------------- locks

    def lock(self, key: str) -> Any:
        """The lock a command holds on its subject from its intent to its commit (the
        reconciler skips intents whose locks are held)."""
        return self.locks.hold(key)

    def busy(self, key: str) -> bool:
        return self.locks.busy(key)

    # ---------------------------------------------------------------- commands

    async def run(self, command: Command) -> Any:
        """Run `command` (see :class:`Command`): its result, or the refusal or failure."""
        async with AsyncExitStack() as held:
            for key in command.locks():
                await held.enter_async_context(self.lock(key))
            return await self._run_locked(command)

    async def _run_locked(self, command: Command) -> Any:
        run = Run(self, command)
        async with self.app.db.transaction(f"{command.name}.check") as tx:
            plan = await command.check(tx)
            if plan is not None:
                if plan.community_did and await tx.fetchval(
                        "SELECT 1 FROM account_moves WHERE did = ?", (plan.community_did,)):
                    from daemon.atproto.moves import moving_error
                    raise moving_error(plan.community_did)  # read-only while it moves
                kind = plan.kind or command.kind
                if kind is None:
                    raise ValueError(f"the command {command.name} plans an intent but names no kind")
                run.intent = await self.begin_tx(
                    tx, kind=kind, key=plan.key, operation=plan.operation, rkey=plan.rkey,
                    payload=plan.payload, community_did=plan.community_did, reuse=plan.reuse)
                run.intents.append(run.intent)
        if run.intent is not None:
            run.repo = await command.repo()
            try:
                await command.write(run)
            except Exception as exc:  # noqa: BLE001 (every failure has its answer)
                raise await self._pds_failed(run, exc) from None
        try:
            async with self.app.db.transaction(command.name) as tx:
                result = await command.commit(tx, run)
                for intent in run.intents:
                    if intent not in run.kept:
                        await run.finish(tx, intent)
        except Exception as exc:
            failure = command.commit_failed(exc, run)
            if failure is exc:
                raise
            raise failure from None
        if run.refusal is not None:
            if run.undo:
                await roll_back(run.repo, run.undo)
            raise run.refusal
        return result

    async def _pds_failed(self, run: Run, exc: Exception) -> ApiError:
        """The PDS-error policy: the answer, after keeping, dropping or rolling back."""
        command, intent = run.command, run.intent
        assert intent is not None
        answer = pds_failure(exc, refusal_is_callers=command.refusal_is_callers)
        maybe_written = not surely_not_written(exc)
        if command.on_pds_error == ROLL_BACK:
            if await roll_back(run.repo, run.written):
                await self.drop(intent)  # else the reconciler deletes what is left
        elif command.on_pds_error == DROP_UNWRITTEN:
            if maybe_written:
                log.warning("%s (%s) may or may not have reached the PDS (%r); left for the reconciler",
                            intent.operation, intent.key, exc)
            else:
                await self.drop(intent)
        return command.failed(answer, run, maybe_written)

    # ---------------------------------------------------------------- the user's own repo

    async def user_repo(self, principal: Any) -> Any:
        """The signed-in user's repository, written with their grant (hook ``cr_user_repo``);
        403 ``oauth_grant_missing`` if no plugin can write there."""
        opened = self.app.pm.hook.cr_user_repo(app=self.app, principal=principal)
        if opened is None:
            raise ApiError(403, "oauth_grant_missing",
                           "This service cannot write to the user's repository (no OAuth plugin).")
        return await opened

    # ---------------------------------------------------------------- intents

    async def begin_tx(self, tx: Transaction, *, kind: str, key: str, operation: str,
                       rkey: str | None, payload: dict[str, Any] | None = None,
                       community_did: str | None = None, reuse: bool = True) -> Intent:
        """Step 2 inside the caller's transaction: the intent `key` (with `reuse`, the one an
        earlier attempt left, so the same record key is written again)."""
        if kind not in self.kinds:
            raise ValueError(f"no plugin registers the write kind {kind!r}")
        row = await begin_intent_tx(tx, kind=kind, key=key, community_did=community_did,
                                   operation=operation, rkey=rkey, payload=payload or {},
                                   now=self.app.clock.iso_now(), reuse=reuse)
        return Intent.from_row(row)

    async def begin(self, *, kind: str, key: str, operation: str, rkey: str | None,
                    payload: dict[str, Any] | None = None, community_did: str | None = None,
                    reuse: bool = True) -> Intent:
        """Step 2 in a transaction of its own."""
        async with self.app.db.transaction(f"{kind}.begin") as tx:
            return await self.begin_tx(tx, kind=kind, key=key, operation=operation, rkey=rkey,
                                       payload=payload, community_did=community_did, reuse=reuse)

    async def finish_tx(self, tx: Transaction, intent: Intent, *, settling: bool = False) -> bool:
        """Delete the intent in the transaction that records the result. False if it was
        already gone (or, when `settling`, picked up again by a request meanwhile)."""
        return await delete_intent_tx(tx, intent.id, intent.tries if settling else None)

    async def drop(self, intent: Intent) -> bool:
        """Delete the intent in a transaction of its own (the write surely did not happen)."""
        async with self.app.db.transaction(f"{intent.kind}.drop") as tx:
            return await self.finish_tx(tx, intent)

    async def get(self, key: str, reader: Any = None) -> Intent | None:
        """The intent `key` (read in `reader`, e.g. a command's transaction), or None."""
        row = await intent_row(reader or self.app.db, key)
        return Intent.from_row(row) if row is not None else None

    async def pending(self, *, community_did: str | None = None,
                      kind_prefix: str | None = None) -> list[Intent]:
        """Every intent (of one community, of the kinds starting with `kind_prefix`), oldest first."""
        rows = await pending_intents(self.app.db, community_did=community_did, kind_prefix=kind_prefix)
        return [Intent.from_row(row) for row in rows]

    async def forget_community_tx(self, tx: Transaction, community_did: str) -> None:
        """Forget every intent of a community (deleted, or reindexed from its repo)."""
        await delete_community_intents_tx(tx, community_did)

    # ---------------------------------------------------------------- the reconciler

    async def reconcile(self, *, kinds: Sequence[str] | None = None, any_age: bool = False,
                        fresh: bool = False) -> dict[str, int]:
        """Settle the intents (of `kinds`; default all) older than their kind's
        ``settle_after`` and not waiting out a backoff; with `any_age` (the start-up pass:
        no request can own one yet) every intent; with `fresh`, intents of any age that are
        not waiting out a backoff (work recorded to be done now, such as the network
        sync's). Returns counts by outcome, plus ``postponed`` (settling failed) and
        ``busy`` (a request holds a lock)."""
        selected = [self.kinds[name] for name in (kinds if kinds is not None else sorted(self.kinds))]
        counts = {outcome: 0 for kind in selected for outcome in kind.outcomes}
        counts.update(postponed=0, busy=0)
        for kind in selected:
            await self._reconcile_kind(kind, any_age, counts, fresh)
        return counts

    async def _reconcile_kind(self, kind: WriteKind, any_age: bool, counts: dict[str, int],
                              fresh: bool = False) -> None:
        now = self.app.clock.time()
        created_before = None if any_age or fresh else iso(now - kind.settle_after(self.app))
        after_id = 0
        while True:
            rows = await due_intents(self.app.db, kind=kind.name, created_before=created_before,
                                   now=None if any_age else iso(now), after_id=after_id, limit=_BATCH)
            for row in rows:
                after_id = row["id"]
                intent = Intent.from_row(row)
                keys = [*kind.locks(intent), intent.key]
                if any(self.busy(k) for k in keys):
                    counts["busy"] += 1
                    continue
                async with AsyncExitStack() as held:
                    for k in keys:
                        await held.enter_async_context(self.lock(k))
                    outcome = await self._settle_one(kind, intent)
                if outcome is not None:
                    counts[outcome] = counts.get(outcome, 0) + 1
            if len(rows) < _BATCH:
                return

    async def _settle_one(self, kind: WriteKind, seen: Intent) -> str | None:
        fresh = await self.get(seen.key)
        if fresh is None or fresh.id != seen.id or fresh.tries != seen.tries:
            return None  # finished or retried while we waited
        try:
            return await kind.settle(self.app, fresh)
        except Exception as exc:  # noqa: BLE001 (the PDS may be down: try later)
            after = kind.settle_after(self.app)
            delay = min(after * 2 ** fresh.attempts, max(after, kind.max_backoff(self.app)))
            log.warning("cannot settle the unfinished %s (%s) yet (%r); next try in %.0f s",
                        fresh.operation, fresh.key, exc, delay)
            async with self.app.db.transaction("writes.postpone") as tx:
                await postpone_intent_tx(tx, fresh.id, next_attempt_at=iso(self.app.clock.time() + delay),
                                        error=repr(exc))
            return "postponed"

    def start(self) -> None:
        """The one reconciler loop: a pass at start-up (any age), then one every
        ``settle_after`` of the most impatient kind."""
        if not self.kinds:
            return
        interval = min(kind.settle_after(self.app) for kind in self.kinds.values())

        async def one_pass(first: bool) -> None:
            counts = await self.reconcile(any_age=first)
            if any(n for name, n in counts.items() if name != "busy"):
                log.info("write reconciliation: %s", counts)

        self.app.spawn_periodic("writes.reconciler", interval, one_pass)


# ------------------------------------------------------------------ the intent rows
# The write path's own table, ``write_intents`` (the core's migrations create it): its
# queries live with the path that writes it; plugins reach them through ``app.writes``.


async def intent_row(db: Reader, key: str) -> Row | None:
    return await db.fetchone("SELECT * FROM write_intents WHERE key = ?", (key,))


async def begin_intent_tx(tx: Transaction, *, kind: str, key: str, community_did: str | None,
                          operation: str, rkey: str | None, payload: dict[str, Any], now: str,
                          reuse: bool = True) -> Row:
    """The intent `key`: with `reuse`, the existing one if any (a retry: same rkey, one
    more try); otherwise a new row (a clash on `key` raises)."""
    if reuse:
        row = await intent_row(tx, key)
        if row is not None:
            await tx.execute("UPDATE write_intents SET tries = tries + 1 WHERE id = ?", (row["id"],))
            return row
    await tx.execute(
        "INSERT INTO write_intents (kind, key, community_did, operation, rkey, payload, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (kind, key, community_did, operation, rkey,
         json.dumps(payload, separators=(",", ":"), ensure_ascii=False), now))
    row = await intent_row(tx, key)
    assert row is not None
    return row


async def delete_intent_tx(tx: Transaction, intent_id: int, tries: int | None = None) -> bool:
    """Remove an intent (only if it is still at `tries`, when given: no request picked it
    up meanwhile); False if it was already gone."""
    if tries is None:
        cur = await tx.execute("DELETE FROM write_intents WHERE id = ?", (intent_id,))
    else:
        cur = await tx.execute("DELETE FROM write_intents WHERE id = ? AND tries = ?", (intent_id, tries))
    return cur.rowcount > 0


async def delete_community_intents_tx(tx: Transaction, community_did: str) -> None:
    """Forget every intent of a community (deleted, or reindexed from its repo)."""
    await tx.execute("DELETE FROM write_intents WHERE community_did = ?", (community_did,))


async def postpone_intent_tx(tx: Transaction, intent_id: int, *, next_attempt_at: str, error: str) -> None:
    await tx.execute(
        "UPDATE write_intents SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? "
        "WHERE id = ?", (next_attempt_at, error[:500], intent_id))


async def due_intents(db: Database, *, kind: str, created_before: str | None, now: str | None,
                      after_id: int, limit: int) -> list[Row]:
    """Intents of `kind` to settle, oldest first from `after_id`: created before
    `created_before` (None: any age) and not waiting out a backoff at `now` (None: ignore
    backoffs)."""
    return await db.fetchall(*narrowed(
        "SELECT * FROM write_intents WHERE kind = ? AND id > ?", [kind, after_id],
        {"(next_attempt_at IS NULL OR next_attempt_at <= ?)": now, "created_at <= ?": created_before},
        "ORDER BY id LIMIT ?", limit))


async def pending_intents(db: Database, *, community_did: str | None = None,
                          kind_prefix: str | None = None) -> list[Row]:
    """Every intent (of one community, of the kinds starting with `kind_prefix`), oldest first."""
    return await db.fetchall(*narrowed(
        "SELECT * FROM write_intents WHERE 1 = 1", [],
        {"community_did = ?": community_did,
         "substr(kind, 1, ?) = ?": None if kind_prefix is None else (len(kind_prefix), kind_prefix)},
        "ORDER BY id"))
