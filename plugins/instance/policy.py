"""The instance-wide policy, applied through the platform's `cr_check_action` hook: who may
create a community (`instance.creation`) and how many each person may have
(`instance.max_communities_per_person`), instance-wide bans (a DID, a handle domain),
suspended communities, and accounts the network took down or deactivated."""

from __future__ import annotations

from typing import Any

from daemon.plugin import ApiError, CommunitiesService
from daemon.plugin.atproto import account_status, resolve_did
from plugins.instance import store

WHAT_TO_DO = {"allowlist": "Ask the instance's operators to add you to the list of people who may create.",
              "operators": "Only the instance's operators create communities here; ask them for one."}

#: What a suspended community refuses (it stays readable; members may still leave).
SUSPENDED_REFUSES = frozenset({"community.join", "community.request", "member.add", "membership.sync",
                               "record.write", "community.update"})

#: How each action reads in a refusal: "may not {verb} here".
VERBS = {"session.sign_in": "sign in", "community.create": "create a community",
         "community.join": "join a community", "community.request": "ask to join a community",
         "membership.sync": "join a community", "member.add": "be added as a member",
         "report.create": "report", "record.write": "write records", "community.update": "change a community",
         "community.moderate": "approve, decline, remove or ban members"}


async def check_action(app: Any, action: str, actor_did: str | None, community_did: str | None,
                       app_id: str | None) -> None:
    verb = VERBS.get(action, "do this")
    # an operator is never locked out by a ban (a handle-domain ban may cover their handle)
    if actor_did:
        operator = actor_did in app.config.plugin("instance").operators
        ban = None if operator else await ban_in_force(app, actor_did)
        if ban is not None:
            until = f" until {ban['expires_at']}" if ban["expires_at"] else ""
            who = "This account" if ban["kind"] == "did" else f"Accounts with a handle under {ban['subject'][2:]}"
            raise ApiError(403, "banned_on_instance",
                           f"{who} {'is' if ban['kind'] == 'did' else 'are'} banned on this instance{until}: "
                           f"it may not {verb} here. To appeal, {appeal(app)}.",
                           details=[{"expiresAt": ban["expires_at"]}])
        status = await account_status(app.db, actor_did)
        if status is not None:
            raise ApiError(403, "account_not_active",
                           f"The network marks this account as {status}: it may not {verb} here "
                           "until its PDS makes it active again.", details=[{"accountStatus": status}])
    if community_did and action in SUSPENDED_REFUSES:
        suspension = await app.db.fetchone("SELECT * FROM instance_suspensions WHERE community_did = ?",
                                           (community_did,))
        if suspension is not None:
            raise ApiError(403, "community_suspended",
                           f"This community is suspended by the instance's operators: {suspension['reason']}. "
                           "It is read-only until the suspension is lifted.",
                           details=[{"reason": suspension["reason"], "since": suspension["created_at"]}])
    if action == "community.create":
        await _creation(app, actor_did)


async def ban_in_force(app: Any, did: str, handle: str | None = None) -> Any:
    """The ban that holds `did` now (on the DID, or on its handle's domain), or None. The
    handle is resolved (cached) only when a domain ban exists. (Asked before every join and
    write: its queries are here, beside the check, so a join enters this module only.)"""
    now = app.clock.iso_now()
    row = await app.db.fetchone(
        "SELECT * FROM instance_bans WHERE subject = ? AND kind = 'did' AND (expires_at IS NULL OR expires_at > ?)",
        (did, now))
    if row is not None:
        return row
    domains = await app.db.fetchall(
        "SELECT * FROM instance_bans WHERE kind = 'domain' AND (expires_at IS NULL OR expires_at > ?) ORDER BY id",
        (now,))
    if not domains:
        return None
    if handle is None:
        try:
            handle = (await resolve_did(app, did)).handle
        except ApiError:
            return None
    if not handle:
        return None
    handle = handle.lower()
    for row in domains:
        if handle.endswith(row["subject"][1:]):
            return row
    return None


async def _creation(app: Any, actor_did: str | None) -> None:
    config = app.config.plugin("instance")
    if config.is_operator(actor_did):
        return
    if config.creation in ("allowlist", "operators") and not await _allowed(app, config, actor_did):
        raise ApiError(403, "creation_not_allowed",
                       f"This instance's creation policy is '{config.creation}': you may not create a community "
                       "here. " + WHAT_TO_DO[config.creation], details=[{"policy": config.creation}])
    if config.max_communities_per_person and actor_did:
        await _within_limit(app, config, actor_did)


async def _allowed(app: Any, config: Any, actor_did: str | None) -> bool:
    if config.creation != "allowlist" or not actor_did:
        return False
    if actor_did in config.creation_allowlist:
        return True
    if any(not e.startswith("did:") for e in config.creation_allowlist):
        try:
            handle = (await resolve_did(app, actor_did)).handle
        except ApiError:
            handle = None
        return config.allows_handle(handle)
    return False


async def primary_admin_count(app: Any, person_did: str) -> int:
    """Communities (active in the index) whose primary admin the person is."""
    service = app.service(CommunitiesService)
    if service is None:
        return 0
    count, after = 0, None
    while True:
        rows = await service.memberships_of(person_did, limit=500, after_id=after)
        count += sum(1 for r in rows if r["admin_rank"] == 0)
        if len(rows) < 500:
            return count
        after = rows[-1]["member_id"]


async def _within_limit(app: Any, config: Any, person_did: str) -> None:
    from plugins.instance.requests import waiting_count
    limit = config.max_communities_per_person
    owned = await primary_admin_count(app, person_did)
    waiting = await waiting_count(app, person_did)
    if owned + waiting >= limit:
        have = f"you are the primary admin of {owned}" + (f" and have {waiting} waiting for approval" if waiting
                                                          else "")
        raise ApiError(403, "creation_not_allowed",
                       f"This instance's creation policy is '{config.creation}' with at most {limit} "
                       f"communit{'y' if limit == 1 else 'ies'} per person (instance.max_communities_per_person), "
                       f"and {have}. Hand one over to another admin or delete one to create another.",
                       details=[{"policy": config.creation, "limit": limit}])


def appeal(app: Any) -> str:
    contact = app.config.plugin("instance").appeal_contact
    return f"write to the instance's operators at {contact}" if contact else "write to the instance's operators"


async def notices(app: Any, community_did: str, admin: bool) -> list[dict[str, str]]:
    """A suspended community's notice: the public reason to everyone; to its admins, what
    it means for them and how to appeal."""
    suspension = await store.suspension(app.db, community_did)
    if suspension is None:
        return []
    text = (f"The operators of this instance suspended this community: {suspension['reason']}. "
            "It is read-only and hidden from discovery and search: nobody can join or ask to join, "
            "and nothing can be posted or changed until the suspension is lifted.")
    if admin:
        text += (f" As an admin: to appeal, {appeal(app)}, naming this community and saying what you changed. "
                 "Members may still leave; nothing has been deleted.")
    return [{"title": "Suspended by the instance's operators", "text": text, "closed": True}]


async def withheld(app: Any) -> list[str]:
    """Suspended communities: left out of discovery and search."""
    return await store.suspended_dids(app.db)
