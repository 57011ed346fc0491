"""Membership commands: join (or ask to join), approve, reject, leave (or withdraw),
remove; and the browser's join and leave, which also write the user's own membership
record. Each is one command (check → intent → PDS → one transaction, see steps.py):
:class:`Join` and :class:`RemoveMember`; the ban (bans.py) shares :class:`Removal`."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError, Row, Transaction, emit_tx
from daemon.plugin.atproto import Command, Intent, Plan, Run, new_tid
from daemon.plugin.http import NOT_FOUND
from plugins.communities import invites, roles
from plugins.communities.steps import (MEMBERSHIP, PROOF, REMOVE, Actor, CommunityCommand, active_tx, admins_list,
                                       admins_record, app_manages, audit_tx, banned_tx, community_repo_for,
                                       fetch_profile, let_finish, member_status, membership_proof, membership_record,
                                       nsid, refuse_banned, require_manager, require_person, store_profile_tx)
from plugins.communities.capabilities import require_capability
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities")


# ------------------------------------------------------------------ joining


async def join(app: "Application", community: Row, user_did: str, actor: Actor, *,
               membership_uri: str | None = None, membership_cid: str | None = None,
               invite: Row | None = None, principal: Any = None) -> tuple[int, dict[str, Any]]:
    """Join (open, or with a usable `invite`: member, 201) or ask to join (otherwise:
    pending, 202). 409 if already a member or pending (pending with an invite: admitted).
    403 ``banned`` while a ban is in force (bans.py). With the signed-in user's `principal`
    (the browser) the user's own membership record is written too (:class:`Join`)."""
    did = community["did"]
    # an instance-wide policy (cr_check_action): a ban on the instance, a suspension
    joining = community["type"] == "open" or invite is not None
    await app.check_action("community.join" if joining else "community.request", user_did,
                           community_did=did, app_id=actor.app_id)
    await refuse_banned(app, did, user_did)
    status = await member_status(app.db, did, user_did)
    if status.is_member:
        raise ApiError(409, "already_member", "This user is already a member of the community.")
    if status.is_pending and invite is None:
        raise ApiError(409, "already_pending", "This user has already asked to join; an admin must approve.")
    await require_person(app, user_did, "userDid")
    profile_task = asyncio.ensure_future(fetch_profile(app, user_did))
    try:
        if community["type"] == "open" or invite is not None:
            via = {"via": "invite", "inviteId": f"{invites.ID_PREFIX}{invite['id']}"} if invite is not None else None
            return 201, await app.writes.run(Join(
                app, did, user_did, actor, "member.joined", membership_uri=membership_uri,
                membership_cid=membership_cid, profile_task=profile_task, extra=via, invite=invite,
                principal=principal))
        # a request writes to no repo but the browser user's own: their profile is fetched first
        profile = await profile_task if principal is None else None
        return 202, await app.writes.run(Join(
            app, did, user_did, actor, "member.requested", membership_uri=membership_uri,
            membership_cid=membership_cid, profile_task=profile_task if principal is not None else None,
            profile=profile, principal=principal, confirm=False))
    finally:
        let_finish(profile_task)


