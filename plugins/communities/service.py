"""The operations on communities, shared by the API-key and browser routes.

Every write follows one pattern (see docs/communities.md, "Consistency"):

1. check the state from the local index (refusals change nothing);
2. record a *pending write* (``community_pending_writes``) holding the record keys chosen
   for the PDS, or reuse the one a failed earlier attempt left, so a retry writes the same
   records (``putRecord`` at a known key, ``deleteRecord``: both idempotent);
3. write to the community's repo on the PDS; a failure is a 502 and nothing local changes;
4. one local transaction: re-check the state, change the index, delete the pending write,
   emit the event (``emit_tx``) and write the audit entry.

Operations that rewrite the ``admins`` record hold a per-community lock so two of them
never compute the list from the same old state.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from daemon.locks import KeyedLocks
from daemon.atproto.syntax import new_tid
from daemon.events import emit_tx
from daemon.http import ApiError
from plugins.communities.access import (NOT_FOUND, MemberStatus, member_status, member_status_tx,
                                         require_manager, require_manager_tx)
from plugins.communities import records as rec
from store import accounts as accounts_store
from store import audit as audit_store
from store import communities as communities_store
from store import members as members_store
from store.db import Row, Transaction

if TYPE_CHECKING:  # pragma: no cover
    from daemon.app import Application

log = logging.getLogger("commonroom.communities")


@dataclass(frozen=True)
class Actor:
    """Who acts: the user (asserted by an app, or the session user) and the app, if any."""

    did: str
    app_id: str | None = None
    #: The user is proven: a browser session, or a verified proof from the app (daemon/proofs.py).
    proven: bool = False


# ------------------------------------------------------------------ helpers


def community_lock(app: "Application", did: str) -> Any:
    """The lock held by every operation that rewrites a community's admins list."""
    locks = app.state.setdefault("communities.locks", KeyedLocks())
    return locks.hold(did)


def community_busy(app: "Application", did: str) -> bool:
    """True while some operation holds `community_lock` (the reconciler then skips it)."""
    locks = app.state.get("communities.locks")
    return locks is not None and locks.busy(did)


def pending_lock(app: "Application", key: str) -> Any:
    """The lock a request holds on its pending write from begin to commit (joins do not
    take the community lock; this keeps the reconciler off a write in progress)."""
    locks = app.state.setdefault("communities.pending_locks", KeyedLocks())
    return locks.hold(key)


def pending_busy(app: "Application", key: str) -> bool:
    locks = app.state.get("communities.pending_locks")
    return locks is not None and locks.busy(key)


async def audit_tx(app: "Application", tx: Transaction, community_did: str, action: str, actor: Actor | None,
                   target_did: str | None = None, reason: str | None = None,
                   metadata: dict[str, Any] | None = None) -> None:
    if actor is not None:
        metadata = {**(metadata or {}), "actorProven": actor.proven}
    await audit_store.insert_entry_tx(
        tx, community_did=community_did, action=action, actor_did=actor.did if actor else None,
        target_did=target_did, reason=reason, metadata=metadata,
        app_id=actor.app_id if actor else None, now=app.clock.iso_now())


async def pds(step: Awaitable[Any]) -> Any:
    """Await a PDS call; anything but an ApiError (a bug in a lower layer, a network error
    that escaped) becomes a 502 too, so no PDS failure ever reads as success."""
    try:
        return await step
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001
        log.warning("PDS call failed: %r", exc)
        raise ApiError(502, "pds_error", f"The community's PDS failed: {exc}") from None


async def community_repo_for(app: "Application", did: str) -> Any:
    """The community account's repo client (502 rather than any other error)."""
    from daemon.atproto.accounts import community_repo
    return await pds(community_repo(app, did))


async def fetch_profile(app: "Application", did: str) -> tuple[str | None, str | None, str | None] | None:
    """(handle, displayName, avatar URL) of a user, best effort and time-bounded."""
    from daemon.atproto.identity import resolve_identity
    from daemon.atproto.pds import read_user_profile

    timeout = app.config.plugin("communities").profile_fetch_timeout_seconds

    async def both() -> tuple[str | None, str | None, str | None]:
        info = await resolve_identity(app, did)
        profile = None
        try:
            profile = await read_user_profile(app, did)
        except Exception as exc:  # noqa: BLE001
            log.info("no profile for %s: %s", did, exc)
        profile = profile or {}
        return info.handle, profile.get("displayName"), profile.get("avatar")

    try:
        return await asyncio.wait_for(both(), timeout)
    except Exception as exc:  # noqa: BLE001 (best effort: the member list shows the DID)
        log.info("could not fetch the profile of %s: %r", did, exc)
        return None


