"""Record writes kept consistent with the community's repo (docs/records.md, "Consistency").

The pending-write pattern of the communities plugin, for records:

1. under a per-record lock, settle what an earlier attempt left (:func:`settle`), then
   check the index;
2. one transaction writes a ``record_pending_writes`` row holding the operation, the key
   (chosen now for creates) and the value;
3. the PDS write, idempotent and never replacing what the service did not write:
   ``putRecord`` at that key with ``swapRecord: null`` for a create (only if the key is
   free; the same value already there is the PDS's no-op, i.e. our own earlier attempt),
   with the indexed CID as ``swapRecord`` for an update, ``deleteRecord`` with the indexed
   CID as ``swapRecord`` for a delete. A refusal (4xx) removes the pending row; a failure
   that may have happened after the write (timeout, 5xx) keeps it;
4. one transaction indexes the result, emits the event and deletes the pending row.

A pending row left by a crash, a failed index transaction or an ambiguous PDS failure is
settled by reading the repo (:func:`reconcile`, run at start-up and every
``records.reconcile_after_seconds``): the write is there → step 4; it is not → the row
is dropped, with no event. Settling never writes to the repo: a pending create is
finished only if the record at its key holds exactly the pending value (what our own
write would have left); any other record there is someone else's and stays untouched.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.locks import KeyedLocks
from daemon.clock import iso
from daemon.events import emit_tx
from daemon.http import ApiError
from store import records as store
from store.db import Row, Transaction

if TYPE_CHECKING:  # pragma: no cover
    from daemon.app import Application

log = logging.getLogger("commonroom.records")

STATE_KEY = "records.writes"
_BATCH = 100


# ------------------------------------------------------------------ helpers


def compact(value: Any) -> str:
    """A record as stored in the index and the pending row."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def same_value(a: Any, b: Any) -> bool:
    """The same record, whatever the key order."""
    return json.dumps(a, sort_keys=True, separators=(",", ":")) == \
        json.dumps(b, sort_keys=True, separators=(",", ":"))


def pds_failure(exc: BaseException) -> ApiError:
    """The answer for a failed PDS step: a record the PDS refuses as invalid is the
    caller's 400; a conflict stays a 409; any other failure is a 502 (no PDS failure may
    read as success)."""
    from daemon.atproto.pds import PdsError
    if isinstance(exc, PdsError):
        if exc.status == 502 and exc.pds_status == 400:
            return ApiError(400, "record_rejected", f"The PDS refused the record: {exc.message}")
        return exc
    if isinstance(exc, ApiError):
        return exc
    return ApiError(502, "pds_error", f"The community's PDS failed: {exc}")


async def pds_call(step: Any) -> Any:
    """Await a PDS call, turning any failure into its answer (:func:`pds_failure`)."""
    try:
        return await step
    except Exception as exc:  # noqa: BLE001
        raise pds_failure(exc) from None


def surely_not_written(exc: BaseException) -> bool:
    """True if the PDS write certainly did not happen: the PDS refused it (a 4xx other
    than 429) or it was refused before anything was sent. A timeout or a 5xx may come
    after the write, so those are not."""
    from daemon.atproto.pds import PdsError
    if isinstance(exc, PdsError):
        return not exc.transient
    return isinstance(exc, ApiError)


def _locks(app: "Application") -> KeyedLocks:
    return app.state.setdefault(STATE_KEY, KeyedLocks())


def _key(community_did: str, collection: str, rkey: str) -> str:
    return f"{community_did} {collection} {rkey}"


def hold(app: "Application", community_did: str, collection: str, rkey: str) -> Any:
    """The lock a request holds on one record for its whole write (the reconciler skips
    records whose lock is held: their request finishes or leaves the row itself)."""
    return _locks(app).hold(_key(community_did, collection, rkey))


# ------------------------------------------------------------------ one write


@dataclass(frozen=True)
class Write:
    """A write as recorded in ``record_pending_writes``."""

    op: str  # create | update | delete
    community_did: str
    collection: str
    rkey: str
    value: dict[str, Any] | None
    cid: str | None  # update: the indexed CID (swapRecord); delete: the deleted version's
    author_did: str
    user_did: str
    app_id: str | None
    id: int | None = None

    @classmethod
    def from_row(cls, row: Row) -> "Write":
        return cls(row["op"], row["community_did"], row["collection"], row["rkey"],
                   json.loads(row["value"]) if row["value"] is not None else None, row["cid"],
                   row["author_did"], row["user_did"], row["app_id"], row["id"])

    @property
    def uri(self) -> str:
        return f"at://{self.community_did}/{self.collection}/{self.rkey}"


