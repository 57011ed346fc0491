"""Invite links (docs/communities.md, "Invites"): create, list, revoke, preview, and the
use a join makes of one.

A code is 144 random bits (``secrets.token_urlsafe(18)``, 24 characters) and is shown only
once, in the answer to its creation: the index keeps its SHA-256, so neither the database
nor the list can give a code away. A join that names a usable code admits the user at
once, whatever the community's type, and counts the use in the transaction that makes
them a member (one ``UPDATE`` that checks and counts: concurrent joins cannot pass
``maxUses``).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError, Row, Transaction
from plugins.communities.capabilities import require_capability
from plugins.communities.steps import Actor, active_tx, audit_tx, member_status, require_manager
from plugins.communities.views import community_summary
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

CODE_BYTES = 18          # 144 bits
ID_PREFIX = "inv_"       # the list's ids, which revoke accepts as well as a code


def new_code() -> str:
    return secrets.token_urlsafe(CODE_BYTES)


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


#: The invite's page for people (the web plugin's `/invite/<code>`); the JSON preview of
#: the same code is `/api/v1/invites/<code>`.
PAGE_PATH = "/invite/"


def invite_url(app: "Application", code: str) -> str:
    """The link to hand out: the page a person opens in a browser to see and join."""
    return f"{app.config.server.base_url.rstrip('/')}{PAGE_PATH}{code}"


def refusal(invite: Row, now: str) -> ApiError | None:
    """410 when the invite can no longer be used: revoked, expired or used up."""
    if invite["revoked_at"] is not None:
        return ApiError(410, "invite_revoked", "This invite was revoked.")
    if invite["expires_at"] is not None and invite["expires_at"] <= now:
        return ApiError(410, "invite_expired", f"This invite expired at {invite['expires_at']}.")
    if invite["max_uses"] is not None and invite["uses"] >= invite["max_uses"]:
        return ApiError(410, "invite_exhausted", "This invite has been used as often as it may be.")
    return None


def NOT_FOUND() -> ApiError:  # noqa: N802
    return ApiError(404, "invite_not_found", "No such invite.")


async def usable(app: "Application", code: str, community_did: str | None = None) -> Row:
    """The invite `code` names (of `community_did`, if given): 404 if unknown, 410 if it
    can no longer be used."""
    invite = await store.get_invite(app.db, code_hash=code_hash(code))
    if invite is None or (community_did is not None and invite["community_did"] != community_did):
        raise NOT_FOUND()
    refused = refusal(invite, app.clock.iso_now())
    if refused is not None:
        raise refused
    return invite


async def preview(app: "Application", code: str) -> tuple[Row, Row]:
    """The usable invite `code` names and its (active) community: what the public preview
    shows, whoever asks (404 if unknown or the community is gone, 410 if unusable)."""
    invite = await usable(app, code)
    row = await store.get_community(app.db, invite["community_did"])
    if row is None or row["state"] != "active":
        raise NOT_FOUND()
    return invite, row


def preview_json(invite: Row, community: Row) -> dict[str, Any]:
    """The preview's answer: the community without its roster, and the invite's limits."""
    summary = community_summary(community)
    return {"community": {k: summary[k] for k in ("did", "handle", "displayName", "description",
                                                  "avatar", "type", "memberCount")},
            "invite": {"expiresAt": invite["expires_at"], "maxUses": invite["max_uses"],
                       "uses": invite["uses"]}}


async def claim_tx(app: "Application", tx: Transaction, invite: Row) -> ApiError | None:
    """Count one use of `invite` in the admitting transaction; the 410 if it was used up,
    revoked or expired meanwhile."""
    now = app.clock.iso_now()
    if await store.claim_use_tx(tx, invite["id"], now):
        return None
    fresh = await store.get_invite(tx, invite_id=invite["id"])
    return (refusal(fresh, now) if fresh is not None else None) or NOT_FOUND()


def invite_json(row: Row) -> dict[str, Any]:
    return {"id": f"{ID_PREFIX}{row['id']}", "maxUses": row["max_uses"], "uses": row["uses"],
            "expiresAt": row["expires_at"], "note": row["note"], "createdBy": row["created_by"],
            "createdAt": row["created_at"], "revokedAt": row["revoked_at"], "revokedBy": row["revoked_by"],
            "appId": row["app_id"]}


async def _require_manager_of_invites(tx: Transaction, did: str, actor: Actor) -> Row:
    row = await active_tx(tx, did)
    await require_manager(tx, row, actor.app_id)
    require_capability(await member_status(tx, did, actor.did), "invites.manage")
    return row


async def listing(app: "Application", community: Row, actor: Actor, *, limit: int,
                  before_id: int | None) -> list[Row]:
    """The community's invites, newest first (keyset on id), for a holder of
    ``invites.manage`` acting through a managing app or their own session."""
    await require_manager(app.db, community, actor.app_id)
    require_capability(await member_status(app.db, community["did"], actor.did), "invites.manage")
    return await store.list_invites(app.db, community["did"], limit=limit, before_id=before_id)


async def create(app: "Application", community: Row, actor: Actor, *, max_uses: int | None,
                 expires_at: str | None, note: str | None) -> dict[str, Any]:
    did = community["did"]
    await app.check_action("community.update", actor.did, community_did=did, app_id=actor.app_id)
    now = app.clock.iso_now()
    if expires_at is not None and expires_at <= now:
        raise ApiError(400, "invalid_request", "expiresAt: must be in the future",
                       details=[{"field": "expiresAt", "message": "must be in the future"}])
    code = new_code()
    async with app.db.transaction("communities.invite_create") as tx:
        await _require_manager_of_invites(tx, did, actor)
        # Counted in the writing transaction, so concurrent creations cannot pass the cap.
        cap = app.config.plugin("communities").max_active_invites
        if await store.count_active_tx(tx, did, now) >= cap:
            raise ApiError(409, "too_many_invites",
                           f"This community has {cap} active invites, the most this service allows "
                           "(communities.max_active_invites): revoke some, or let them expire or be "
                           "used up, before creating another.")
        invite_id = await store.insert_invite_tx(
            tx, community_did=did, code_hash=code_hash(code), max_uses=max_uses, expires_at=expires_at,
            note=note, created_by=actor.did, app_id=actor.app_id, now=now)
        await audit_tx(app, tx, did, "invite.created", actor, None,
                       metadata={"inviteId": f"{ID_PREFIX}{invite_id}", "maxUses": max_uses,
                                 "expiresAt": expires_at, "note": note})
        row = await store.get_invite(tx, invite_id=invite_id)
    return {"code": code, "url": invite_url(app, code), **invite_json(row)}


async def revoke(app: "Application", community: Row, code_or_id: str, actor: Actor) -> dict[str, Any]:
    """Revoke by code, or by the list's id (``inv_<n>``). 404 if unknown (or another
    community's), 410 ``invite_revoked`` if it already was."""
    did = community["did"]
    async with app.db.transaction("communities.invite_revoke") as tx:
        await _require_manager_of_invites(tx, did, actor)
        if code_or_id.startswith(ID_PREFIX) and code_or_id[len(ID_PREFIX):].isdigit():
            invite = await store.get_invite(tx, invite_id=int(code_or_id[len(ID_PREFIX):]))
        else:
            invite = await store.get_invite(tx, code_hash=code_hash(code_or_id))
        if invite is None or invite["community_did"] != did:
            raise NOT_FOUND()
        if not await store.revoke_tx(tx, invite["id"], actor.did, app.clock.iso_now()):
            raise ApiError(410, "invite_revoked", "This invite was already revoked.")
        await audit_tx(app, tx, did, "invite.revoked", actor, None,
                       metadata={"inviteId": f"{ID_PREFIX}{invite['id']}", "uses": invite["uses"]})
        row = await store.get_invite(tx, invite_id=invite["id"])
    return invite_json(row)