def _let_finish(task: "asyncio.Future[Any]") -> None:
    """Leave an unneeded profile fetch to finish on its own (it is time-bounded) rather than
    cancel it: a cancel landing while it caches an identity in a transaction could leave the
    writer connection inside that transaction (see the report on store/db.py)."""
    if not task.done():
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def store_profile_tx(app: "Application", tx: Transaction, did: str,
                           profile: tuple[str | None, str | None, str | None] | None) -> None:
    if profile is not None:
        await members_store.upsert_profile_tx(tx, did, *profile, app.clock.iso_now())


async def require_person(app: "Application", did: str, field: str) -> None:
    """`did` names a real person before it is written to the PDS or the index: a strict
    did:plc / did:web whose document resolves (cached; 400 ``invalid_request`` /
    ``unsupported_did`` / ``unknown_did``, 502 if the directory cannot be reached)."""
    from daemon.atproto.identity import require_known_did
    await require_known_did(app, did, field)


def _require(status: MemberStatus, *, admin: bool = False, primary: bool = False) -> None:
    if primary and not status.is_primary:
        raise ApiError(403, "not_primary_admin", "Only the primary admin may do this.")
    if admin and not status.is_admin:
        raise ApiError(403, "not_admin", "Only an admin of this community may do this.")


async def _active_tx(tx: Transaction, did: str) -> Row:
    row = await communities_store.get_community_tx(tx, did)
    if row is None or row["state"] != "active":
        raise NOT_FOUND(did)
    return row


async def _admins_list(tx_or_db: Any, community_did: str) -> list[tuple[str, str]]:
    if isinstance(tx_or_db, Transaction):
        rows = await members_store.admins_tx(tx_or_db, community_did)
    else:
        rows = await members_store.admins(tx_or_db, community_did)
    return [(r["member_did"], r["admin_since"]) for r in rows]


# ------------------------------------------------------------------ joining


async def join(app: "Application", community: Row, user_did: str, actor: Actor, *,
               membership_uri: str | None = None, membership_cid: str | None = None,
               before_commit: Callable[[], Awaitable[tuple[str | None, str | None]]] | None = None,
               ) -> tuple[int, dict[str, Any]]:
    """Join (open: member, 201) or ask to join (otherwise: pending, 202). 409 if already
    a member or pending. `before_commit` (browser) writes the user's own membership record
    after the checks and returns its (uri, cid)."""
    did = community["did"]
    status = await _status(app, did, user_did)
    if status.is_member:
        raise ApiError(409, "already_member", "This user is already a member of the community.")
    if status.is_pending:
        raise ApiError(409, "already_pending", "This user has already asked to join; an admin must approve.")
    await require_person(app, user_did, "userDid")
    profile_task = asyncio.ensure_future(fetch_profile(app, user_did))
    try:
        if before_commit is not None:
            membership_uri, membership_cid = await before_commit()
        if community["type"] == "open":
            return 201, await _confirm(app, community, user_did, actor, "member.joined",
                                       membership_uri, membership_cid, profile_task)
        profile = await profile_task
        now = app.clock.iso_now()
        async with app.db.transaction("communities.join_request") as tx:
            await _active_tx(tx, did)
            status = await member_status_tx(tx, did, user_did)
            if status.is_member or status.is_pending:
                raise ApiError(409, "already_member" if status.is_member else "already_pending",
                               "This user is already a member or has already asked to join.")
            await members_store.insert_request_tx(tx, community_did=did, member_did=user_did, now=now,
                                                  membership_uri=membership_uri,
                                                  membership_cid=membership_cid, app_id=actor.app_id)
            await communities_store.adjust_counts_tx(tx, did, pending=1)
            await store_profile_tx(app, tx, user_did, profile)
            await audit_tx(app, tx, did, "member.requested", actor, user_did)
        return 202, {"status": "pending", "communityDid": did, "memberDid": user_did,
                     "requestedAt": now}
    finally:
        _let_finish(profile_task)


