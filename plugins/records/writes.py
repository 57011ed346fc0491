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

from daemon.atproto import writes as core
from daemon.plugin import ApiError, Intent, Transaction, WriteKind, emit_tx
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


def pds_failure(exc: BaseException) -> ApiError:
    """The answer for a failed PDS step (the core's policy; the record is the caller's, so
    a record the PDS refuses as invalid is their 400)."""
    return core.pds_failure(exc, refusal_is_callers=True)


async def pds_call(step: Any) -> Any:
    """Await a PDS call, turning any failure into its answer (:func:`pds_failure`)."""
    return await core.pds(step, refusal_is_callers=True)


surely_not_written = core.surely_not_written


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


async def perform(app: "Application", repo: Any, write: Write) -> dict[str, Any]:
    """Steps 2-4 for a request holding the record's lock; ``{"uri", "cid"}`` written.

    Raises the PDS failure (the intent stays unless the PDS surely did not write),
    or 500 ``index_failed`` when the record is on the PDS but could not be indexed (the
    intent stays; the reconciler finishes it)."""
    intent = await app.writes.begin(kind=KIND, key=_key(write.community_did, write.collection, write.rkey),
                                    community_did=write.community_did, operation=write.op,
                                    rkey=write.rkey, payload=write.payload(), reuse=False)
    write = Write.from_intent(intent)
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
            await app.writes.drop(intent)
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
    """Step 4: index what the PDS holds, emit the event, delete the intent. False
    (nothing done) if the intent is already gone: whoever removed it settled it."""
    assert write.intent is not None
    if not await app.writes.finish_tx(tx, write.intent):
        log.warning("the pending %s of %s was settled elsewhere", write.op, write.uri)
        return False
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
    return True


# ------------------------------------------------------------------ settling


async def settle(app: "Application", community_did: str, collection: str, rkey: str) -> tuple[str, Write] | None:
    """Settle the write an earlier attempt left on this record (the caller holds its
    lock): ``("finished" | "dropped", write)``, or None if there was none. Raises the
    PDS failure (502) if the repo cannot be read."""
    intent = await app.writes.get(_key(community_did, collection, rkey))
    if intent is None:
        return None
    write = Write.from_intent(intent)
    seen = await pds_call(_read(app, write))
    return await _apply(app, write, seen), write


async def _read(app: "Application", write: Write) -> dict[str, Any] | None:
    """The record at the write's key in the repo, as it is now (None: no record)."""
    from daemon.atproto.accounts import community_repo
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
            done = await finish_tx(app, tx, write, written)
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