class Join(CommunityCommand):
    """Make `user_did` a member (join, approve): write the membership proof, then the
    index; or (`confirm` False) record a request to join. With the signed-in user's
    `principal` (the browser), the user's own membership record is written first, under
    its own intent (its key chosen once, so a retry rewrites the same record), finished
    in the join's transaction; a crash in between is settled by the reconciler (the
    record is deleted again unless the index refers to it)."""

    def __init__(self, app: "Application", did: str, user_did: str, actor: Actor, event: str, *,
                 membership_uri: str | None = None, membership_cid: str | None = None,
                 profile_task: "asyncio.Future[Any] | None" = None, extra: dict[str, Any] | None = None,
                 from_request: bool = False, invite: Row | None = None, principal: Any = None,
                 confirm: bool = True, profile: Any = None) -> None:
        super().__init__(app, did, actor)
        self.user_did, self.event, self.extra, self.from_request = user_did, event, extra, from_request
        self.membership_uri, self.membership_cid = membership_uri, membership_cid
        self.profile_task, self.invite, self.principal, self.confirm = profile_task, invite, principal, confirm
        self.name = "communities.confirm" if confirm else "communities.join_request"
        self.profile: Any = profile
        self.written: dict[str, Any] = {}
        self.own: Intent | None = None

    def locks(self) -> list[str]:
        own = [f"membership:{self.did}:{self.user_did}"] if self.principal is not None else []
        return [*own, f"proof:{self.did}:{self.user_did}"] if self.confirm else own

    async def check(self, tx: Transaction) -> Plan | None:
        app, did, user = self.app, self.did, self.user_did
        self.proof_plan = Plan(key=f"proof:{did}:{user}", operation=self.event, rkey=new_tid(app.clock),
                               community_did=did, payload={"memberDid": user}, kind=PROOF)
        if self.principal is not None:
            return Plan(key=f"membership:{did}:{user}", operation="membership.put", rkey=new_tid(app.clock),
                        community_did=did, payload={"userDid": user, "sessionId": self.principal.session_id},
                        kind=MEMBERSHIP)
        return self.proof_plan if self.confirm else None

    async def repo(self) -> Any:
        return await community_repo_for(self.app, self.did) if self.confirm else None

    async def write(self, run: Run) -> None:
        app = self.app
        assert run.intent is not None
        if self.principal is not None:
            self.own = run.intent
            user_repo = await app.writes.user_repo(self.principal)
            out = await user_repo.put_record(nsid(app, "membership"), run.intent.rkey,
                                             membership_record(self.did, app.clock.iso_now()))
            self.membership_uri, self.membership_cid = out.get("uri"), out.get("cid")
        if self.confirm:
            self.proof = run.intent if self.own is None else await run.begin(self.proof_plan)
            self.confirmed_at = app.clock.iso_now()
            self.written = await run.put(nsid(app, "membershipProof"), self.proof.rkey, membership_proof(
                self.user_did, self.confirmed_at, self.membership_uri, self.membership_cid))
        if self.profile_task is not None:
            self.profile = await self.profile_task

    async def commit(self, tx: Transaction, run: Run) -> dict[str, Any]:
        if not self.confirm:
            return await self._request(tx)
        app, did, user_did, actor, event = self.app, self.did, self.user_did, self.actor, self.event
        rkey = self.proof.rkey
        refusal: ApiError | None = None
        keep_rkey: str | None = None  # the committed member's proof: never roll that one back
        row = await store.get_community(tx, did)
        status = await member_status(tx, did, user_did)
        if row is None or row["state"] != "active":
            refusal = NOT_FOUND(did)
        elif actor.app_id is not None and self.from_request and not await app_manages(tx, row, actor.app_id):
            refusal = ApiError(403, "app_not_trusted", "The app's management grant was revoked meanwhile.")
        elif status.is_member:
            # A concurrent request won. If it shared our intent, its proof is the one
            # we wrote (same key); otherwise ours is a second proof, rolled back below.
            refusal = ApiError(409, "already_member", "This user is already a member of the community.")
            member = await store.get_member(tx, did, user_did)
            keep_rkey = member["proof_rkey"] if member is not None else None
        elif self.from_request and not status.is_pending:
            # The request was withdrawn or rejected meanwhile: take the proof back.
            refusal = ApiError(404, "no_pending_request", "This user has no pending join request.")
        elif not self.from_request:  # a ban committed after the first check still holds; an invite counts a use
            refusal = await banned_tx(app, tx, did, user_did) or \
                (await invites.claim_tx(app, tx, self.invite) if self.invite is not None else None)
        if refusal is not None:
            collection = nsid(app, "membershipProof")
            run.refuse(refusal, undo=[(collection, rkey)] if rkey != keep_rkey else [],
                       keep=[self.own] if self.own is not None else [])
            return {}
        if status.is_pending:
            await store.delete_request_tx(tx, did, user_did)
            await store.adjust_counts_tx(tx, did, pending=-1)
        await store.insert_member_tx(
            tx, community_did=did, member_did=user_did, now=self.confirmed_at, proof_rkey=rkey,
            proof_cid=self.written.get("cid"), membership_uri=self.membership_uri,
            membership_cid=self.membership_cid, app_id=actor.app_id)
        await store.adjust_counts_tx(tx, did, members=1)
        await store_profile_tx(app, tx, user_did, self.profile)
        data = {"memberDid": user_did, **(self.extra or {})}
        await emit_tx(app, tx, event, community_did=did, data=data, app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, event, actor, user_did,
                       metadata={"proofUri": self.written.get("uri"),
                                 **(self.extra if self.invite is not None and self.extra else {})})
        return {"status": "joined", "communityDid": did, "memberDid": user_did,
                "membership": {"communityDid": did, "memberDid": user_did, "confirmedAt": self.confirmed_at,
                               "proofUri": self.written.get("uri"), "proofCid": self.written.get("cid"),
                               "membershipUri": self.membership_uri, "membershipCid": self.membership_cid}}

    async def _request(self, tx: Transaction) -> dict[str, Any]:
        """The request to join (a community that approves its members)."""
        app, did, user_did, actor = self.app, self.did, self.user_did, self.actor
        now = app.clock.iso_now()
        await active_tx(tx, did)
        status = await member_status(tx, did, user_did)
        if status.is_member or status.is_pending:
            raise ApiError(409, "already_member" if status.is_member else "already_pending",
                           "This user is already a member or has already asked to join.")
        banned = await banned_tx(app, tx, did, user_did)
        if banned is not None:
            raise banned
        await store.insert_request_tx(tx, community_did=did, member_did=user_did, now=now,
                                              membership_uri=self.membership_uri,
                                              membership_cid=self.membership_cid, app_id=actor.app_id)
        await store.adjust_counts_tx(tx, did, pending=1)
        await store_profile_tx(app, tx, user_did, self.profile)
        await audit_tx(app, tx, did, "member.requested", actor, user_did)
        return {"status": "pending", "communityDid": did, "memberDid": user_did, "requestedAt": now}


