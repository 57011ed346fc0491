"""Membership commands: join (or ask to join), approve, reject, leave (or withdraw),
remove; and the browser's join and leave, which also write the user's own membership
record. Each reads check → intent → PDS → one transaction (see steps.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from daemon.plugin import NOT_FOUND
from plugins.communities.access import app_manages, member_status, require_manager
from daemon.plugin import ApiError, Intent, Row, Transaction, emit_tx, new_tid, pds, roll_back
from plugins.communities import invites, roles
from plugins.communities.steps import (MEMBERSHIP, PROOF, REMOVE, Actor, active_tx, admins_list,
                                       admins_record, audit_tx, banned_tx, community_lock,
                                       community_repo_for, fetch_profile, let_finish, membership_proof,
                                       membership_record, nsid, refuse_banned, require_person,
                                       store_profile_tx)
from plugins.communities.capabilities import require_capability
from plugins.communities import store as communities_store
from plugins.communities import store as members_store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities")


# ------------------------------------------------------------------ joining


async def join(app: "Application", community: Row, user_did: str, actor: Actor, *,
               membership_uri: str | None = None, membership_cid: str | None = None,
               before_commit: Callable[[], Awaitable[tuple[str | None, str | None]]] | None = None,
               finish_too: Sequence[Intent] = (), invite: Row | None = None,
               ) -> tuple[int, dict[str, Any]]:
    """Join (open, or with a usable `invite`: member, 201) or ask to join (otherwise:
    pending, 202). 409 if already a member or pending (pending with an invite: admitted).
    403 ``banned`` while a ban is in force (bans.py). `before_commit` (browser) writes the
    user's own membership record after the checks and returns its (uri, cid); the intents
    in `finish_too` (filled by then) are finished in the join's own transaction."""
    did = community["did"]
    await refuse_banned(app, did, user_did)
    status = await member_status(app.db, did, user_did)
    if status.is_member:
        raise ApiError(409, "already_member", "This user is already a member of the community.")
    if status.is_pending and invite is None:
        raise ApiError(409, "already_pending", "This user has already asked to join; an admin must approve.")
    await require_person(app, user_did, "userDid")
    profile_task = asyncio.ensure_future(fetch_profile(app, user_did))
    try:
        if before_commit is not None:
            membership_uri, membership_cid = await before_commit()
        if community["type"] == "open" or invite is not None:
            async def admit_tx(tx: Transaction) -> ApiError | None:
                return await banned_tx(app, tx, did, user_did) or \
                    (await invites.claim_tx(app, tx, invite) if invite is not None else None)

            via = {"via": "invite", "inviteId": f"{invites.ID_PREFIX}{invite['id']}"} if invite is not None else None
            return 201, await _confirm(app, community, user_did, actor, "member.joined",
                                       membership_uri, membership_cid, profile_task,
                                       finish_too=finish_too, extra=via, admit_tx=admit_tx,
                                       audit_metadata=via)
        profile = await profile_task
        now = app.clock.iso_now()
        async with app.db.transaction("communities.join_request") as tx:
            await active_tx(tx, did)
            status = await member_status(tx, did, user_did)
            if status.is_member or status.is_pending:
                raise ApiError(409, "already_member" if status.is_member else "already_pending",
                               "This user is already a member or has already asked to join.")
            banned = await banned_tx(app, tx, did, user_did)
            if banned is not None:
                raise banned
            await members_store.insert_request_tx(tx, community_did=did, member_did=user_did, now=now,
                                                  membership_uri=membership_uri,
                                                  membership_cid=membership_cid, app_id=actor.app_id)
            await communities_store.adjust_counts_tx(tx, did, pending=1)
            await store_profile_tx(app, tx, user_did, profile)
            for intent in finish_too:
                await app.writes.finish_tx(tx, intent)
            await audit_tx(app, tx, did, "member.requested", actor, user_did)
        return 202, {"status": "pending", "communityDid": did, "memberDid": user_did,
                     "requestedAt": now}
    finally:
        let_finish(profile_task)



