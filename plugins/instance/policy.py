"""The instance-wide policy, applied through the platform's `cr_check_action` hook: who may
create a community (`instance.creation`)."""

from __future__ import annotations

from typing import Any

from daemon.plugin import ApiError
from daemon.plugin.atproto import resolve_did

WHAT_TO_DO = {"allowlist": "Ask the instance's operators to add you to the list of people who may create.",
              "operators": "Only the instance's operators create communities here; ask them for one."}


async def check_action(app: Any, action: str, actor_did: str | None, community_did: str | None,
                       app_id: str | None) -> None:
    if action != "community.create":
        return
    config = app.config.plugin("instance")
    if config.creation == "anyone" or config.is_operator(actor_did):
        return
    if config.creation == "allowlist" and actor_did:
        if actor_did in config.creation_allowlist:
            return
        if any(not e.startswith("did:") for e in config.creation_allowlist):
            try:
                handle = (await resolve_did(app, actor_did)).handle
            except ApiError:
                handle = None
            if config.allows_handle(handle):
                return
    raise ApiError(403, "creation_not_allowed",
                   f"This instance's creation policy is '{config.creation}': you may not create a community here. "
                   + WHAT_TO_DO[config.creation], details=[{"policy": config.creation}])
