"""Record writes kept consistent with the community's repo (docs/records.md, "Consistency").

The core's one write path (daemon/atproto/writes.py, ``app.writes``), for records:

1. under the record's lock, settle what an earlier attempt left (:func:`settle`), then
   check the index;
2. one transaction writes a ``records.write`` intent holding the operation, the key
   (chosen now for creates) and the value;
3. the PDS write, idempotent and never replacing what the service did not write:
   ``putRecord`` at that key with ``swapRecord: null`` for a create (only if the key is
   free; the same value already there is the PDS's no-op, i.e. our own earlier attempt),
   with the indexed CID as ``swapRecord`` for an update, ``deleteRecord`` with the indexed
   CID as ``swapRecord`` for a delete. A refusal (4xx) removes the intent; a failure
   that may have happened after the write (timeout, 5xx) keeps it;
4. one transaction indexes the result, emits the event and deletes the intent.

An intent left by a crash, a failed index transaction or an ambiguous PDS failure is
settled by reading the repo (the kind's :func:`settle_intent`, run by the core's reconciler
at start-up and every ``records.reconcile_after_seconds``): the write is there → step 4; it is not → the row
is dropped, with no event. Settling never writes to the repo: a pending create is
finished only if the record at its key holds exactly the pending value (what our own
write would have left); any other record there is someone else's and stays untouched.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError, Transaction, emit_tx
from daemon.plugin.atproto import DROP_UNWRITTEN, Command, Intent, Plan, Run, WriteKind, pds
from plugins.records import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.records")

KIND = "records.write"


# ------------------------------------------------------------------ helpers


def compact(value: Any) -> str:
    """A record as stored in the index and the intent."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def same_value(a: Any, b: Any) -> bool:
    """The same record, whatever the key order."""
    return json.dumps(a, sort_keys=True, separators=(",", ":")) == \
        json.dumps(b, sort_keys=True, separators=(",", ":"))


def _key(community_did: str, collection: str, rkey: str) -> str:
    return f"record:{community_did} {collection} {rkey}"


def hold(app: "Application", community_did: str, collection: str, rkey: str) -> Any:
    """The lock a request holds on one record for its whole write (the reconciler skips
    records whose lock is held: their request finishes or leaves the intent itself)."""
    return app.writes.lock(_key(community_did, collection, rkey))


# ------------------------------------------------------------------ one write


@dataclass(frozen=True)
class Write:
    """A record write, as recorded in a ``records.write`` intent."""

    op: str  # create | update | delete
    community_did: str
    collection: str
    rkey: str
    value: dict[str, Any] | None
    cid: str | None  # update: the indexed CID (swapRecord); delete: the deleted version's
    author_did: str
    user_did: str
    app_id: str | None
    intent: Intent | None = None

    @classmethod
    def from_intent(cls, intent: Intent) -> "Write":
        p = intent.payload
        return cls(intent.operation, intent.community_did or "", p["collection"], intent.rkey or "",
                   p.get("value"), p.get("cid"), p["authorDid"], p["userDid"], p.get("appId"), intent)

    def payload(self) -> dict[str, Any]:
        return {"collection": self.collection, "value": self.value, "cid": self.cid,
                "authorDid": self.author_did, "userDid": self.user_did, "appId": self.app_id}

    @property
    def uri(self) -> str:
        return f"at://{self.community_did}/{self.collection}/{self.rkey}"


class RecordWrite(Command):
    """Steps 2-4 of one record write, for a request holding the record's lock (it holds it
    again, as its only lock): ``{"uri", "cid"}`` written.

    A PDS failure is answered under the core's policy for records (:data:`DROP_UNWRITTEN`:
    the intent stays unless the PDS surely did not write); a record on the PDS that could
    not be indexed is 500 ``index_failed`` (the intent stays; the reconciler finishes it)."""

    kind = KIND
    on_pds_error = DROP_UNWRITTEN
    refusal_is_callers = True  # the record is the caller's: one the PDS refuses is their 400

    def __init__(self, app: "Application", repo: Any, write: Write) -> None:
        self.app, self._repo, self.record = app, repo, write
        self.name = f"records.{write.op}"

    def locks(self) -> list[str]:
        w = self.record
        return [_key(w.community_did, w.collection, w.rkey)]

    async def check(self, tx: Transaction) -> Plan:
        w = self.record
        return Plan(key=_key(w.community_did, w.collection, w.rkey), operation=w.op, rkey=w.rkey,
                    payload=w.payload(), community_did=w.community_did, reuse=False)

    async def repo(self) -> Any:
        return self._repo

    async def write(self, run: Run) -> None:
        assert run.intent is not None
        w = self.record = Write.from_intent(run.intent)
        if w.op == "delete":
            await run.delete(w.collection, w.rkey, swap_record=w.cid)
            run.results.append({"uri": w.uri, "cid": w.cid})
        elif w.op == "create":
            assert w.value is not None
            await run.put(w.collection, w.rkey, w.value, create_only=True)
        else:
            assert w.value is not None
            await run.put(w.collection, w.rkey, w.value, swap_record=w.cid)

    async def commit(self, tx: Transaction, run: Run) -> dict[str, Any]:
        written = run.results[-1]
        if not await run.finish(tx):
            log.warning("the pending %s of %s was settled elsewhere", self.record.op, self.record.uri)
            return written
        await index_tx(self.app, tx, self.record, written)
        return written

    def failed(self, answer: ApiError, run: Run, maybe_written: bool) -> ApiError:
        if not maybe_written:
            return answer
        w = self.record
        return ApiError(answer.status, answer.code,
                        f"{answer.message} The write may still have reached the repo: it is "
                        "checked and finished or dropped shortly. Retry with the same rkey.",
                        details={"rkey": w.rkey, "uri": w.uri})

    def commit_failed(self, exc: Exception, run: Run) -> BaseException:
        w = self.record
        log.error("%s of %s reached the PDS but was not indexed; left for the reconciler",
                  w.op, w.uri, exc_info=exc)
        return ApiError(500, "index_failed",
                        "The change reached the community's repo but could not be recorded here; it "
                        "is recorded shortly. Retry with the same rkey to confirm.",
                        details={"rkey": w.rkey, "uri": w.uri})


