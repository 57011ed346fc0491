"""Admin commands: promote, demote, transfer (each rewrites the community's ``admins``
record under the community's lock), and the app grants admins decide. Each reads check →
intent → PDS → one transaction (see steps.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from daemon.plugin import MemberStatus
from plugins.communities.access import member_status, require_manager
from daemon.plugin import ApiError, Row, pds
from plugins.communities.steps import (ADMINS, Actor, active_tx, admins_list, admins_record, audit_tx,
                                       community_lock, community_repo_for, nsid, require_person,
                                       require_role)
from plugins.communities import store as communities_store
from plugins.communities import store as members_store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application


# ------------------------------------------------------------------ admins


async def _write_admins(app: "Application", community: Row, actor: Actor, action: str,
                        target_did: str, compute: Callable[[list[tuple[str, str]], MemberStatus, MemberStatus],
                                                           list[tuple[str, str]]],
                        target_field: str | None = None) -> dict[str, Any]:
    """Rewrite the admins list as `compute` says. With `target_field` (promote, transfer:
    the target gains a role) the target must be a real person: checked after the cheap
    refusals and before the lock, so a slow directory never holds up the community."""
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    if target_field is not None:
        compute(await admins_list(app.db, did), await member_status(app.db, did, actor.did),
                await member_status(app.db, did, target_did))
        await require_person(app, target_did, target_field)
    async with community_lock(app, did):
        actor_status = await member_status(app.db, did, actor.did)
        target = await member_status(app.db, did, target_did)
        current = await admins_list(app.db, did)
        new = compute(current, actor_status, target)
        now = app.clock.iso_now()
        intent = await app.writes.begin(kind=ADMINS, key=f"admins:{did}", community_did=did, operation=action,
                                        rkey="self", payload={"admins": [a for a, _ in new]})
        repo = await community_repo_for(app, did)
        await pds(repo.put_record(nsid(app, "admins"), "self", admins_record(new, now)))
        async with app.db.transaction("communities." + action) as tx:
            await require_manager(tx, await active_tx(tx, did), actor.app_id)
            await members_store.set_admins_tx(tx, did, new)
            await app.writes.finish_tx(tx, intent)
            await audit_tx(app, tx, did, action, actor, target_did,
                           metadata={"admins": [a for a, _ in new]})
    return {"communityDid": did, "admins": [{"did": a, "addedAt": t} for a, t in new]}


async def promote(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    now = app.clock.iso_now()

    def compute(current: list[tuple[str, str]], me: MemberStatus, target: MemberStatus) -> list[tuple[str, str]]:
        require_role(me, admin=True)
        if not target.is_member:
            raise ApiError(404, "not_member", "Only a member can be promoted; this user is not one.")
        if target.is_admin:
            raise ApiError(409, "already_admin", "This member is already an admin.")
        return current + [(member_did, now)]

    return await _write_admins(app, community, actor, "admin.promoted", member_did, compute,
                               target_field="memberDid")


async def demote(app: "Application", community: Row, member_did: str, actor: Actor) -> dict[str, Any]:
    def compute(current: list[tuple[str, str]], me: MemberStatus, target: MemberStatus) -> list[tuple[str, str]]:
        require_role(me, admin=True)
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
        require_role(me, primary=True)
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
        row = await active_tx(tx, did)
        await require_manager(tx, row, actor.app_id)
        require_role(await member_status(tx, did, actor.did), admin=True)
        if allow:
            changed = await communities_store.allow_app_tx(tx, did, app_id, actor.did, app.clock.iso_now(),
                                                           manage=manage)
        else:
            changed = await communities_store.disallow_app_tx(tx, did, app_id)
        if changed:
            await audit_tx(app, tx, did, "community.app_allowed" if allow else "community.app_disallowed",
                           actor, None, metadata={"appId": app_id, "manage": bool(allow and manage)})
    return {"communityDid": did, "appId": app_id, "allowed": allow, "manage": bool(allow and manage)}