async def perform(app: "Application", repo: Any, write: Write) -> dict[str, Any]:
    """Steps 2-4 for a request holding the record's lock; ``{"uri", "cid"}`` written.

    Raises the PDS failure (the pending row stays unless the PDS surely did not write),
    or 500 ``index_failed`` when the record is on the PDS but could not be indexed (the
    pending row stays; the reconciler finishes it)."""
    async with app.db.transaction(f"records.{write.op}_begin") as tx:
        row = await store.insert_pending_write_tx(
            tx, op=write.op, community_did=write.community_did, collection=write.collection,
            rkey=write.rkey, value_json=compact(write.value) if write.value is not None else None,
            cid=write.cid, author_did=write.author_did, user_did=write.user_did,
            app_id=write.app_id, now=app.clock.iso_now())
    write = Write.from_row(row)
    try:
        if write.op == "delete":
            await repo.delete_record(write.collection, write.rkey, swap_record=write.cid)
            written = {"uri": write.uri, "cid": write.cid}
        elif write.op == "create":
            assert write.value is not None
            written = await repo.put_record(write.collection, write.rkey, write.value, create_only=True)
        else:
            assert write.value is not None
            written = await repo.put_record(write.collection, write.rkey, write.value,
                                            swap_record=write.cid)
    except Exception as exc:  # noqa: BLE001
        answer = pds_failure(exc)
        if surely_not_written(exc):
            async with app.db.transaction("records.refused") as tx:
                await store.delete_pending_write_tx(tx, write.id)  # type: ignore[arg-type]
        else:
            log.warning("%s of %s may or may not have reached the PDS (%r); left for the reconciler",
                        write.op, write.uri, exc)
            answer = ApiError(answer.status, answer.code,
                              f"{answer.message} The write may still have reached the repo: it is "
                              "checked and finished or dropped shortly. Retry with the same rkey.",
                              details={"rkey": write.rkey, "uri": write.uri})
        raise answer from None
    try:
        async with app.db.transaction(f"records.{write.op}") as tx:
            await finish_tx(app, tx, write, written)
    except Exception:
        log.exception("%s of %s reached the PDS but was not indexed; left for the reconciler",
                      write.op, write.uri)
        raise ApiError(500, "index_failed",
                       "The change reached the community's repo but could not be recorded here; it "
                       "is recorded shortly. Retry with the same rkey to confirm.",
                       details={"rkey": write.rkey, "uri": write.uri}) from None
    return written


async def finish_tx(app: "Application", tx: Transaction, write: Write, written: dict[str, Any]) -> bool:
    """Step 4: index what the PDS holds, emit the event, delete the pending row. False
    (nothing done) if the pending row is already gone: whoever removed it settled it."""
    assert write.id is not None
    if not await store.delete_pending_write_tx(tx, write.id):
        log.warning("the pending %s of %s was settled elsewhere", write.op, write.uri)
        return False
    did, collection, rkey = write.community_did, write.collection, write.rkey
    current = await store.get_record_tx(tx, did, collection, rkey)
    now = app.clock.iso_now()
    if write.op == "delete":
        if current is not None:
            await store.delete_record_tx(tx, current["id"])
        written = {"uri": current["uri"] if current else write.uri,
                   "cid": current["cid"] if current else write.cid}
        event = "record.deleted"
    elif write.op == "create" or current is None:  # an update of a record deleted meanwhile re-adds it
        await store.upsert_record_tx(
            tx, community_did=did, collection=collection, rkey=rkey, uri=written["uri"],
            cid=written["cid"], author_did=write.author_did, app_id=write.app_id,
            value_json=compact(write.value), now=now)
        event = "record.created" if write.op == "create" else "record.updated"
    else:
        await store.update_record_tx(tx, current["id"], uri=written["uri"], cid=written["cid"],
                                     value_json=compact(write.value), updated_by=write.user_did, now=now)
        event = "record.updated"
    data = {"collection": collection, "rkey": rkey, "uri": written["uri"], "cid": written["cid"],
            "userDid": write.user_did}
    await emit_tx(app, tx, event, community_did=did, data=data, app_id=write.app_id,
                  actor_did=write.user_did)
    return True