async def index_tx(app: "Application", tx: Transaction, write: Write, written: dict[str, Any]) -> None:
    """Step 4 (the intent already finished in `tx`): index what the PDS holds, emit the event."""
    did, collection, rkey = write.community_did, write.collection, write.rkey
    current = await store.get_record(tx, did, collection, rkey)
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


# ------------------------------------------------------------------ settling


async def settle(app: "Application", community_did: str, collection: str, rkey: str) -> tuple[str, Write] | None:
    """Settle the write an earlier attempt left on this record (the caller holds its
    lock): ``("finished" | "dropped", write)``, or None if there was none. Raises the
    PDS failure (502) if the repo cannot be read."""
    intent = await app.writes.get(_key(community_did, collection, rkey))
    if intent is None:
        return None
    write = Write.from_intent(intent)
    seen = await pds(_read(app, write), refusal_is_callers=True)
    return await _apply(app, write, seen), write


async def _read(app: "Application", write: Write) -> dict[str, Any] | None:
    """The record at the write's key in the repo, as it is now (None: no record)."""
    from daemon.plugin.atproto import community_repo
    repo = await community_repo(app, write.community_did)
    return await repo.get_record(write.collection, write.rkey)


async def _apply(app: "Application", write: Write, seen: dict[str, Any] | None) -> str:
    """Finish the intent if the repo shows it happened, else drop it."""
    if write.op == "delete":
        landed = seen is None
    else:
        landed = seen is not None and same_value(seen["value"], write.value) and \
            not (write.op == "update" and seen["cid"] == write.cid)
    async with app.db.transaction("records.reconcile") as tx:
        if landed:
            written = {"uri": write.uri, "cid": write.cid} if seen is None else \
                {"uri": seen["uri"], "cid": seen["cid"]}
            done = await app.writes.finish_tx(tx, write.intent)  # type: ignore[arg-type]
            if done:
                await index_tx(app, tx, write, written)
            else:
                log.warning("the pending %s of %s was settled elsewhere", write.op, write.uri)
        else:
            done = await app.writes.finish_tx(tx, write.intent)  # type: ignore[arg-type]
    outcome = "finished" if landed else "dropped"
    if done:
        log.info("pending %s of %s %s after reading the repo", write.op, write.uri, outcome)
    return outcome


async def settle_intent(app: "Application", intent: Intent) -> str:
    """The kind's settling: read the repo, then finish or drop (raises if it cannot be read)."""
    write = Write.from_intent(intent)
    return await _apply(app, write, await _read(app, write))


def write_kinds(app: "Application") -> list[WriteKind]:
    cfg = app.config.plugin("records")
    return [WriteKind(KIND, settle_intent, lambda app: cfg.reconcile_after_seconds,
                      max_backoff=lambda app: cfg.reconcile_max_backoff_seconds,
                      outcomes=("finished", "dropped"))]


async def reconcile(app: "Application", *, any_age: bool = False) -> dict[str, int]:
    """Settle the record intents older than ``records.reconcile_after_seconds`` (any age
    with `any_age`: at start-up no request can own one) that are not waiting out a
    backoff, now (the core's reconciler does so periodically). A repo that cannot be read
    postpones the intent (backoff doubling from ``reconcile_after_seconds`` up to
    ``reconcile_max_backoff_seconds``). Returns counts by outcome."""
    return await app.writes.reconcile(kinds=[KIND], any_age=any_age)
