"""Settling the pending writes no request finished (docs/communities.md, "Consistency").

A row in ``community_pending_writes`` older than ``communities.reconcile_after_seconds``
(any age at start-up: no request can own one yet) belongs to an operation that wrote to
the PDS, or may have, and then never committed locally: the daemon crashed, or the local
transaction failed, and the client did not retry. From the client's point of view that
operation never happened, so the reconciler **rolls back** what it may have written on the
PDS, unless the local index already reflects it:

* ``proof:`` (join, approve): the proof at the pending record key is deleted unless the
  local member row points at that key;
* ``remove:`` (leave, remove): if the member is still in the index, their proof is put
  back from the member row (and, for an admin, the ``admins`` record from the index); if
  they are not, the proof at that key is deleted (again);
* ``admins:`` (promote, demote, transfer): the ``admins`` record is put from the index;
* ``membership:`` (browser join, the user's own record): that record is in the user's
  repo, which the service can only write for a signed-in user; it is left (harmless: no
  community proof backs it) and only the row is dropped.

Then, in one transaction, the row is deleted (only if no request picked it up meanwhile)
and an audit entry ``reconciled`` is written; no event (nothing completed). A PDS that
fails keeps the row; it is tried again after a backoff doubling from
``reconcile_after_seconds`` up to an hour. Communities whose lock is busy, and pending
writes a request is working on, are skipped until the next pass.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from daemon.clock import iso
from plugins.communities import records as rec
from plugins.communities.service import (audit_tx, community_busy, community_lock, pending_busy,
                                         pending_lock)
from store import communities as communities_store
from store import members as members_store
from store.db import Row

if TYPE_CHECKING:  # pragma: no cover
    from daemon.app import Application

log = logging.getLogger("commonroom.communities")

MAX_BACKOFF_SECONDS = 3600.0


def _backoff(app: "Application") -> dict[str, tuple[int, float]]:
    """key -> (failed attempts, earliest next try on app.clock): in memory, so a restart
    tries every row again at once (the start-up pass)."""
    return app.state.setdefault("communities.reconcile_backoff", {})


async def _admins(app: "Application", did: str) -> list[tuple[str, str]]:
    return [(r["member_did"], r["admin_since"]) for r in await members_store.admins(app.db, did)]


async def _undo(app: "Application", row: Row) -> list[str]:
    """Make the repo match the index for what `row` may have written. Returns what was
    done (for the audit entry); raises if the PDS fails."""
    from daemon.atproto.accounts import community_repo

    did, key, rkey = row["community_did"], row["key"], row["rkey"]
    payload = json.loads(row["payload"] or "{}")
    kind = key.split(":", 1)[0]
    if kind == "membership":
        return ["left the user's membership record"]
    community = await communities_store.get_community(app.db, did)
    if community is None or community["state"] != "active":
        return []  # nothing of this community is presented any more (or not yet)
    proof_nsid, admins_nsid = rec.nsid(app, "membershipProof"), rec.nsid(app, "admins")
    done: list[str] = []
    repo = await community_repo(app, did)
    if kind == "proof":
        member = await members_store.get_member(app.db, did, payload.get("memberDid", ""))
        if member is None or member["proof_rkey"] != rkey:
            await repo.delete_record(proof_nsid, rkey)
            done.append(f"deleted {proof_nsid}/{rkey}")
    elif kind == "remove":
        member = await members_store.get_member(app.db, did, payload.get("memberDid", ""))
        if member is not None:
            await repo.put_record(proof_nsid, member["proof_rkey"], rec.membership_proof(
                member["member_did"], member["confirmed_at"], member["membership_uri"],
                member["membership_cid"]))
            done.append(f"put {proof_nsid}/{member['proof_rkey']}")
        elif rkey:
            await repo.delete_record(proof_nsid, rkey)
            done.append(f"deleted {proof_nsid}/{rkey}")
        if payload.get("wasAdmin"):
            await repo.put_record(admins_nsid, "self",
                                  rec.admins_record(await _admins(app, did), app.clock.iso_now()))
            done.append(f"put {admins_nsid}/self")
    elif kind == "admins":
        await repo.put_record(admins_nsid, "self",
                              rec.admins_record(await _admins(app, did), app.clock.iso_now()))
        done.append(f"put {admins_nsid}/self")
    else:
        raise ValueError(f"unknown pending write {key!r}")
    return done


async def _settle(app: "Application", row: Row) -> bool:
    done = await _undo(app, row)
    payload = json.loads(row["payload"] or "{}")
    async with app.db.transaction("communities.reconcile") as tx:
        if not await communities_store.finish_write_if_tx(tx, row["key"], row["created_at"], row["attempts"]):
            return False  # a request took it over meanwhile
        if await communities_store.get_community_tx(tx, row["community_did"]) is not None:
            await audit_tx(app, tx, row["community_did"], "reconciled", None,
                           payload.get("memberDid") or payload.get("userDid"),
                           metadata={"operation": row["operation"], "key": row["key"], "rkey": row["rkey"],
                                     "startedAt": row["created_at"], "attempts": row["attempts"],
                                     "undone": done})
    log.info("settled the unfinished %s (%s) in %s: %s", row["operation"], row["key"],
             row["community_did"], done or "nothing to undo")
    return True


async def reconcile(app: "Application", *, any_age: bool = False) -> dict[str, int]:
    """Settle the pending writes older than ``communities.reconcile_after_seconds`` (any
    age with `any_age`) that are not waiting out a backoff. Returns counts by outcome."""
    after = app.config.plugin("communities").reconcile_after_seconds
    backoff = _backoff(app)
    counts = {"reconciled": 0, "postponed": 0, "busy": 0}
    now = app.clock.time()
    rows = await communities_store.stale_pending_writes(
        app.db, created_before=None if any_age else iso(now - after))
    for row in rows:
        key, did = row["key"], row["community_did"]
        if key in backoff and backoff[key][1] > now:
            continue
        if community_busy(app, did) or pending_busy(app, key):
            counts["busy"] += 1
            continue
        async with community_lock(app, did), pending_lock(app, key):
            fresh = await communities_store.get_pending_write(app.db, key)
            if fresh is None or fresh["created_at"] != row["created_at"] or fresh["attempts"] != row["attempts"]:
                continue  # finished or retried while we waited
            try:
                settled = await _settle(app, fresh)
            except Exception as exc:  # noqa: BLE001 (the PDS may be down: try later)
                failures = backoff.get(key, (0, 0.0))[0] + 1
                delay = min(after * 2 ** (failures - 1), max(after, MAX_BACKOFF_SECONDS))
                backoff[key] = (failures, app.clock.time() + delay)
                log.warning("cannot settle the unfinished %s (%s) in %s yet (%r); next try in %.0f s",
                            fresh["operation"], key, did, exc, delay)
                counts["postponed"] += 1
                continue
            backoff.pop(key, None)
            if settled:
                counts["reconciled"] += 1
    seen = {r["key"] for r in rows}
    for key in [k for k in backoff if k not in seen]:
        backoff.pop(key, None)  # settled by a request meanwhile
    return counts


def start_reconciler(app: "Application") -> None:
    """A pass at start-up (any age), then one every ``communities.reconcile_after_seconds``."""
    async def one_pass(first: bool) -> None:
        counts = await reconcile(app, any_age=first)
        if counts["reconciled"] or counts["postponed"]:
            log.info("communities reconciliation: %s", counts)

    app.spawn_periodic("communities.reconciler",
                       app.config.plugin("communities").reconcile_after_seconds, one_pass)