# ------------------------------------------------------------------ settling


async def settle(app: "Application", community_did: str, collection: str, rkey: str) -> tuple[str, Write] | None:
    """Settle the write an earlier attempt left on this record (the caller holds its
    lock): ``("finished" | "dropped", write)``, or None if there was none. Raises the
    PDS failure (502) if the repo cannot be read."""
    row = await store.get_pending_write(app.db, community_did, collection, rkey)
    if row is None:
        return None
    write = Write.from_row(row)
    seen = await pds_call(_read(app, write))
    return await _apply(app, write, seen), write


async def _read(app: "Application", write: Write) -> dict[str, Any] | None:
    """The record at the write's key in the repo, as it is now (None: no record)."""
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, write.community_did)
    return await repo.get_record(write.collection, write.rkey)


async def _apply(app: "Application", write: Write, seen: dict[str, Any] | None) -> str:
    """Finish the pending write if the repo shows it happened, else drop it."""
    if write.op == "delete":
        landed = seen is None
    else:
        landed = seen is not None and same_value(seen["value"], write.value) and \
            not (write.op == "update" and seen["cid"] == write.cid)
    async with app.db.transaction("records.reconcile") as tx:
        if landed:
            written = {"uri": write.uri, "cid": write.cid} if seen is None else \
                {"uri": seen["uri"], "cid": seen["cid"]}
            done = await finish_tx(app, tx, write, written)
        else:
            done = await store.delete_pending_write_tx(tx, write.id)  # type: ignore[arg-type]
    outcome = "finished" if landed else "dropped"
    if done:
        log.info("pending %s of %s %s after reading the repo", write.op, write.uri, outcome)
    return outcome


async def reconcile(app: "Application", *, any_age: bool = False) -> dict[str, int]:
    """Settle the pending writes older than ``records.reconcile_after_seconds`` (any age
    with `any_age`: at start-up no request can own one) that are not waiting out a
    backoff. A repo that cannot be read postpones the row (backoff doubling from
    ``reconcile_after_seconds`` up to ``reconcile_max_backoff_seconds``). Returns counts
    by outcome."""
    cfg = app.config.plugin("records")
    locks = _locks(app)
    counts = {"finished": 0, "dropped": 0, "postponed": 0, "busy": 0}
    now = app.clock.time()
    created_before = None if any_age else iso(now - cfg.reconcile_after_seconds)
    after_id = 0
    while True:
        rows = await store.due_pending_writes(app.db, created_before=created_before, now=iso(now),
                                              after_id=after_id, limit=_BATCH)
        for row in rows:
            after_id = row["id"]
            key = _key(row["community_did"], row["collection"], row["rkey"])
            if locks.busy(key):
                counts["busy"] += 1
                continue
            async with locks.hold(key):
                fresh = await store.get_pending_write(app.db, row["community_did"], row["collection"],
                                                      row["rkey"])
                if fresh is None or fresh["id"] != row["id"]:
                    continue  # settled while we waited
                write = Write.from_row(fresh)
                try:
                    counts[await _apply(app, write, await _read(app, write))] += 1
                except Exception as exc:  # noqa: BLE001 (the repo may be down: try later)
                    delay = min(cfg.reconcile_after_seconds * 2 ** fresh["attempts"],
                                cfg.reconcile_max_backoff_seconds)
                    log.warning("cannot settle the pending %s of %s/%s in %s yet (%r); next try in %.0f s",
                                fresh["op"], fresh["collection"], fresh["rkey"], fresh["community_did"],
                                exc, delay)
                    async with app.db.transaction("records.reconcile_postpone") as tx:
                        await store.postpone_pending_write_tx(
                            tx, fresh["id"], next_attempt_at=iso(app.clock.time() + delay),
                            error=repr(exc))
                    counts["postponed"] += 1
        if len(rows) < _BATCH:
            return counts


def start_reconciler(app: "Application") -> None:
    """A pass at start-up (any age), then one every ``records.reconcile_after_seconds``."""
    async def one_pass(first: bool) -> None:
        counts = await reconcile(app, any_age=first)
        if counts["finished"] or counts["dropped"] or counts["postponed"]:
            log.info("record reconciliation: %s", counts)

    app.spawn_periodic("records.reconciler", app.config.plugin("records").reconcile_after_seconds,
                       one_pass)
