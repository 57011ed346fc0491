"""Roles: a community's custom roles (a name plus capabilities from the catalogue in
capabilities.py) and who holds which role, built-in ``moderator`` included.

The definitions and the holders live in the community's repo as one record,
``<ns>.roles`` (rkey ``self``; lexicons/community.commonroom.roles.json), so a community's
governance moves with its account. Every change reads like every other command (see
steps.py), as one command (:class:`WriteRoles`): check → intent (kind
``communities.roles``) → put the whole record → one transaction (the index: ``community_roles`` and the members' ``roles``/``grants``
columns, the intent, the event ``member.roles_changed``, the audit entry). Only admins
manage roles; every change is audited and emits ``member.roles_changed`` (docs/webhooks.md:
a member's roles for an assignment, the holders for a role's definition). Changes hold the community's lock, so two never
compute the record from the same old state, and a removal never races an assignment.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any, Callable, Mapping

from daemon.plugin import ApiError, Row, Transaction, emit_tx
from daemon.plugin.atproto import Intent, Plan, Run, WriteKind, pds
from plugins.communities.steps import (Actor, CommunityCommand, active_tx, audit_tx, community_lock_key, member_status,
                                       nsid, require_manager, require_role)
from plugins.communities.capabilities import (BUILTIN, CATALOGUE, MAX_ROLES, MODERATOR, RESERVED, catalogue,
                                              grants_of, role_fields, role_name, plugin_capabilities)
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

ROLES = "communities.roles"  # the kind of write: the roles record put
MAX_HOLDERS = 5000           # members holding a role (the record's `members` list)

Definitions = dict[str, dict[str, Any]]   # name -> {description, capabilities, collections}
Holders = dict[str, list[str]]            # member DID -> role names, in join order


# ------------------------------------------------------------------ reading


def _definition(row: Row) -> dict[str, Any]:
    return {"description": row["description"], "capabilities": json.loads(row["capabilities"]),
            "collections": json.loads(row["collections"])}


async def _state(reader: Any, did: str) -> tuple[Definitions, Holders]:
    defs = {r["name"]: _definition(r) for r in await store.definitions(reader, did)}
    holders = {r["member_did"]: r["roles"].split() for r in await store.holders(reader, did)}
    return defs, holders


def role_json(name: str, role: dict[str, Any] | None = None,
              listed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A role as the API shows it: built-in ones with what they hold of the catalogue
    `listed` (`capabilities.catalogue`: the plugins' capabilities too; the core's alone
    without it)."""
    if name == "admin":
        return {"name": name, "builtin": True, "description": "every capability; manages the community",
                "capabilities": sorted(listed["capabilities"] if listed else CATALOGUE), "collections": []}
    if name == "moderator":
        return {"name": name, "builtin": True, "description": "approves, removes and bans members who "
                "are not admins, manages invites, reads the audit log",
                "capabilities": list(listed["moderator"]) if listed else sorted(MODERATOR),
                "collections": []}
    if name == "member":
        return {"name": name, "builtin": True, "description": "a member of the community",
                "capabilities": [], "collections": []}
    assert role is not None
    return {"name": name, "builtin": False, **role}


async def list_roles(app: "Application", community: Row) -> dict[str, Any]:
    defs, _ = await _state(app.db, community["did"])
    listed = catalogue(app)
    return {"communityDid": community["did"],
            "roles": [role_json(n, listed=listed) for n in BUILTIN]
            + [role_json(n, r) for n, r in defs.items()]}


def roles_record(defs: Definitions, holders: Holders, now: str) -> dict[str, Any]:
    """`<ns>.roles` (rkey self): the custom roles and who holds which role."""
    roles = []
    for name, role in sorted(defs.items()):
        entry: dict[str, Any] = {"name": name, "capabilities": role["capabilities"],
                                 "collections": role["collections"]}
        if role["description"]:
            entry["description"] = role["description"]
        roles.append(entry)
    return {"roles": roles, "members": [{"did": d, "roles": r} for d, r in holders.items() if r],
            "updatedAt": now}


# ------------------------------------------------------------------ the one write


Change = Callable[[Definitions, Holders], tuple[Definitions, Holders, "str | None", dict[str, Any]]]