async def _status(app: "Application", did: str, user_did: str) -> MemberStatus:
    return await member_status(app, did, user_did)


async def _manages_tx(tx: Transaction, row: Row, app_id: str) -> bool:
    from plugins.communities.access import app_manages_tx
    return await app_manages_tx(tx, row, app_id)


async def _confirm(app: "Application", community: Row, user_did: str, actor: Actor, event: str,
                   membership_uri: str | None, membership_cid: str | None,
                   profile_task: "asyncio.Future[Any] | None", *, extra: dict[str, Any] | None = None,
                   from_request: bool = False) -> dict[str, Any]:
    """Write the membership proof, then make `user_did` a member (join or approve)."""
    did = community["did"]
    key = f"proof:{did}:{user_did}"
    async with pending_lock(app, key):
        return await _confirm_locked(app, community, user_did, actor, event, membership_uri,
                                     membership_cid, profile_task, key, extra=extra,
                                     from_request=from_request)


async def _confirm_locked(app: "Application", community: Row, user_did: str, actor: Actor, event: str,
                          membership_uri: str | None, membership_cid: str | None,
                          profile_task: "asyncio.Future[Any] | None", key: str, *,
                          extra: dict[str, Any] | None, from_request: bool) -> dict[str, Any]:
    did = community["did"]
    collection = rec.nsid(app, "membershipProof")
    async with app.db.transaction("communities.proof_begin") as tx:
        pending = await communities_store.begin_write_tx(
            tx, key=key, community_did=did, operation=event, rkey=new_tid(app.clock),
            payload={"memberDid": user_did}, now=app.clock.iso_now())
    rkey = pending["rkey"]
    confirmed_at = app.clock.iso_now()
    repo = await community_repo_for(app, did)
    written = await pds(repo.put_record(collection, rkey, rec.membership_proof(
        user_did, confirmed_at, membership_uri, membership_cid)))
    profile = await profile_task if profile_task is not None else None
    refusal: ApiError | None = None
    keep_rkey: str | None = None  # the committed member's proof: never roll that one back
    async with app.db.transaction("communities.confirm") as tx:
        row = await communities_store.get_community_tx(tx, did)
        status = await member_status_tx(tx, did, user_did)
        if row is None or row["state"] != "active":
            refusal = NOT_FOUND(did)
        elif actor.app_id is not None and from_request and not await _manages_tx(tx, row, actor.app_id):
            refusal = ApiError(403, "app_not_trusted", "The app's management grant was revoked meanwhile.")
        elif status.is_member:
            # A concurrent request won. If it shared our pending row, its proof is the one
            # we wrote (same key); otherwise ours is a second proof, rolled back below.
            refusal = ApiError(409, "already_member", "This user is already a member of the community.")
            member = await members_store.get_member_tx(tx, did, user_did)
            keep_rkey = member["proof_rkey"] if member is not None else None
        elif from_request and not status.is_pending:
            # The request was withdrawn or rejected meanwhile: take the proof back.
            refusal = ApiError(404, "no_pending_request", "This user has no pending join request.")
        if refusal is not None:
            await communities_store.finish_write_tx(tx, key)
        else:
            if status.is_pending:
                await members_store.delete_request_tx(tx, did, user_did)
                await communities_store.adjust_counts_tx(tx, did, pending=-1)
            await members_store.insert_member_tx(
                tx, community_did=did, member_did=user_did, now=confirmed_at, proof_rkey=rkey,
                proof_cid=written.get("cid"), membership_uri=membership_uri,
                membership_cid=membership_cid, app_id=actor.app_id)
            await communities_store.adjust_counts_tx(tx, did, members=1)
            await communities_store.finish_write_tx(tx, key)
            await store_profile_tx(app, tx, user_did, profile)
            data = {"memberDid": user_did, **(extra or {})}
            await emit_tx(app, tx, event, community_did=did, data=data, app_id=actor.app_id,
                          actor_did=actor.did)
            await audit_tx(app, tx, did, event, actor, user_did,
                           metadata={"proofUri": written.get("uri")})
    if refusal is not None:
        if rkey != keep_rkey:
            await _roll_back(repo, [(collection, rkey)])
        raise refusal
    return {"status": "joined", "communityDid": did, "memberDid": user_did,
            "membership": {"communityDid": did, "memberDid": user_did, "confirmedAt": confirmed_at,
                           "proofUri": written.get("uri"), "proofCid": written.get("cid"),
                           "membershipUri": membership_uri, "membershipCid": membership_cid}}