async def _confirm(app: "Application", community: Row, user_did: str, actor: Actor, event: str,
                   membership_uri: str | None, membership_cid: str | None,
                   profile_task: "asyncio.Future[Any] | None", *, extra: dict[str, Any] | None = None,
                   from_request: bool = False, finish_too: Sequence[Intent] = (),
                   admit_tx: Callable[[Transaction], Awaitable[ApiError | None]] | None = None,
                   audit_metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the membership proof, then make `user_did` a member (join or approve).
    `admit_tx`, run in the committing transaction, may refuse (a ban) or count something
    (an invite's use) with it."""
    did = community["did"]
    key = f"proof:{did}:{user_did}"
    async with app.writes.lock(key):
        return await _confirm_locked(app, community, user_did, actor, event, membership_uri,
                                     membership_cid, profile_task, key, extra=extra,
                                     from_request=from_request, finish_too=finish_too,
                                     admit_tx=admit_tx, audit_metadata=audit_metadata)


async def _confirm_locked(app: "Application", community: Row, user_did: str, actor: Actor, event: str,
                          membership_uri: str | None, membership_cid: str | None,
                          profile_task: "asyncio.Future[Any] | None", key: str, *,
                          extra: dict[str, Any] | None, from_request: bool,
                          finish_too: Sequence[Intent],
                          admit_tx: Callable[[Transaction], Awaitable[ApiError | None]] | None = None,
                          audit_metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    did = community["did"]
    collection = nsid(app, "membershipProof")
    pending = await app.writes.begin(kind=PROOF, key=key, community_did=did, operation=event,
                                     rkey=new_tid(app.clock), payload={"memberDid": user_did})
    rkey = pending.rkey
    confirmed_at = app.clock.iso_now()
    repo = await community_repo_for(app, did)
    written = await pds(repo.put_record(collection, rkey, membership_proof(
        user_did, confirmed_at, membership_uri, membership_cid)))
    profile = await profile_task if profile_task is not None else None
    refusal: ApiError | None = None
    keep_rkey: str | None = None  # the committed member's proof: never roll that one back
    async with app.db.transaction("communities.confirm") as tx:
        row = await communities_store.get_community(tx, did)
        status = await member_status(tx, did, user_did)
        if row is None or row["state"] != "active":
            refusal = NOT_FOUND(did)
        elif actor.app_id is not None and from_request and not await app_manages(tx, row, actor.app_id):
            refusal = ApiError(403, "app_not_trusted", "The app's management grant was revoked meanwhile.")
        elif status.is_member:
            # A concurrent request won. If it shared our intent, its proof is the one
            # we wrote (same key); otherwise ours is a second proof, rolled back below.
            refusal = ApiError(409, "already_member", "This user is already a member of the community.")
            member = await members_store.get_member(tx, did, user_did)
            keep_rkey = member["proof_rkey"] if member is not None else None
        elif from_request and not status.is_pending:
            # The request was withdrawn or rejected meanwhile: take the proof back.
            refusal = ApiError(404, "no_pending_request", "This user has no pending join request.")
        elif admit_tx is not None:
            refusal = await admit_tx(tx)
        if refusal is not None:
            await app.writes.finish_tx(tx, pending)
        else:
            if status.is_pending:
                await members_store.delete_request_tx(tx, did, user_did)
                await communities_store.adjust_counts_tx(tx, did, pending=-1)
            await members_store.insert_member_tx(
                tx, community_did=did, member_did=user_did, now=confirmed_at, proof_rkey=rkey,
                proof_cid=written.get("cid"), membership_uri=membership_uri,
                membership_cid=membership_cid, app_id=actor.app_id)
            await communities_store.adjust_counts_tx(tx, did, members=1)
            for intent in (pending, *finish_too):
                await app.writes.finish_tx(tx, intent)
            await store_profile_tx(app, tx, user_did, profile)
            data = {"memberDid": user_did, **(extra or {})}
            await emit_tx(app, tx, event, community_did=did, data=data, app_id=actor.app_id,
                          actor_did=actor.did)
            await audit_tx(app, tx, did, event, actor, user_did,
                           metadata={"proofUri": written.get("uri"), **(audit_metadata or {})})
    if refusal is not None:
        if rkey != keep_rkey:
            await roll_back(repo, [(collection, rkey)])
        raise refusal
    return {"status": "joined", "communityDid": did, "memberDid": user_did,
            "membership": {"communityDid": did, "memberDid": user_did, "confirmedAt": confirmed_at,
                           "proofUri": written.get("uri"), "proofCid": written.get("cid"),
                           "membershipUri": membership_uri, "membershipCid": membership_cid}}


async def approve(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    require_capability(await member_status(app.db, did, actor.did), "members.approve")
    target = await member_status(app.db, did, member_did)
    if target.is_member:
        raise ApiError(409, "already_member", "This user is already a member of the community.")
    if not target.is_pending:
        raise ApiError(404, "no_pending_request", "This user has no pending join request.")
    # Checked when they asked, but a request stored before DIDs were checked may name one
    # that is malformed or does not exist: nothing is written for it (cheap: cached).
    await require_person(app, member_did, "memberDid")
    req = await members_store.get_request(app.db, did, member_did)
    uri, cid = (req["membership_uri"], req["membership_cid"]) if req else (None, None)
    return await _confirm(app, community, member_did, actor, "member.approved", uri, cid, None,
                          extra={"approvedBy": actor.did}, from_request=True)


async def reject(app: "Application", community: Row, member_did: str, actor: Actor,
                 reason: str | None) -> dict[str, Any]:
    did = community["did"]
    async with app.db.transaction("communities.reject") as tx:
        await require_manager(tx, await active_tx(tx, did), actor.app_id)
        require_capability(await member_status(tx, did, actor.did), "members.approve")
        if not await members_store.delete_request_tx(tx, did, member_did):
            if (await member_status(tx, did, member_did)).is_member:
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
                after_commit: Callable[[Row], Awaitable[None]] | None = None, *,
                reason: str | None = None) -> dict[str, Any]:
    """Leave (a member) or withdraw a join request (pending). The primary admin must
    transfer first (409); an admin who leaves stops being an admin. `after_commit` (browser:
    delete the user's own membership record) runs after the local commit, best effort: a
    failing user PDS never stops anyone leaving. A `reason` (the network sync:
    ``account_deleted``) goes into the event's data and the audit entry."""
    did = community["did"]
    status = await member_status(app.db, did, user_did)
    if status.is_pending and not status.is_member:
        async with app.db.transaction("communities.withdraw") as tx:
            await active_tx(tx, did)
            request = await members_store.get_request(tx, did, user_did)
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
    return await _remove(app, community, user_did, actor, "member.left", reason,
                         {"reason": reason} if reason else {}, after_commit)


async def remove(app: "Application", community: Row, member_did: str, actor: Actor,
                 reason: str | None) -> dict[str, Any]:
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    me = await member_status(app.db, did, actor.did)
    require_capability(me, "members.remove")
    target = await member_status(app.db, did, member_did)
    if target.is_admin and not me.is_admin:
        raise ApiError(403, "not_admin", "Only an admin may remove an admin.")
    if not target.is_member:
        raise ApiError(404, "not_member", "This user is not a member of the community.")
    if target.is_primary:
        raise ApiError(409, "cannot_remove_primary_admin", "The primary admin cannot be removed.")
    return await _remove(app, community, member_did, actor, "member.removed", reason,
                         {"removedBy": actor.did, "reason": reason}, admins_too=me.is_admin)


async def _remove(app: "Application", community: Row, member_did: str, actor: Actor, event: str,
                  reason: str | None, extra: dict[str, Any],
                  after_commit: Callable[[Row], Awaitable[None]] | None = None,
                  admins_too: bool = True) -> dict[str, Any]:
    did = community["did"]
    async with community_lock(app, did):
        member = await members_store.get_member(app.db, did, member_did)
        if member is None:
            raise ApiError(404, "not_member", "This user is not a member of the community.")
        if member["admin_rank"] is not None and not admins_too:  # promoted meanwhile
            raise ApiError(403, "not_admin", "Only an admin may remove an admin.")
        if member["admin_rank"] == 0:
            raise ApiError(409, "primary_admin_must_transfer",
                           "The primary admin cannot leave or be removed; transfer the role first.")
        was_admin = member["admin_rank"] is not None
        held_roles = bool(member["roles"])
        admins = [a for a in await admins_list(app.db, did) if a[0] != member_did]
        intent = await app.writes.begin(
            kind=REMOVE, key=f"remove:{did}:{member_did}", community_did=did, operation=event,
            rkey=member["proof_rkey"], payload={"memberDid": member_did, "wasAdmin": was_admin,
                                                "heldRoles": held_roles})
        repo = await community_repo_for(app, did)
        if was_admin:
            await pds(repo.put_record(nsid(app, "admins"), "self", admins_record(admins, app.clock.iso_now())))
        if held_roles:
            await roles.drop_holder(app, repo, did, member_did)
        await pds(repo.delete_record(nsid(app, "membershipProof"), member["proof_rkey"]))
        gone = False
        async with app.db.transaction("communities.remove") as tx:
            await active_tx(tx, did)
            await app.writes.finish_tx(tx, intent)
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




# ------------------------------------------------------------------ the browser: the user's own record


def _rkey_of(uri: str | None) -> str | None:
    return uri.rsplit("/", 1)[-1] if uri and uri.count("/") >= 4 else None


async def browser_join(app: "Application", community: Row, principal: Any, *,
                       invite: Row | None = None) -> tuple[int, dict[str, Any]]:
    """Join as the signed-in user (with a usable `invite`, from `invites.usable`: a member
    at once, one use counted, as the API's join with ``inviteCode``): after the checks, put the user's own ``membership``
    record (its key chosen once and kept in an intent, so a retry rewrites the same
    record), then the community's side; the intent is finished in the join's transaction.
    A crash in between is settled by the reconciler (reconcile.py: the record is deleted
    again unless the index refers to it)."""
    did, user = community["did"], principal.did
    key = f"membership:{did}:{user}"
    own: list[Intent] = []

    async def write_own_record() -> tuple[str | None, str | None]:
        intent = await app.writes.begin(
            kind=MEMBERSHIP, key=key, community_did=did, operation="membership.put",
            rkey=new_tid(app.clock), payload={"userDid": user, "sessionId": principal.session_id})
        repo = await app.writes.user_repo(principal)
        out = await pds(repo.put_record(nsid(app, "membership"), intent.rkey,
                                        membership_record(did, app.clock.iso_now())))
        own.append(intent)
        return out.get("uri"), out.get("cid")

    async with app.writes.lock(key):
        return await join(app, community, user, Actor(user, None, proven=True), before_commit=write_own_record,
                          finish_too=own, invite=invite)


async def browser_leave(app: "Application", community: Row, principal: Any) -> dict[str, Any]:
    """Leave (or withdraw a request) as the signed-in user: the community's side, then,
    after the local commit, delete the user's own membership record. That deletion is an
    intent begun before the leave: a failing user PDS (logged; it never stops anyone
    leaving) or a crash leaves it to the reconciler, which deletes the record later."""
    did, user = community["did"], principal.did
    key = f"membership:{did}:{user}"
    collection = nsid(app, "membership")
    async with app.writes.lock(key):
        row = await members_store.get_member(app.db, did, user) or \
            await members_store.get_request(app.db, did, user)
        rkey = _rkey_of(row["membership_uri"]) if row is not None else None
        intent = None
        if rkey and await app.writes.get(key) is None:  # else an earlier one is still to settle
            intent = await app.writes.begin(
                kind=MEMBERSHIP, key=key, community_did=did, operation="membership.delete", rkey=rkey,
                payload={"userDid": user, "sessionId": principal.session_id})

        async def delete_own_record(member_or_request: Row) -> None:
            rkey = _rkey_of(member_or_request["membership_uri"])
            if rkey:
                repo = await app.writes.user_repo(principal)
                await asyncio.wait_for(repo.delete_record(collection, rkey),
                                       app.config.atproto.request_timeout_seconds * 2)
            if intent is not None:
                await app.writes.drop(intent)

        try:
            return await leave(app, community, user, Actor(user, None, proven=True), after_commit=delete_own_record)
        except BaseException:
            if intent is not None:
                await app.writes.drop(intent)  # refused: nothing was deleted anywhere
            raise
