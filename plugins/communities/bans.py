"""Bans: ban (ends the membership or the pending request, and blocks joining, asking to
join and invites until the ban expires or is lifted), unban, the list, and the check
every admission makes (docs/communities.md, "Bans").

Bans live only in this service's index, not in the community's repo: the issue asks for
ban lists private to admins and moderators, and a repo is public to anyone who reads it
(see docs/communities.md for the reasoning). The membership proof a ban takes away is
deleted from the repo through the one write path, like a removal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError, Row, Transaction, emit_tx
from daemon.plugin.atproto import Plan, Run
from plugins.communities.membership import Removal
from plugins.communities.steps import (Actor, active_tx, admins_list, audit_tx, member_status, require_manager,
                                       require_person)
from plugins.communities.capabilities import require_capability
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, MemberStatus


def _may_ban(me: "MemberStatus", target: "MemberStatus") -> None:
    require_capability(me, "members.ban")
    if target.is_primary:
        raise ApiError(409, "cannot_ban_primary_admin", "The primary admin cannot be banned.")
    if target.is_admin and not me.is_primary:
        raise ApiError(403, "not_primary_admin", "Only the primary admin may ban an admin.")


async def ban(app: "Application", community: Row, target_did: str, actor: Actor, *, reason: str | None,
              expires_at: str | None) -> dict[str, Any]:
    """Ban `target_did`: a member is removed (their proof deleted from the community's repo,
    and the admins record rewritten if they were an admin), a pending request is dropped,
    and the ban is recorded, all in one transaction with the event and the audit entry.

    Holds the community's lock (like every removal) and then the user's join lock
    (``proof:<community>:<user>``, in that order, as the reconciler takes them), so no join
    of that user is halfway while the ban decides whether there is a membership to end."""
    did = community["did"]
    now = app.clock.iso_now()
    if expires_at is not None and expires_at <= now:
        raise ApiError(400, "invalid_request", "expiresAt: must be in the future",
                       details=[{"field": "expiresAt", "message": "must be in the future"}])
    await require_manager(app.db, community, actor.app_id)
    target = await member_status(app.db, did, target_did)
    _may_ban(await member_status(app.db, did, actor.did), target)
    await app.check_action("community.moderate", actor.did, community_did=did, app_id=actor.app_id)
    if not (target.is_member or target.is_pending):
        await require_person(app, target_did, "memberDid")  # a ban in advance names a real person
    return await app.writes.run(Ban(app, did, actor, target_did, reason=reason, expires_at=expires_at))


class Ban(Removal):
    """The ban, as one command: a member's removal (:class:`Removal`'s writes) when they
    are one, and in one transaction the index, the ban, the event and the audit entry.
    Holds the community's lock and then the user's join lock, in the reconciler's order."""

    name = "communities.ban"

    def __init__(self, app: "Application", did: str, actor: Actor, target_did: str, *, reason: str | None,
                 expires_at: str | None) -> None:
        super().__init__(app, did, actor)
        self.target_did, self.reason, self.expires_at = target_did, reason, expires_at
        self.member: Row | None = None
        self.was_admin = False

    def locks(self) -> list[str]:
        return [*super().locks(), f"proof:{self.did}:{self.target_did}"]

    async def check(self, tx: Transaction) -> Plan | None:
        app, did, target_did = self.app, self.did, self.target_did
        _may_ban(await member_status(tx, did, self.actor.did), await member_status(tx, did, target_did))
        if await store.active_ban(tx, did, target_did, app.clock.iso_now()) is not None:
            raise ApiError(409, "already_banned", "This user is already banned; unban first to change the ban.")
        member = await store.get_member(tx, did, target_did)
        if member is None:
            return None
        admins = [a for a in await admins_list(tx, did) if a[0] != target_did]
        return self.plan(member, "member.banned", admins)

    async def commit(self, tx: Transaction, run: Run) -> dict[str, Any]:
        app, did, target_did, actor, reason, expires_at = \
            self.app, self.did, self.target_did, self.actor, self.reason, self.expires_at
        await require_manager(tx, await active_tx(tx, did), actor.app_id)
        removed = self.member is not None and await store.delete_member_tx(tx, did, target_did)
        if removed:
            if self.was_admin:
                await store.set_admins_tx(tx, did, self.admins)
            await store.adjust_counts_tx(tx, did, members=-1)
        dropped = await store.delete_request_tx(tx, did, target_did)
        if dropped:
            await store.adjust_counts_tx(tx, did, pending=-1)
        now = app.clock.iso_now()
        await store.put_ban_tx(tx, community_did=did, member_did=target_did, reason=reason,
                                    expires_at=expires_at, banned_by=actor.did, app_id=actor.app_id, now=now)
        data = {"memberDid": target_did, "bannedBy": actor.did, "reason": reason, "expiresAt": expires_at,
                "wasMember": removed, "wasPending": dropped}
        await emit_tx(app, tx, "member.banned", community_did=did, data=data, app_id=actor.app_id,
                      actor_did=actor.did)
        await audit_tx(app, tx, did, "member.banned", actor, target_did, reason,
                       metadata={"expiresAt": expires_at, "wasMember": removed, "wasPending": dropped,
                                 "wasAdmin": bool(removed and self.was_admin)})
        return {"status": "banned", "communityDid": did, "memberDid": target_did, "reason": reason,
                "expiresAt": expires_at, "bannedBy": actor.did, "createdAt": now,
                "wasMember": removed, "wasPending": dropped}


async def unban(app: "Application", community: Row, target_did: str, actor: Actor) -> dict[str, Any]:
    """Lift a ban in force (404 ``not_banned`` otherwise)."""
    did = community["did"]
    await app.check_action("community.moderate", actor.did, community_did=did, app_id=actor.app_id)
    async with app.db.transaction("communities.unban") as tx:
        await require_manager(tx, await active_tx(tx, did), actor.app_id)
        require_capability(await member_status(tx, did, actor.did), "members.ban")
        lifted = await store.lift_tx(tx, did, target_did, app.clock.iso_now())
        if lifted is None:
            raise ApiError(404, "not_banned", "This user is not banned from the community.")
        await emit_tx(app, tx, "member.unbanned", community_did=did,
                      data={"memberDid": target_did, "unbannedBy": actor.did},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, "member.unbanned", actor, target_did,
                       metadata={"bannedBy": lifted["banned_by"], "expiresAt": lifted["expires_at"]})
    return {"status": "unbanned", "communityDid": did, "memberDid": target_did}


def ban_json(row: Row) -> dict[str, Any]:
    return {"memberDid": row["member_did"], "handle": row["handle"], "displayName": row["display_name"],
            "reason": row["reason"], "expiresAt": row["expires_at"], "bannedBy": row["banned_by"],
            "appId": row["app_id"], "createdAt": row["created_at"]}