class WriteRoles(CommunityCommand):
    """Apply `change` (pure: the current definitions and holders → new ones, the audit
    target and metadata; raises a refusal) to the roles record and the index."""

    kind = ROLES

    def __init__(self, app: "Application", did: str, actor: Actor, action: str, change: Change,
                 target: str | None) -> None:
        super().__init__(app, did, actor)
        self.name, self.action, self.change, self.target = "communities." + action, action, change, target

    async def check(self, tx: Transaction) -> Plan:
        did = self.did
        require_role(await member_status(tx, did, self.actor.did), admin=True)
        if self.target is not None and not (await member_status(tx, did, self.target)).is_member:
            raise ApiError(404, "not_member", "This user is not a member of the community.")
        self.defs, self.holders = await _state(tx, did)
        self.new_defs, self.new_holders, self.target_did, self.metadata = self.change(self.defs, self.holders)
        self.now = self.app.clock.iso_now()
        return Plan(key=f"roles:{did}", operation=self.action, rkey="self", community_did=did,
                    payload={"memberDid": self.target})

    async def write(self, run: Run) -> None:
        await run.put(nsid(self.app, "roles"), "self", roles_record(self.new_defs, self.new_holders, self.now))

    async def commit(self, tx: Transaction, run: Run) -> tuple[Definitions, Holders]:
        did, actor, defs, holders = self.did, self.actor, self.defs, self.holders
        new_defs, new_holders = self.new_defs, self.new_holders
        await require_manager(tx, await active_tx(tx, did), actor.app_id)
        for name in defs.keys() - new_defs.keys():
            await store.delete_definition_tx(tx, did, name)
        for name, role in new_defs.items():
            if defs.get(name) != role:
                await store.put_definition_tx(
                    tx, did, name, description=role["description"],
                    capabilities_json=json.dumps(role["capabilities"]),
                    collections_json=json.dumps(role["collections"]), now=self.now)
        await store.set_member_roles_tx(tx, did, [
            (member, " ".join(new_holders.get(member, [])) or None,
             grants_of(new_holders.get(member, []), new_defs))
            for member in {**holders, **new_holders}])
        await emit_tx(self.app, tx, "member.roles_changed", community_did=did, app_id=actor.app_id,
                      actor_did=actor.did,
                      data=_change_data(self.action, self.metadata, self.target_did, holders, new_holders, actor))
        await audit_tx(self.app, tx, did, self.action, actor, self.target_did, metadata=self.metadata)
        return new_defs, new_holders


async def _write_roles(app: "Application", community: Row, actor: Actor, action: str, change: Change,
                       target: str | None = None) -> tuple[Definitions, Holders]:
    """Run :class:`WriteRoles` (admins only: refused before the lock too)."""
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    require_role(await member_status(app.db, did, actor.did), admin=True)
    return await app.writes.run(WriteRoles(app, did, actor, action, change, target))


async def drop_holder(app: "Application", repo: Any, did: str, member_did: str) -> bool:
    """Put the roles record without `member_did`, who is leaving the community (leave,
    removal, ban, a deleted account), before their membership ends: a record that still
    named them would give their roles back on reindex. The caller holds the community's
    lock and has begun its intent with ``heldRoles`` in the payload, so a crash before its
    commit is settled by putting the record from the index (reconcile.py); the index loses
    their roles with their member row. False (nothing written) if they hold no role."""
    defs, holders = await _state(app.db, did)
    if member_did not in holders:
        return False
    del holders[member_did]
    await pds(repo.put_record(nsid(app, "roles"), "self", roles_record(defs, holders, app.clock.iso_now())))
    return True


async def put_from_index(app: "Application", repo: Any, did: str) -> str:
    """Put the roles record as the index has it (the reconciler's undo)."""
    defs, holders = await _state(app.db, did)
    await repo.put_record(nsid(app, "roles"), "self", roles_record(defs, holders, app.clock.iso_now()))
    return f"put {nsid(app, 'roles')}/self"


def _change_data(action: str, metadata: dict[str, Any], target: str | None, holders: Holders,
                 new_holders: Holders, actor: Actor) -> dict[str, Any]:
    """`member.roles_changed`'s data: what changed (`change`: assigned, unassigned,
    role_created, role_updated, role_deleted), the role, who changed it; for an
    assignment the member and the roles they now hold, for a definition the DIDs of the
    members holding it (before a deletion)."""
    role = metadata.get("role")
    change = {"role.assigned": "assigned", "role.unassigned": "unassigned", "role.created": "role_created",
              "role.updated": "role_updated", "role.deleted": "role_deleted"}[action]
    data: dict[str, Any] = {"change": change, "role": role, "changedBy": actor.did}
    if target is not None:
        data |= {"memberDid": target, "roles": new_holders.get(target, [])}
    else:
        data["holders"] = sorted(d for d, r in holders.items() if role in r)
    return data


