"""Admin commands: promote, demote, transfer (each rewrites the community's ``admins``
record under the community's lock: one command, :class:`WriteAdmins`), and the app grants
admins decide."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from daemon.plugin import ApiError, MemberStatus, Row, Transaction
from daemon.plugin.atproto import Plan, Run
from plugins.communities.steps import (ADMINS, Actor, CommunityCommand, active_tx, admins_list, admins_record, audit_tx,
                                       member_status, nsid, require_manager, require_person, require_role)
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application


# ------------------------------------------------------------------ admins


Compute = Callable[[list[tuple[str, str]], MemberStatus, MemberStatus], list[tuple[str, str]]]


class WriteAdmins(CommunityCommand):
    """Rewrite the admins list as `compute` says (from the current list, the actor's and
    the target's status; raises a refusal)."""

    kind = ADMINS

    def __init__(self, app: "Application", did: str, actor: Actor, action: str, target_did: str,
                 compute: Compute) -> None:
        super().__init__(app, did, actor)
        self.name, self.action, self.target_did, self.compute = "communities." + action, action, target_did, compute

    async def check(self, tx: Transaction) -> Plan:
        did = self.did
        self.new = self.compute(await admins_list(tx, did), await member_status(tx, did, self.actor.did),
                                await member_status(tx, did, self.target_did))
        self.now = self.app.clock.iso_now()
        return Plan(key=f"admins:{did}", operation=self.action, rkey="self", community_did=did,
                    payload={"admins": [a for a, _ in self.new]})

    async def write(self, run: Run) -> None:
        await run.put(nsid(self.app, "admins"), "self", admins_record(self.new, self.now))

    async def commit(self, tx: Transaction, run: Run) -> dict[str, Any]:
        did = self.did
        await require_manager(tx, await active_tx(tx, did), self.actor.app_id)
        await store.set_admins_tx(tx, did, self.new)
        await audit_tx(self.app, tx, did, self.action, self.actor, self.target_did,
                       metadata={"admins": [a for a, _ in self.new]})
        return {"communityDid": did, "admins": [{"did": a, "addedAt": t} for a, t in self.new]}


async def _write_admins(app: "Application", community: Row, actor: Actor, action: str,
                        target_did: str, compute: Compute, target_field: str | None = None) -> dict[str, Any]:
    """Run :class:`WriteAdmins`. With `target_field` (promote, transfer: the target gains a
    role) the target must be a real person: checked after the cheap refusals and before
    the lock, so a slow directory never holds up the community."""
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    if target_field is not None:
        compute(await admins_list(app.db, did), await member_status(app.db, did, actor.did),
                await member_status(app.db, did, target_did))
        await require_person(app, target_did, target_field)
    return await app.writes.run(WriteAdmins(app, did, actor, action, target_did, compute))


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
    await app.check_action("community.update", actor.did, community_did=did, app_id=actor.app_id)
    async with app.db.transaction("communities.app_visibility") as tx:
        row = await active_tx(tx, did)
        await require_manager(tx, row, actor.app_id)
        require_role(await member_status(tx, did, actor.did), admin=True)
        if allow:
            changed = await store.allow_app_tx(tx, did, app_id, actor.did, app.clock.iso_now(),
                                                           manage=manage)
        else:
            changed = await store.disallow_app_tx(tx, did, app_id)
        if changed:
            await audit_tx(app, tx, did, "community.app_allowed" if allow else "community.app_disallowed",
                           actor, None, metadata={"appId": app_id, "manage": bool(allow and manage)})
    return {"communityDid": did, "appId": app_id, "allowed": allow, "manage": bool(allow and manage)}


