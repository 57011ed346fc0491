"""A community's settings that live only in this service (not in its repo): whether
actions taken through apps in a user's name must carry a proof of that user
(docs/identity.md), who may list its members (`rosterVisibility`) and whether it appears
in lists and search (`listed`). Admins change them, through the browser or an app that
manages the community; each change is audited."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError
from plugins.communities.steps import NOT_FOUND, member_status, require_manager
from plugins.communities.steps import Actor, audit_tx
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, Row


def settings_json(row: "Row") -> dict[str, Any]:
    return {"communityDid": row["did"], "requireUserProof": bool(row["require_user_proof"]),
            "rosterVisibility": row["roster_visibility"], "listed": bool(row["listed"])}


async def update(app: "Application", community: "Row", actor: Actor, *, require_user_proof: bool | None = None,
                 roster_visibility: str | None = None, listed: bool | None = None) -> dict[str, Any]:
    """Change the settings given (None: unchanged); one audit entry lists what changed."""
    did = community["did"]
    await app.check_action("community.update", actor.did, community_did=did, app_id=actor.app_id)
    async with app.db.transaction("communities.settings") as tx:
        row = await store.get_community(tx, did)
        if row is None or row["state"] != "active":
            raise NOT_FOUND(did)
        await require_manager(tx, row, actor.app_id)
        if not (await member_status(tx, did, actor.did)).is_admin:
            raise ApiError(403, "not_admin", "Only an admin of this community may do this.")
        changed: dict[str, Any] = {}
        if require_user_proof is not None and bool(row["require_user_proof"]) != require_user_proof:
            await store.set_require_user_proof_tx(tx, did, require_user_proof, app.clock.iso_now())
            changed["requireUserProof"] = require_user_proof
        if roster_visibility is not None and row["roster_visibility"] != roster_visibility:
            changed["rosterVisibility"] = roster_visibility
        if listed is not None and bool(row["listed"]) != listed:
            changed["listed"] = listed
        if set(changed) - {"requireUserProof"}:
            await store.set_visibility_tx(tx, did, app.clock.iso_now(),
                                                      roster_visibility=changed.get("rosterVisibility"),
                                                      listed=changed.get("listed"))
        if changed:
            await audit_tx(app, tx, did, "community.settings_changed", actor, None, metadata=changed)
        row = await store.get_community(tx, did)
    return settings_json(row)
