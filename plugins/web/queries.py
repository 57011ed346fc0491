"""Reads the pages need that no store module offers yet (the plugin's own query module:
the only SQL of the web plugin), and plain-data shapes for the templates."""

from __future__ import annotations

from typing import Any

from daemon.plugin import is_did
from daemon.atproto.pds import image_url
from store import members as members_store
from store.db import Database, Row


async def community_did_by_handle(db: Database, handle: str) -> str | None:
    """The DID of the active community with `handle` (the indexed handle, lower-case)."""
    return await db.fetchval(
        "SELECT did FROM communities WHERE handle = ? AND state = 'active' ORDER BY id DESC LIMIT 1",
        (handle.strip().lower().lstrip("@"),))


async def community_did_of(db: Database, ident: str) -> str | None:
    """`/c/<ident>`: a DID as it is, a handle through the index (None: no such community)."""
    if is_did(ident):
        return ident
    return await community_did_by_handle(db, ident)


def role_of(admin_rank: int | None) -> str:
    if admin_rank == 0:
        return "primary admin"
    return "admin" if admin_rank is not None else "member"


def card(row: Row) -> dict[str, Any]:
    """A community as a list shows it."""
    return {"did": row["did"], "handle": row["handle"], "name": row["display_name"],
            "description": row["description"] or "", "type": row["type"],
            "avatar": image_url(row, "avatar"), "member_count": row["member_count"]}


async def my_communities(db: Database, user_did: str, *, limit: int,
                         after_id: int | None) -> tuple[list[dict[str, Any]], int | None]:
    """The user's communities (newest membership first) with their role, and for those they
    run the number of pending join requests; plus the keyset position of the next page."""
    rows = await members_store.memberships_of(db, user_did, limit=limit + 1, after_id=after_id)
    out = []
    for row in rows[:limit]:
        item = card(row) | {"role": role_of(row["admin_rank"])}
        item["pending_count"] = row["pending_count"] if row["admin_rank"] is not None else None
        out.append(item)
    more = rows[limit - 1]["member_id"] if len(rows) > limit else None
    return out, more


async def my_requests(db: Database, user_did: str) -> list[dict[str, Any]]:
    """Communities the user asked to join (role "pending")."""
    return [card(r) | {"role": "pending", "pending_count": None}
            for r in await members_store.requests_of(db, user_did)]


async def member_profile(db: Database, community_did: str, member_did: str) -> dict[str, Any] | None:
    """A member's name for a confirmation ("Make <name> the primary admin?"), or None."""
    member = await members_store.get_member(db, community_did, member_did)
    if member is None:
        return None
    profile = await members_store.get_profile(db, member_did)
    handle = profile["handle"] if profile else None
    name = (profile["display_name"] if profile else None) or handle or member_did
    return {"did": member_did, "handle": handle, "name": name}


#: Audit actions in words: "<actor> <words> <target>".
AUDIT_WORDS = {
    "community.created": "created the community",
    "community.profile_updated": "edited the profile",
    "community.app_allowed": "allowed an app",
    "community.app_disallowed": "revoked an app",
    "community.deleted": "deleted the community",
    "member.requested": "asked to join",
    "member.request_withdrawn": "withdrew their request",
    "member.joined": "joined",
    "member.approved": "approved the request of",
    "member.rejected": "declined the request of",
    "member.left": "left",
    "member.removed": "removed",
    "member.banned": "banned",
    "member.unbanned": "lifted the ban on",
    "invite.created": "created an invite link",
    "invite.revoked": "revoked an invite link",
    "admin.promoted": "made an admin:",
    "admin.demoted": "removed the admin role from",
    "admin.transferred": "handed the primary admin role to",
}

#: Actions whose target is the actor themselves (the sentence names them once).
_SELF_ACTIONS = {"member.requested", "member.request_withdrawn", "member.joined", "member.left",
                 "community.created"}


async def audit_entries(db: Database, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Audit entries (`views.audit_json` shapes) as sentences' parts, people by handle
    where the profile cache knows them."""
    known = await members_store.profiles(db, [d for e in entries for d in (e["actorDid"], e["targetDid"]) if d])

    def name(did: str | None) -> str | None:
        if did is None:
            return None
        row = known.get(did)
        return (row["handle"] if row is not None and row["handle"] else None) or did

    out = []
    for e in entries:
        action = e["action"]
        target = None if action in _SELF_ACTIONS and e["targetDid"] == e["actorDid"] else name(e["targetDid"])
        words = AUDIT_WORDS.get(action) or e["metadata"].get("words") or action  # a plugin's own words
        if e.get("outcome") == "denied":  # a refused admin action (denials.py): say so
            words = f"was refused ({e['metadata'].get('code')}) to {action}"
        out.append({"when": e["createdAt"], "actor": name(e["actorDid"]) or "An app",
                    "words": words, "target": target,
                    "reason": e["reason"], "app": e["appId"]})
    return out


async def trusted_apps(db: Database, community: Row) -> list[dict[str, Any]]:
    """The apps a community trusts: the one that created it (always, for management) and
    those its admins allowed, with their name and domain."""
    from store import apps as apps_store
    from store import communities as communities_store

    creator = community["creator_app_id"]
    entries: list[tuple[str, Row | None]] = [(creator, None)] if creator else []
    entries += [(r["app_id"], r) for r in await communities_store.list_allowed_apps(db, community["did"])
                if r["app_id"] != creator]
    out = []
    for app_id, granted in entries:
        app = await apps_store.get_app(db, app_id)
        out.append({"id": app_id, "name": app["name"] if app else app_id,
                    "domain": app["domain"] if app else None,
                    "active": bool(app and app["active"]), "creator": granted is None,
                    "manage": granted is None or bool(granted["manage"]),
                    "since": granted["allowed_at"] if granted is not None else community["created_at"]})
    return out
