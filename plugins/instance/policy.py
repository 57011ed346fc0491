"""The instance-wide policy, applied through the platform's `cr_check_action` hook: who may
create a community (`instance.creation`) and how many each person may have
(`instance.max_communities_per_person`)."""

from __future__ import annotations

from typing import Any

from daemon.plugin import ApiError, CommunitiesService
from daemon.plugin.atproto import resolve_did

WHAT_TO_DO = {"allowlist": "Ask the instance's operators to add you to the list of people who may create.",
              "operators": "Only the instance's operators create communities here; ask them for one."}


async def check_action(app: Any, action: str, actor_did: str | None, community_did: str | None,
                       app_id: str | None) -> None:
    if action != "community.create":
        return
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
