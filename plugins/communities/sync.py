"""What the network's event stream changes in communities (docs/sync.md).

The core's sync (daemon/sync/) hands relevant events to ``apply_tx`` in the transaction
that saves the stream's cursor. Changes that stay local (an account that is no longer
active) are made there. Everything that needs the network (re-resolving an identity,
reading a profile, a PDS write) is recorded there as a write intent of kind
``communities.sync`` (durable with the cursor) and done right after the commit by
``run`` through the core's reconciler, which also finishes it after a crash. Each
operation goes through the same command as the API (join, leave, reindex), with the
same events, audit entries and reconciliation.

Operations (``write_intents.operation``):

* ``identity``: re-resolve the DID; the verified handle replaces the cached one (member
  lists, the community's handle);
* ``profile``: read the person's ``app.bsky.actor.profile/self`` again (display name,
  avatar; removed fields are cleared);
* ``join``: the person wrote a ``membership`` record naming a community they are not in:
  a join proven by their own repo (open: member with a proof; otherwise: pending);
* ``leave``: the person deleted the ``membership`` record the index refers to: leave;
* ``account_deleted``: leave with ``reason: "account_deleted"`` (the proof is deleted,
  ``member.left`` carries the reason);
* ``refresh``: someone else changed the community's ``profile`` or ``admins`` record:
  read both from the repo into the index;
* ``reindex``: events of the community may have been missed: rebuild it from its repo.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError
from daemon.plugin.atproto import Intent, WriteKind
from daemon.plugin import Reader, Transaction
from daemon.plugin.atproto import Interest, SyncEvent, record_account_status_tx
from plugins.communities.steps import (ADMINS, CREATE, DELETE, PROFILE, Actor, admins_list, audit_tx, community_lock,
                                       community_repo_for, member_status, nsid)
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities.sync")

SYNC = "communities.sync"
_PROFILE = "app.bsky.actor.profile"


# ------------------------------------------------------------------ what to follow


def interest(app: "Application") -> Interest:
    """Members, people asking to join and communities; and any repo's ``membership``
    records (someone unknown may join by writing one)."""
    membership = nsid(app, "membership")

    async def load(db: Reader, mark: Any) -> tuple[set[str], Any]:
        return await store.interest_since(db, mark or (0, 0, 0))

    return Interest("communities", load, collections=frozenset({membership}), decode=frozenset({membership}))


# ------------------------------------------------------------------ in the cursor's transaction


async def apply_tx(app: "Application", tx: Transaction, events: list[SyncEvent]) -> None:
    names = {"membership": nsid(app, "membership"), "profile": nsid(app, "profile"),
             "admins": nsid(app, "admins")}
    communities = await store.communities_by_dids_tx(tx, sorted({e.did for e in events if e.did}))
    now = app.clock.iso_now()
    for event in events:
        if event.own:
            continue
        community = communities.get(event.did)
        if community is not None and community["state"] != "active":
            continue  # a community being created: the command's own writes
        if event.kind == "gap":
            dids = [event.did] if community is not None else \
                await store.active_community_dids_tx(tx) if not event.did else []
            if dids:
                log.warning("events may have been missed (%s): reindexing %d communit%s",
                            "outdated cursor" if not event.did else f"gap in {event.did}",
                            len(dids), "y" if len(dids) == 1 else "ies")
            for did in dids:
                await _todo(app, tx, "reindex", did, community=did)
            if event.did and community is None:
                await _todo(app, tx, "profile", event.did)
        elif event.kind == "identity":
            await _todo(app, tx, "identity", event.did)
        elif event.kind == "account":
            if community is not None:
                log.info("the account of community %s is now %s", event.did,
                            "active" if event.active else event.status or "inactive")
            else:
                await record_account_status_tx(tx, event.did, active=bool(event.active),
                                               status=event.status, now=now)
                if not event.active and event.status == "deleted":
                    for row in await store.memberships_tx(tx, event.did):
                        await _todo(app, tx, "account_deleted", event.did, community=row["community_did"])
        elif event.kind == "commit":
            if community is not None:
                if any(op.collection in (names["profile"], names["admins"]) for op in event.ops):
                    await _todo(app, tx, "refresh", event.did, community=event.did)
                continue
            for op in event.ops:
                if op.collection == _PROFILE and op.rkey == "self":
                    if await store.is_known_tx(tx, event.did):
                        await _todo(app, tx, "profile", event.did)
                elif op.collection == names["membership"]:
                    await _membership_op_tx(app, tx, event, op)


async def _membership_op_tx(app: "Application", tx: Transaction, event: SyncEvent, op: Any) -> None:
    uri = f"at://{event.did}/{op.collection}/{op.rkey}"
    if op.action == "delete":
        for row in await store.by_membership_uri_tx(tx, event.did, uri):
            await _todo(app, tx, "leave", event.did, community=row["community_did"], rkey=op.rkey)
        return
    target = (op.record or {}).get("community")
    if not isinstance(target, str):
        return
    row = await store.get_community(tx, target)
    if row is None or row["state"] != "active":
        return
    own = await app.writes.get(f"membership:{target}:{event.did}", tx)
    if own is not None and own.rkey == op.rkey:
        return  # the browser's join writing the record: this service's own write
    status = await member_status(tx, target, event.did)
    if status.is_member or status.is_pending:
        return
    await _todo(app, tx, "join", event.did, community=target, rkey=op.rkey, uri=uri, cid=op.cid)


async def _todo(app: "Application", tx: Transaction, operation: str, did: str, *,
                community: str | None = None, rkey: str | None = None, **extra: Any) -> None:
    """Record work to do after the commit (an intent: a repeat of the same work merges)."""
    key = ":".join(filter(None, ("sync", operation, community, did, rkey)))
    await app.writes.begin_tx(tx, kind=SYNC, key=key, operation=operation, rkey=rkey,
                              payload={"did": did, "community": community, **extra})


# ------------------------------------------------------------------ after the commit


async def run(app: "Application") -> dict[str, int]:
    """Do the work the last batches recorded (and any left by a crash or a failure whose
    backoff is over)."""
    return await app.writes.reconcile(kinds=[SYNC], fresh=True)


async def settle(app: "Application", intent: Intent) -> str | None:
    """Do one recorded operation, then drop its intent. A refusal (the user is not a
    member any more, the primary admin's account was deleted, ...) is logged and
    dropped; a failure of the network (5xx) raises, and the reconciler tries again later."""
    try:
        outcome = await _OPERATIONS[intent.operation](app, intent)
    except ApiError as exc:
        if exc.status >= 500:
            raise
        log.info("network sync: %s of %s refused: %s %s", intent.operation, intent.payload.get("did"),
                 exc.code, exc.message)
        outcome = "refused"
    async with app.db.transaction("communities.sync_done") as tx:
        if not await app.writes.finish_tx(tx, intent, settling=True):
            return None  # the same work was recorded again meanwhile: it runs again
    return outcome


async def _community(app: "Application", intent: Intent) -> Any:
    row = await store.get_community(app.db, intent.payload.get("community") or "")
    if row is None or row["state"] != "active":
        raise ApiError(404, "not_found", "The community is gone.")
    return row


async def _own_record(app: "Application", did: str, rkey: str) -> dict[str, Any] | None:
    """The person's membership record at `rkey`, read from their own PDS (as their DID
    document names it): the stream's word is checked against the repo before anyone joins
    or leaves because of it."""
    from daemon.plugin.atproto import get_record, resolve_did
    info = await resolve_did(app, did)
    if not info.pds_url:
        raise ApiError(400, "no_pds", f"{did} names no PDS")
    got = await get_record(app, info.pds_url, did, nsid(app, "membership"), rkey)
    return got["value"] if got is not None and isinstance(got.get("value"), dict) else None


async def _join(app: "Application", intent: Intent) -> str:
    from plugins.communities.membership import join
    did, community = intent.payload["did"], await _community(app, intent)
    record = await _own_record(app, did, intent.rkey or "")
    if record is None or record.get("community") != community["did"]:
        raise ApiError(404, "membership_record_gone", "The membership record is no longer in the user's repo.")
    # an instance-wide policy may ignore the person's records (a ban on the instance)
    await app.check_action("membership.sync", did, community_did=community["did"])
    await join(app, community, did, Actor(did, None, proven=True),
               membership_uri=intent.payload.get("uri"), membership_cid=intent.payload.get("cid"))
    return "applied"


async def _leave(app: "Application", intent: Intent) -> str:
    from plugins.communities.membership import leave
    did, community = intent.payload["did"], await _community(app, intent)
    reason = "account_deleted" if intent.operation == "account_deleted" else None
    if reason is None and await _own_record(app, did, intent.rkey or "") is not None:
        raise ApiError(409, "membership_record_present", "The membership record is still in the user's repo.")
    await leave(app, community, did, Actor(did, None, proven=True), reason=reason)
    return "applied"


async def _identity(app: "Application", intent: Intent) -> str:
    from daemon.plugin.atproto import resolve_did
    did = intent.payload["did"]
    info = await resolve_did(app, did, fresh=True)
    if info.handle is None:
        return "refused"  # the handle does not resolve back: keep the last verified one
    async with app.db.transaction("communities.sync_handle") as tx:
        await store.set_handle_tx(tx, did, info.handle, app.clock.iso_now())
    return "applied"


async def _profile(app: "Application", intent: Intent) -> str:
    from daemon.plugin.atproto import read_user_profile, resolve_did
    did = intent.payload["did"]
    info = await resolve_did(app, did)
    profile = await read_user_profile(app, did) or {}
    async with app.db.transaction("communities.sync_profile") as tx:
        await store.set_profile_tx(tx, did, info.handle, profile.get("displayName"), profile.get("avatar"),
                                        app.clock.iso_now())
    return "applied"


_BUSY_KINDS = (ADMINS, PROFILE, CREATE, DELETE)


async def _refresh(app: "Application", intent: Intent) -> str:
    """The community's profile and admins, read from its repo into the index."""
    from plugins.communities.reindex import profile_fields
    did = intent.payload["community"]
    await _community(app, intent)
    async with community_lock(app, did):
        if any(i.kind in _BUSY_KINDS for i in await app.writes.pending(community_did=did)):
            # A command of ours did not finish: the reconciler settles it first.
            raise ApiError(503, "community_busy", "A write to the community's repo is unsettled.")
        repo = await community_repo_for(app, did)
        profile = await repo.get_record(nsid(app, "profile"), "self")
        admins = await repo.get_record(nsid(app, "admins"), "self")
        now = app.clock.iso_now()
        async with app.db.transaction("communities.sync_refresh") as tx:
            row = await store.get_community(tx, did)
            if row is None:
                return "refused"
            fields = profile_fields(row, profile["value"]) if profile is not None else {}
            changed = {k: v for k, v in fields.items() if row[k] != v}
            if changed:
                await store.update_community_tx(tx, did, now, **changed)
            if admins is not None:
                ordered = []
                for entry in admins["value"].get("admins") or []:
                    if isinstance(entry, dict) and isinstance(entry.get("did"), str) and \
                            await store.get_member(tx, did, entry["did"]) is not None:
                        ordered.append((entry["did"], entry.get("addedAt") or now))
                current = await admins_list(tx, did)
                if ordered and [d for d, _ in ordered] != [d for d, _ in current]:
                    await store.set_admins_tx(tx, did, ordered)
                    changed["admins"] = [d for d, _ in ordered]
            if changed:
                await audit_tx(app, tx, did, "community.refreshed", None, None,
                               metadata={"source": "network", "changed": sorted(changed)})
    return "applied"


async def _reindex(app: "Application", intent: Intent) -> str:
    from plugins.communities.reindex import reindex
    await _community(app, intent)
    await reindex(app, intent.payload["community"])
    return "applied"


_OPERATIONS = {"join": _join, "leave": _leave, "account_deleted": _leave, "identity": _identity,
               "profile": _profile, "refresh": _refresh, "reindex": _reindex}


def write_kinds(app: "Application") -> list[WriteKind]:
    def after(app: "Application") -> float:
        return app.config.plugin("communities").reconcile_after_seconds

    return [WriteKind(SYNC, settle, after, outcomes=("applied", "refused"))]