# ------------------------------------------------------------------ commands


async def create_role(app: "Application", community: Row, actor: Actor, name: str,
                      body: dict[str, Any]) -> dict[str, Any]:
    await app.check_action("community.update", actor.did, community_did=community["did"], app_id=actor.app_id)
    role_name(name)
    if name in RESERVED:
        raise ApiError(409, "role_builtin", f"{name} is a built-in or reserved role name.")
    role = role_fields(body, plugin_capabilities(app))

    def change(defs: Definitions, holders: Holders) -> tuple[Definitions, Holders, None, dict[str, Any]]:
        if name in defs:
            raise ApiError(409, "role_exists", f"The role {name} exists; change it with PUT …/roles/{name}.")
        if len(defs) >= MAX_ROLES:
            raise ApiError(409, "too_many_roles", f"A community may define at most {MAX_ROLES} roles.")
        return {**defs, name: role}, holders, None, {"role": name, **role}

    await _write_roles(app, community, actor, "role.created", change)
    return role_json(name, role)


async def update_role(app: "Application", community: Row, actor: Actor, name: str,
                      body: dict[str, Any]) -> dict[str, Any]:
    await app.check_action("community.update", actor.did, community_did=community["did"], app_id=actor.app_id)
    _not_builtin(name)
    role = role_fields(body, plugin_capabilities(app))

    def change(defs: Definitions, holders: Holders) -> tuple[Definitions, Holders, None, dict[str, Any]]:
        if name not in defs:
            raise ApiError(404, "role_not_found", f"No role {name} in this community.")
        return {**defs, name: role}, holders, None, {"role": name, "before": defs[name], **role}

    await _write_roles(app, community, actor, "role.updated", change)
    return role_json(name, role)


async def delete_role(app: "Application", community: Row, actor: Actor, name: str) -> dict[str, Any]:
    """Delete a custom role; its holders lose it (and what it granted) in the same change."""
    await app.check_action("community.update", actor.did, community_did=community["did"], app_id=actor.app_id)
    _not_builtin(name)
    lost: list[str] = []

    def change(defs: Definitions, holders: Holders) -> tuple[Definitions, Holders, None, dict[str, Any]]:
        if name not in defs:
            raise ApiError(404, "role_not_found", f"No role {name} in this community.")
        lost[:] = [d for d, r in holders.items() if name in r]
        return ({n: r for n, r in defs.items() if n != name},
                {d: [x for x in r if x != name] for d, r in holders.items()}, None,
                {"role": name, "holders": lost})

    await _write_roles(app, community, actor, "role.deleted", change)
    return {"communityDid": community["did"], "name": name, "deleted": True, "holders": lost}


async def assign(app: "Application", community: Row, actor: Actor, member_did: str, name: str) -> dict[str, Any]:
    if name in ("admin", "member"):
        raise ApiError(409, "role_builtin", f"{name} is not assigned here: admins are made with "
                       "admins/promote, members by joining.")
    role_name(name, "role")

    def change(defs: Definitions, holders: Holders) -> tuple[Definitions, Holders, str, dict[str, Any]]:
        if name != "moderator" and name not in defs:
            raise ApiError(404, "role_not_found", f"No role {name} in this community.")
        held = holders.get(member_did, [])
        if name in held:
            raise ApiError(409, "role_already_held", f"This member already holds the role {name}.")
        if member_did not in holders and len(holders) >= MAX_HOLDERS:
            raise ApiError(409, "too_many_role_holders", f"At most {MAX_HOLDERS} members may hold roles.")
        return defs, {**holders, member_did: held + [name]}, member_did, {"role": name}

    _, holders = await _write_roles(app, community, actor, "role.assigned", change, target=member_did)
    return {"communityDid": community["did"], "memberDid": member_did, "roles": holders.get(member_did, [])}