async def approve(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    did = community["did"]
    await require_manager(app, community, actor.app_id)
    admin = await _status(app, did, actor.did)
    _require(admin, admin=True)
    target = await _status(app, did, member_did)
    if target.is_member:
        raise ApiError(409, "already_member", "This user is already a member of the community.")
    if not target.is_pending:
        raise ApiError(404, "no_pending_request", "This user has no pending join request.")
    req = await members_store.get_request(app.db, did, member_did)
    uri, cid = (req["membership_uri"], req["membership_cid"]) if req else (None, None)
    return await _confirm(app, community, member_did, actor, "member.approved", uri, cid, None,
                          extra={"approvedBy": actor.did}, from_request=True)


async def reject(app: "Application", community: Row, member_did: str, actor: Actor,
                 reason: str | None) -> dict[str, Any]:
    did = community["did"]
    async with app.db.transaction("communities.reject") as tx:
        await require_manager_tx(tx, await _active_tx(tx, did), actor.app_id)
        _require(await member_status_tx(tx, did, actor.did), admin=True)
        if not await members_store.delete_request_tx(tx, did, member_did):
            if (await member_status_tx(tx, did, member_did)).is_member:
                raise ApiError(409, "already_member", "This user is already a member of the community; "
                               "remove them instead.")
            raise ApiError(404, "no_pending_request", "This user has no pending join request.")
        await communities_store.adjust_counts_tx(tx, did, pending=-1)
        await emit_tx(app, tx, "member.rejected", community_did=did,
                      data={"memberDid": member_did, "rejectedBy": actor.did, "reason": reason},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, "member.rejected", actor, member_did, reason)
    return {"status": "rejected", "communityDid": did, "memberDid": member_did}


# ------------------------------------------------------------------ leaving and removal


async def leave(app: "Application", community: Row, user_did: str, actor: Actor,
                after_commit: Callable[[Row], Awaitable[None]] | None = None) -> dict[str, Any]:
    """Leave (a member) or withdraw a join request (pending). The primary admin must
    transfer first (409); an admin who leaves stops being an admin. `after_commit` (browser:
    delete the user's own membership record) runs after the local commit, best effort: a
    failing user PDS never stops anyone leaving."""
    did = community["did"]
    status = await _status(app, did, user_did)
    if status.is_pending and not status.is_member:
        async with app.db.transaction("communities.withdraw") as tx:
            await _active_tx(tx, did)
            request = await members_store.get_request_tx(tx, did, user_did)
            if not await members_store.delete_request_tx(tx, did, user_did):
                raise ApiError(404, "not_member", "This user is not a member of the community.")
            await communities_store.adjust_counts_tx(tx, did, pending=-1)
            await audit_tx(app, tx, did, "member.request_withdrawn", actor, user_did)
        await _best_effort(after_commit, request, did, user_did)
        return {"status": "withdrawn", "communityDid": did, "memberDid": user_did}
    if not status.is_member:
        raise ApiError(404, "not_member", "This user is not a member of the community.")
    if status.is_primary:
        raise ApiError(409, "primary_admin_must_transfer",
                       "The primary admin cannot leave: transfer the primary admin role to another "
                       "member first (admins/transfer).")
    return await _remove(app, community, user_did, actor, "member.left", None, {}, after_commit)


async def remove(app: "Application", community: Row, member_did: str, actor: Actor,
                 reason: str | None) -> dict[str, Any]:
    did = community["did"]
    await require_manager(app, community, actor.app_id)
    _require(await _status(app, did, actor.did), admin=True)
    target = await _status(app, did, member_did)
    if not target.is_member:
        raise ApiError(404, "not_member", "This user is not a member of the community.")
    if target.is_primary:
        raise ApiError(409, "cannot_remove_primary_admin", "The primary admin cannot be removed.")
    return await _remove(app, community, member_did, actor, "member.removed", reason,
                         {"removedBy": actor.did, "reason": reason})


async def _remove(app: "Application", community: Row, member_did: str, actor: Actor, event: str,
                  reason: str | None, extra: dict[str, Any],
                  after_commit: Callable[[Row], Awaitable[None]] | None = None) -> dict[str, Any]:
    did = community["did"]
    async with community_lock(app, did):
        member = await members_store.get_member(app.db, did, member_did)
        if member is None:
            raise ApiError(404, "not_member", "This user is not a member of the community.")
        if member["admin_rank"] == 0:
            raise ApiError(409, "primary_admin_must_transfer",
                           "The primary admin cannot leave or be removed; transfer the role first.")
        was_admin = member["admin_rank"] is not None
        admins = [a for a in await _admins_list(app.db, did) if a[0] != member_did]
        key = f"remove:{did}:{member_did}"
        async with app.db.transaction("communities.remove_begin") as tx:
            await communities_store.begin_write_tx(
                tx, key=key, community_did=did, operation=event, rkey=member["proof_rkey"],
                payload={"memberDid": member_did, "wasAdmin": was_admin}, now=app.clock.iso_now())
        repo = await community_repo_for(app, did)
        if was_admin:
            await pds(repo.put_record(rec.nsid(app, "admins"), "self", rec.admins_record(admins, app.clock.iso_now())))
        await pds(repo.delete_record(rec.nsid(app, "membershipProof"), member["proof_rkey"]))
        gone = False
        async with app.db.transaction("communities.remove") as tx:
            await _active_tx(tx, did)
            await communities_store.finish_write_tx(tx, key)
            if not await members_store.delete_member_tx(tx, did, member_did):
                gone = True  # a concurrent request removed them first
            else:
                if was_admin:
                    await members_store.set_admins_tx(tx, did, admins)
                await communities_store.adjust_counts_tx(tx, did, members=-1)
                await emit_tx(app, tx, event, community_did=did, data={"memberDid": member_did, **extra},
                              app_id=actor.app_id, actor_did=actor.did)
                await audit_tx(app, tx, did, event, actor, member_did, reason,
                               metadata={"wasAdmin": was_admin})
        if gone:
            raise ApiError(404, "not_member", "This user is not a member of the community.")
    await _best_effort(after_commit, member, did, member_did)
    return {"status": "left" if event == "member.left" else "removed", "communityDid": did,
            "memberDid": member_did}


async def _best_effort(step: Callable[[Row], Awaitable[None]] | None, row: Row | None, did: str,
                       user_did: str) -> None:
    """Run a post-commit step (the user's own record); log a failure, never raise: the
    community side has changed and the caller must hear so. The stray record is harmless
    (the community's proof is gone) and the user can delete it from their repo."""
    if step is None or row is None:
        return
    try:
        await step(row)
    except Exception as exc:  # noqa: BLE001
        log.warning("left %s, but could not delete the membership record of %s in their repo: %r",
                    did, user_did, exc)


# ------------------------------------------------------------------ admins


async def _write_admins(app: "Application", community: Row, actor: Actor, action: str,
                        target_did: str, compute: Callable[[list[tuple[str, str]], MemberStatus, MemberStatus],
                                                           list[tuple[str, str]]],
                        target_field: str | None = None) -> dict[str, Any]:
    """Rewrite the admins list as `compute` says. With `target_field` (promote, transfer:
    the target gains a role) the target must be a real person: checked after the cheap
    refusals and before the lock, so a slow directory never holds up the community."""
    did = community["did"]
    await require_manager(app, community, actor.app_id)
    if target_field is not None:
        compute(await _admins_list(app.db, did), await _status(app, did, actor.did),
                await _status(app, did, target_did))
        await require_person(app, target_did, target_field)
    async with community_lock(app, did):
        actor_status = await _status(app, did, actor.did)
        target = await _status(app, did, target_did)
        current = await _admins_list(app.db, did)
        new = compute(current, actor_status, target)
        key = f"admins:{did}"
        now = app.clock.iso_now()
        async with app.db.transaction("communities.admins_begin") as tx:
            await communities_store.begin_write_tx(
                tx, key=key, community_did=did, operation=action, rkey="self",
                payload={"admins": [a for a, _ in new]}, now=now)
        repo = await community_repo_for(app, did)
        await pds(repo.put_record(rec.nsid(app, "admins"), "self", rec.admins_record(new, now)))
        async with app.db.transaction("communities." + action) as tx:
            await require_manager_tx(tx, await _active_tx(tx, did), actor.app_id)
            await members_store.set_admins_tx(tx, did, new)
            await communities_store.finish_write_tx(tx, key)
            await audit_tx(app, tx, did, action, actor, target_did,
                           metadata={"admins": [a for a, _ in new]})
    return {"communityDid": did, "admins": [{"did": a, "addedAt": t} for a, t in new]}


async def promote(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    now = app.clock.iso_now()

    def compute(current: list[tuple[str, str]], me: MemberStatus, target: MemberStatus) -> list[tuple[str, str]]:
        _require(me, admin=True)
        if not target.is_member:
            raise ApiError(404, "not_member", "Only a member can be promoted; this user is not one.")
        if target.is_admin:
            raise ApiError(409, "already_admin", "This member is already an admin.")
        return current + [(member_did, now)]

    return await _write_admins(app, community, actor, "admin.promoted", member_did, compute,
                               target_field="memberDid")


async def demote(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    def compute(current: list[tuple[str, str]], me: MemberStatus, target: MemberStatus) -> list[tuple[str, str]]:
        _require(me, admin=True)
        if not target.is_admin:
            raise ApiError(409, "not_admin_target", "This user is not an admin.")
        if target.is_primary:
            raise ApiError(409, "cannot_demote_primary_admin",
                           "The primary admin cannot be demoted; transfer the role first.")
        return [a for a in current if a[0] != member_did]

    return await _write_admins(app, community, actor, "admin.demoted", member_did, compute)


async def transfer(app: "Application", community: Row, new_owner: str, actor: Actor) -> dict[str, Any]:
    now = app.clock.iso_now()

    def compute(current: list[tuple[str, str]], me: MemberStatus, target: MemberStatus) -> list[tuple[str, str]]:
        _require(me, primary=True)
        if new_owner == actor.did:
            raise ApiError(409, "already_primary_admin", "This user is already the primary admin.")
        if not target.is_member:
            raise ApiError(404, "not_member", "The new primary admin must be a member of the community.")
        added = dict(current).get(new_owner, now)
        rest = [a for a in current if a[0] != new_owner]
        return [(new_owner, added)] + rest

    return await _write_admins(app, community, actor, "admin.transferred", new_owner, compute,
                               target_field="newOwnerDid")


# ------------------------------------------------------------------ app visibility


async def allow_app(app: "Application", community: Row, app_id: str, actor: Actor, allow: bool,
                    manage: bool = False) -> dict[str, Any]:
    """Grant (`allow`) or revoke an app's access: visibility only, or management (`manage`:
    it may act for the admins). Only an admin, through the browser or an app that already
    manages the community, may change grants."""
    did = community["did"]
    async with app.db.transaction("communities.app_visibility") as tx:
        row = await _active_tx(tx, did)
        await require_manager_tx(tx, row, actor.app_id)
        _require(await member_status_tx(tx, did, actor.did), admin=True)
        if allow:
            changed = await communities_store.allow_app_tx(tx, did, app_id, actor.did, app.clock.iso_now(),
                                                           manage=manage)
        else:
            changed = await communities_store.disallow_app_tx(tx, did, app_id)
        if changed:
            await audit_tx(app, tx, did, "community.app_allowed" if allow else "community.app_disallowed",
                           actor, None, metadata={"appId": app_id, "manage": bool(allow and manage)})
    return {"communityDid": did, "appId": app_id, "allowed": allow, "manage": bool(allow and manage)}


# ------------------------------------------------------------------ create


def default_handle(display_name: str, creator_did: str) -> str:
    """A handle label from the display name plus a short hash of (creator, name), so a
    retried request lands on the same handle (and finishes the same creation)."""
    ascii_name = unicodedata.normalize("NFKD", display_name).encode("ascii", "ignore").decode()
    # the reference PDS allows 18 characters in the first label
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:11].strip("-") or "community"[:11]
    digest = hashlib.sha256(f"{creator_did}\n{display_name}".encode()).hexdigest()[:6]
    return f"{slug}-{digest}"


async def create(app: "Application", actor: Actor, *, display_name: str, description: str,
                 type: str, handle: str | None, identifier: str | None,
                 app_password: str | None) -> dict[str, Any]:
    """Provision (or bring) the account, write profile, admins and the creator's proof,
    then index it. A failure after the account exists leaves an invisible 'creating'
    row; the same request again finishes the job."""
    from daemon.atproto.accounts import (CommunityAccount, bring_own_account, fetch_handle_domain,
                                         provision_account)

    cfg = app.config.plugin("communities")
    await require_person(app, actor.did, "creatorDid")
    if identifier is not None:
        if not cfg.allow_bring_own:
            raise ApiError(403, "bring_own_disabled", "This service does not accept existing accounts.")
        if identifier.startswith("did:"):
            await _refuse_existing(app, identifier)
        account = await pds(bring_own_account(app, identifier, app_password or ""))
        kind = "brought"
    else:
        if not cfg.allow_provision:
            raise ApiError(403, "provisioning_disabled",
                           "This service does not create accounts: bring one (identifier + appPassword).")
        wanted = (handle or default_handle(display_name, actor.did)).strip().lower().lstrip("@")
        if "." not in wanted:
            wanted += await pds(fetch_handle_domain(app))
        unfinished = await communities_store.creating_community(app.db, handle=wanted)
        if unfinished is not None and unfinished["creator_did"] == actor.did:
            # An earlier attempt provisioned the account and failed later: finish it.
            account = CommunityAccount(unfinished["did"], unfinished["handle"], unfinished["pds_url"])
        else:
            account = await pds(provision_account(app, wanted))
        kind = "provisioned"
    now = app.clock.iso_now()
    async with app.db.transaction("communities.create_begin") as tx:
        row = await communities_store.get_community_tx(tx, account.did)
        if row is not None and (row["state"] == "active" or row["creator_did"] != actor.did):
            raise ApiError(409, "community_exists", f"{account.handle} is already a community here.")
        if row is None:
            await communities_store.insert_community_tx(
                tx, did=account.did, handle=account.handle, display_name=display_name,
                description=description, type=type, pds_url=account.pds_url, account_kind=kind,
                creator_did=actor.did, creator_app_id=actor.app_id, proof_rkey=new_tid(app.clock),
                now=now)
        else:
            await communities_store.update_community_tx(
                tx, account.did, now, display_name=display_name, description=description, type=type,
                handle=account.handle, pds_url=account.pds_url)
        row = await communities_store.get_community_tx(tx, account.did)
    did, proof_rkey = row["did"], row["proof_rkey"]
    profile_task = asyncio.ensure_future(fetch_profile(app, actor.did))
    repo = await community_repo_for(app, did)
    written: list[tuple[str, str]] = []
    try:
        profile_nsid, admins_nsid, proof_nsid = (rec.nsid(app, n) for n in ("profile", "admins", "membershipProof"))
        await pds(repo.put_record(profile_nsid, "self", rec.profile_record(dict(row), created_at=row["created_at"])))
        written.append((profile_nsid, "self"))
        await pds(repo.put_record(admins_nsid, "self", rec.admins_record([(actor.did, now)], now)))
        written.append((admins_nsid, "self"))
        proof = await pds(repo.put_record(proof_nsid, proof_rkey, rec.membership_proof(actor.did, now)))
    except ApiError as exc:
        _let_finish(profile_task)
        await _roll_back(repo, written)
        raise ApiError(exc.status, exc.code,
                       f"{exc.message} The community is not created; send the same request again "
                       "to finish creating it.") from None
    profile = await profile_task
    async with app.db.transaction("communities.create") as tx:
        await communities_store.update_community_tx(tx, did, app.clock.iso_now(), state="active")
        await members_store.insert_member_tx(
            tx, community_did=did, member_did=actor.did, now=now, proof_rkey=proof_rkey,
            proof_cid=proof.get("cid"), membership_uri=None, membership_cid=None,
            app_id=actor.app_id, admin_rank=0)
        await communities_store.set_counts_tx(tx, did, 1, 0)
        await store_profile_tx(app, tx, actor.did, profile)
        await emit_tx(app, tx, "member.joined", community_did=did, data={"memberDid": actor.did},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, "community.created", actor, actor.did,
                       metadata={"type": type, "handle": account.handle, "account": kind})
    return {"did": did}


async def _refuse_existing(app: "Application", did: str) -> None:
    row = await communities_store.get_community(app.db, did)
    if row is not None and row["state"] == "active":
        raise ApiError(409, "community_exists", f"{did} is already a community here.")


async def _roll_back(repo: Any, written: list[tuple[str, str]]) -> None:
    for collection, rkey in reversed(written):
        try:
            await repo.delete_record(collection, rkey)
        except Exception as exc:  # noqa: BLE001 (the retry finishes or a reindex repairs)
            log.warning("could not roll back %s/%s on %s: %r", collection, rkey, repo.did, exc)


# ------------------------------------------------------------------ profile and images


async def update_profile(app: "Application", community: Row, actor: Actor, **changes: Any) -> None:
    """Change display_name / description / type / avatar / banner (put the profile, then
    the index). `avatar`/`banner` are (cid, mime, size)."""
    did = community["did"]
    async with community_lock(app, did):
        async with app.db.transaction("communities.profile_check") as tx:
            row = await _active_tx(tx, did)
            await require_manager_tx(tx, row, actor.app_id)
            _require(await member_status_tx(tx, did, actor.did), admin=True)
        fields: dict[str, Any] = {}
        for key in ("display_name", "description", "type"):
            if changes.get(key) is not None:
                fields[key] = changes[key]
        for image in ("avatar", "banner"):
            if changes.get(image) is not None:
                fields[f"{image}_cid"], fields[f"{image}_mime"], fields[f"{image}_size"] = changes[image]
        merged = dict(row) | fields
        repo = await community_repo_for(app, did)
        await pds(repo.put_record(rec.nsid(app, "profile"), "self",
                                  rec.profile_record(merged, created_at=row["created_at"],
                                                     updated_at=app.clock.iso_now())))
        async with app.db.transaction("communities.profile") as tx:
            await _active_tx(tx, did)
            await communities_store.update_community_tx(tx, did, app.clock.iso_now(), **fields)
            await audit_tx(app, tx, did, "community.profile_updated", actor, None,
                           metadata={"fields": sorted(k for k in changes if changes[k] is not None)})


# ------------------------------------------------------------------ delete


async def delete(app: "Application", community: Row, actor: Actor) -> dict[str, Any]:
    """Primary admin only. Deletes the community's profile and admins records from its
    repo (so it no longer presents itself as a community), then, in one transaction, the
    local index and the stored credentials. Membership proofs stay in the repo (history);
    the account itself is not deleted: its owner keeps it (brought) or it stays idle
    (provisioned). Once the index is gone the answer is 200, whatever happens after."""
    from daemon.atproto.accounts import forget_account

    did = community["did"]
    await require_manager(app, community, actor.app_id)
    _require(await _status(app, did, actor.did), primary=True)
    async with community_lock(app, did):
        # Re-checked under the lock: a transfer may have finished while we waited.
        _require(await _status(app, did, actor.did), primary=True)
        if app.config.plugin("communities").delete_pds_records:
            repo = await community_repo_for(app, did)
            await pds(repo.delete_record(rec.nsid(app, "admins"), "self"))
            await pds(repo.delete_record(rec.nsid(app, "profile"), "self"))
        async with app.db.transaction("communities.delete") as tx:
            row = await _active_tx(tx, did)
            await require_manager_tx(tx, row, actor.app_id)
            _require(await member_status_tx(tx, did, actor.did), primary=True)
            await audit_tx(app, tx, did, "community.deleted", actor, None,
                           metadata={"handle": row["handle"], "memberCount": row["member_count"],
                                     "account": row["account_kind"]})
            await communities_store.delete_community_tx(tx, did)
            await accounts_store.delete_account_tx(tx, did)
    try:
        # Drops the cached PDS session (the stored row is already gone: idempotent).
        await forget_account(app, did)
    except Exception as exc:  # noqa: BLE001 (the community is deleted; never a 502 now)
        log.warning("deleted %s, but could not drop its cached PDS session: %r", did, exc)
    return {"status": "deleted", "did": did}