async def _confirm(app: "Application", community: Row, user_did: str, actor: Actor, event: str,
                   membership_uri: str | None, membership_cid: str | None,
                   profile_task: "asyncio.Future[Any] | None", *, extra: dict[str, Any] | None = None,
                   from_request: bool = False) -> dict[str, Any]:
    """Run the confirming :class:`Join` (approve; a join whose first checks passed)."""
    return await app.writes.run(Join(app, community["did"], user_did, actor, event, membership_uri=membership_uri,
                                     membership_cid=membership_cid, profile_task=profile_task, extra=extra,
                                     from_request=from_request))


async def approve(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    require_capability(await member_status(app.db, did, actor.did), "members.approve")
    await app.check_action("community.moderate", actor.did, community_did=did, app_id=actor.app_id)
    target = await member_status(app.db, did, member_did)
    if target.is_member:
        raise ApiError(409, "already_member", "This user is already a member of the community.")
    if not target.is_pending:
        raise ApiError(404, "no_pending_request", "This user has no pending join request.")
    await app.check_action("member.add", member_did, community_did=did, app_id=actor.app_id)
    # Checked when they asked, but a request stored before DIDs were checked may name one
    # that is malformed or does not exist: nothing is written for it (cheap: cached).
    await require_person(app, member_did, "memberDid")
    req = await store.get_request(app.db, did, member_did)
    uri, cid = (req["membership_uri"], req["membership_cid"]) if req else (None, None)
    return await _confirm(app, community, member_did, actor, "member.approved", uri, cid, None,
                          extra={"approvedBy": actor.did}, from_request=True)


async def reject(app: "Application", community: Row, member_did: str, actor: Actor,
                 reason: str | None) -> dict[str, Any]:
    did = community["did"]
    await app.check_action("community.moderate", actor.did, community_did=did, app_id=actor.app_id)
    async with app.db.transaction("communities.reject") as tx:
        await require_manager(tx, await active_tx(tx, did), actor.app_id)
        require_capability(await member_status(tx, did, actor.did), "members.approve")
        if not await store.delete_request_tx(tx, did, member_did):
            if (await member_status(tx, did, member_did)).is_member:
                raise ApiError(409, "already_member", "This user is already a member of the community; "
                               "remove them instead.")
            raise ApiError(404, "no_pending_request", "This user has no pending join request.")
        await store.adjust_counts_tx(tx, did, pending=-1)
        await emit_tx(app, tx, "member.rejected", community_did=did,
                      data={"memberDid": member_did, "rejectedBy": actor.did, "reason": reason},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, "member.rejected", actor, member_did, reason)
    return {"status": "rejected", "communityDid": did, "memberDid": member_did}


# ------------------------------------------------------------------ leaving and removal


async def leave(app: "Application", community: Row, user_did: str, actor: Actor, *,
                reason: str | None = None, principal: Any = None) -> dict[str, Any]:
    """Leave (a member) or withdraw a join request (pending). The primary admin must
    transfer first (409); an admin who leaves stops being an admin. A `reason` (the network
    sync: ``account_deleted``) goes into the event's data and the audit entry. With the
    signed-in user's `principal` (the browser), the deletion of their own membership record
    is recorded as an intent in the same transaction (:class:`DeleteOwnRecord` runs it)."""
    did = community["did"]
    status = await member_status(app.db, did, user_did)
    if status.is_pending and not status.is_member:
        async with app.db.transaction("communities.withdraw") as tx:
            await active_tx(tx, did)
            request = await store.get_request(tx, did, user_did)
            if not await store.delete_request_tx(tx, did, user_did):
                raise ApiError(404, "not_member", "This user is not a member of the community.")
            await store.adjust_counts_tx(tx, did, pending=-1)
            await audit_tx(app, tx, did, "member.request_withdrawn", actor, user_did)
            await own_record_gone_tx(app, tx, did, request, principal)
        return {"status": "withdrawn", "communityDid": did, "memberDid": user_did}
    if not status.is_member:
        raise ApiError(404, "not_member", "This user is not a member of the community.")
    if status.is_primary:
        raise ApiError(409, "primary_admin_must_transfer",
                       "The primary admin cannot leave: transfer the primary admin role to another "
                       "member first (admins/transfer).")
    return await _remove(app, community, user_did, actor, "member.left", reason,
                         {"reason": reason} if reason else {}, principal=principal)


async def remove(app: "Application", community: Row, member_did: str, actor: Actor,
                 reason: str | None) -> dict[str, Any]:
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    me = await member_status(app.db, did, actor.did)
    require_capability(me, "members.remove")
    await app.check_action("community.moderate", actor.did, community_did=did, app_id=actor.app_id)
    target = await member_status(app.db, did, member_did)
    if target.is_admin and not me.is_admin:
        raise ApiError(403, "not_admin", "Only an admin may remove an admin.")
    if not target.is_member:
        raise ApiError(404, "not_member", "This user is not a member of the community.")
    if target.is_primary:
        raise ApiError(409, "cannot_remove_primary_admin", "The primary admin cannot be removed.")
    return await _remove(app, community, member_did, actor, "member.removed", reason,
                         {"removedBy": actor.did, "reason": reason}, admins_too=me.is_admin)


class Removal(CommunityCommand):
    """What every end of a membership writes (leave, removal, ban): the admins record
    without them if they were an admin, the roles record without them if they held a role,
    then their proof deleted; under the community's lock and the intent ``remove:...``
    (reconcile.py settles a crash by putting the records back from the index)."""

    kind = REMOVE

    def plan(self, member: Row, operation: str, admins: list[tuple[str, str]]) -> Plan:
        self.member, self.admins = member, admins
        self.was_admin = member["admin_rank"] is not None
        self.held_roles = bool(member["roles"])
        return Plan(key=f"remove:{self.did}:{member['member_did']}", operation=operation, community_did=self.did,
                    rkey=member["proof_rkey"], payload={"memberDid": member["member_did"], "wasAdmin": self.was_admin,
                                                        "heldRoles": self.held_roles})

    async def write(self, run: Run) -> None:
        app, did, member_did = self.app, self.did, self.member["member_did"]
        if self.was_admin:
            await run.put(nsid(app, "admins"), "self", admins_record(self.admins, app.clock.iso_now()))
        if self.held_roles:
            await roles.drop_holder(app, run.repo, did, member_did)
        await run.delete(nsid(app, "membershipProof"), self.member["proof_rkey"])


class RemoveMember(Removal):
    """Leave or removal of a member: the proof deleted, then the index, event and audit."""

    def __init__(self, app: "Application", did: str, member_did: str, actor: Actor, event: str,
                 reason: str | None, extra: dict[str, Any], admins_too: bool, principal: Any = None) -> None:
        super().__init__(app, did, actor)
        self.member_did, self.event, self.reason, self.extra = member_did, event, reason, extra
        self.admins_too, self.principal, self.name = admins_too, principal, "communities.remove"

    async def check(self, tx: Transaction) -> Plan:
        did, member_did = self.did, self.member_did
        member = await store.get_member(tx, did, member_did)
        if member is None:
            raise ApiError(404, "not_member", "This user is not a member of the community.")
        if member["admin_rank"] is not None and not self.admins_too:  # promoted meanwhile
            raise ApiError(403, "not_admin", "Only an admin may remove an admin.")
        if member["admin_rank"] == 0:
            raise ApiError(409, "primary_admin_must_transfer",
                           "The primary admin cannot leave or be removed; transfer the role first.")
        admins = [a for a in await admins_list(tx, did) if a[0] != member_did]
        return self.plan(member, self.event, admins)

    async def commit(self, tx: Transaction, run: Run) -> Row:
        app, did, member_did, actor, event = self.app, self.did, self.member_did, self.actor, self.event
        await active_tx(tx, did)
        if not await store.delete_member_tx(tx, did, member_did):
            # a concurrent request removed them first
            run.refuse(ApiError(404, "not_member", "This user is not a member of the community."))
            return self.member
        if self.was_admin:
            await store.set_admins_tx(tx, did, self.admins)
        await store.adjust_counts_tx(tx, did, members=-1)
        await emit_tx(app, tx, event, community_did=did, data={"memberDid": member_did, **self.extra},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, event, actor, member_did, self.reason, metadata={"wasAdmin": self.was_admin})
        await own_record_gone_tx(app, tx, did, self.member, self.principal)
        return self.member


async def end_for_instance(app: "Application", community: Row, member_did: str, by_did: str,
                           reason: str | None) -> dict[str, Any]:
    """End a membership on the instance's behalf (an operator's instance-wide ban): no
    capability in the community is asked; the same command, ``member.removed`` event and
    audit entry as an admin's removal (an admin too; the primary admin never: 409). A
    pending join request is declined instead, as an admin's decline (``member.rejected``)."""
    actor = Actor(by_did, None, proven=True)
    did = community["did"]
    if (await member_status(app.db, did, member_did)).is_pending:
        async with app.db.transaction("communities.reject") as tx:
            await active_tx(tx, did)
            if await store.delete_request_tx(tx, did, member_did):
                await store.adjust_counts_tx(tx, did, pending=-1)
                await emit_tx(app, tx, "member.rejected", community_did=did,
                              data={"memberDid": member_did, "rejectedBy": by_did, "reason": reason,
                                    "byInstance": True}, app_id=None, actor_did=by_did)
                await audit_tx(app, tx, did, "member.rejected", actor, member_did, reason)
                return {"status": "rejected", "communityDid": did, "memberDid": member_did}
        # approved or withdrawn meanwhile: a member now is removed below, else 404
    return await _remove(app, community, member_did, actor, "member.removed", reason,
                         {"removedBy": by_did, "reason": reason, "byInstance": True})


async def _remove(app: "Application", community: Row, member_did: str, actor: Actor, event: str,
                  reason: str | None, extra: dict[str, Any], admins_too: bool = True,
                  principal: Any = None) -> dict[str, Any]:
    did = community["did"]
    await app.writes.run(RemoveMember(app, did, member_did, actor, event, reason, extra, admins_too, principal))
    return {"status": "left" if event == "member.left" else "removed", "communityDid": did,
            "memberDid": member_did}


# ------------------------------------------------------------------ the browser: the user's own record


def _rkey_of(uri: str | None) -> str | None:
    return uri.rsplit("/", 1)[-1] if uri and uri.count("/") >= 4 else None


async def browser_join(app: "Application", community: Row, principal: Any, *,
                       invite: Row | None = None) -> tuple[int, dict[str, Any]]:
    """Join as the signed-in user (with a usable `invite`, from `invites.usable`: a member
    at once, one use counted, as the API's join with ``inviteCode``), writing the user's
    own ``membership`` record too (:class:`Join` with the `principal`)."""
    user = principal.did
    return await join(app, community, user, Actor(user, None, proven=True), invite=invite, principal=principal)


async def own_record_gone_tx(app: "Application", tx: Transaction, did: str, row: Row | None,
                             principal: Any) -> None:
    """In a browser leave's transaction: record the deletion of the user's own membership
    record (the one `row`, their member row or request, refers to) as an intent, unless an
    earlier intent on it is still to settle (the reconciler deletes the record then)."""
    rkey = _rkey_of(row["membership_uri"]) if principal is not None and row is not None else None
    key = f"membership:{did}:{principal.did}" if principal is not None else ""
    if rkey and await app.writes.get(key, tx) is None:
        await app.writes.begin_tx(tx, kind=MEMBERSHIP, key=key, community_did=did, operation="membership.delete",
                                  rkey=rkey, payload={"userDid": principal.did, "sessionId": principal.session_id})


class DeleteOwnRecord(Command):
    """After a browser leave: delete the user's own membership record, as the intent its
    transaction recorded says. A failing user PDS keeps the intent (the reconciler deletes
    the record later)."""

    kind, name = MEMBERSHIP, "communities.own_record"

    def __init__(self, app: "Application", did: str, principal: Any) -> None:
        self.app, self.did, self.principal = app, did, principal
        self.key = f"membership:{did}:{principal.did}"

    def locks(self) -> list[str]:
        return [self.key]

    async def check(self, tx: Transaction) -> Plan | None:
        pending = await self.app.writes.get(self.key, tx)
        if pending is None or pending.operation != "membership.delete":
            return None  # nothing recorded, or an earlier write still to settle
        return Plan(key=self.key, operation=pending.operation, rkey=pending.rkey, community_did=self.did,
                    payload=pending.payload)

    async def repo(self) -> Any:
        return await self.app.writes.user_repo(self.principal)

    async def write(self, run: Run) -> None:
        assert run.intent is not None and run.intent.rkey
        await asyncio.wait_for(run.delete(nsid(self.app, "membership"), run.intent.rkey),
                               self.app.config.atproto.request_timeout_seconds * 2)


async def browser_leave(app: "Application", community: Row, principal: Any) -> dict[str, Any]:
    """Leave (or withdraw a request) as the signed-in user: the community's side, recording
    the deletion of the user's own membership record in its transaction, then that
    deletion (:class:`DeleteOwnRecord`). A failing user PDS (logged; it never stops anyone
    leaving) or a crash leaves it to the reconciler, which deletes the record later."""
    did, user = community["did"], principal.did
    async with app.writes.lock(f"membership:{did}:{user}"):
        result = await leave(app, community, user, Actor(user, None, proven=True), principal=principal)
        try:
            await app.writes.run(DeleteOwnRecord(app, did, principal))
        except Exception as exc:  # noqa: BLE001
            # Never raise: the community side has changed and the caller must hear so. The
            # stray record is harmless (the community's proof is gone).
            log.warning("left %s, but could not delete the membership record of %s in their repo: %r",
                        did, user, exc)
        return result