async def unassign(app: "Application", community: Row, actor: Actor, member_did: str, name: str) -> dict[str, Any]:
    def change(defs: Definitions, holders: Holders) -> tuple[Definitions, Holders, str, dict[str, Any]]:
        held = holders.get(member_did, [])
        if name not in held:
            raise ApiError(409, "role_not_held", f"This member does not hold the role {name}.")
        return defs, {**holders, member_did: [r for r in held if r != name]}, member_did, {"role": name}

    _, holders = await _write_roles(app, community, actor, "role.unassigned", change, target=member_did)
    return {"communityDid": community["did"], "memberDid": member_did, "roles": holders.get(member_did, [])}


def _instant(value: Any) -> "dt.datetime | None":
    """A record's datetime as an aware instant (None: missing or not a datetime)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _not_builtin(name: str) -> None:
    if name in RESERVED:
        raise ApiError(409, "role_builtin", f"{name} is a built-in role; it cannot be changed or deleted.")


# ------------------------------------------------------------------ reindex


async def rebuild_tx(tx: Any, did: str, record: dict[str, Any] | None, members: Mapping[str, str],
                     now: str, extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Make the index's roles what the repo's `roles` record says (`commonroom reindex`):
    valid custom roles only, held by current `members` ({did: when their membership began,
    the proof's confirmedAt}) only, and only by those whose membership began no later than
    the record's `updatedAt`: a grant to someone who joined after the record was last
    written was made to an earlier membership of theirs (a record from before holders were
    dropped on leaving). No record: no custom roles, nobody holds a role."""
    Refused = ApiError
    defs: Definitions = {}
    holders: Holders = {}
    written = _instant((record or {}).get("updatedAt"))
    for entry in (record or {}).get("roles") or []:
        try:
            name = role_name(entry.get("name")) if isinstance(entry, dict) else None
            if name is None or name in RESERVED:
                continue
            defs[name] = role_fields(entry, extra)
        except Refused:
            continue  # not a definition this service would write: skipped
    for entry in (record or {}).get("members") or []:
        # the record is read from the repo: anything in it may be of any JSON type
        if not (isinstance(entry, dict) and isinstance(entry.get("did"), str) and entry["did"] in members
                and isinstance(entry.get("roles"), list)):
            continue
        began = _instant(members[entry["did"]])
        if written is None or began is None or began > written:
            continue
        held = [r for r in dict.fromkeys(r for r in entry["roles"] if isinstance(r, str))
                if r == "moderator" or r in defs]
        if held:
            holders[entry["did"]] = held
    old_defs, old_holders = await _state(tx, did)
    for name in old_defs.keys() - defs.keys():
        await store.delete_definition_tx(tx, did, name)
    for name, role in defs.items():
        await store.put_definition_tx(tx, did, name, description=role["description"],
                                            capabilities_json=json.dumps(role["capabilities"]),
                                            collections_json=json.dumps(role["collections"]), now=now)
    await store.set_member_roles_tx(tx, did, [
        (member, " ".join(holders.get(member, [])) or None, grants_of(holders.get(member, []), defs))
        for member in {**old_holders, **holders}])
    return {"roles": sorted(defs), "roleHolders": len(holders)}


# ------------------------------------------------------------------ reconciliation


async def _settle(app: "Application", intent: Intent) -> str | None:
    """A role change that did not commit: put the roles record from the index."""
    did = intent.community_did or ""
    community = await store.get_community(app.db, did)
    done: list[str] = []
    if community is not None and community["state"] == "active":
        from daemon.plugin.atproto import community_repo
        done.append(await put_from_index(app, await community_repo(app, did), did))
    async with app.db.transaction("communities.reconcile") as tx:
        if not await app.writes.finish_tx(tx, intent, settling=True):
            return None
        if await store.get_community(tx, did) is not None:
            await audit_tx(app, tx, did, "reconciled", None, intent.payload.get("memberDid"),
                           metadata={"operation": intent.operation, "key": intent.key, "rkey": intent.rkey,
                                     "startedAt": intent.created_at, "attempts": intent.tries, "undone": done})
    return "reconciled"


def write_kinds(app: "Application") -> list[WriteKind]:
    def after(app: "Application") -> float:
        return app.config.plugin("communities").reconcile_after_seconds

    return [WriteKind(ROLES, _settle, after, locks=lambda i: [community_lock_key(i.community_did or "")],
                      outcomes=("reconciled",))]
