"""What the pages read, asked of the services (the communities' tables are that plugin's:
this plugin runs no SQL on them, docs/plugins.md), and plain-data shapes for the templates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.plugin import is_did

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, Row


async def community_did_of(app: "Application", ident: str) -> str | None:
    """`/c/<ident>`: a DID as it is, a handle through the index (None: no such community)."""
    if is_did(ident):
        return ident
    found = await app.communities.community(ident)
    return found.did if found is not None else None


def role_of(admin_rank: int | None) -> str:
    if admin_rank == 0:
        return "primary admin"
    return "admin" if admin_rank is not None else "member"


def card(app: "Application", row: "Row") -> dict[str, Any]:
    """A community as a list shows it."""
    image_url = app.communities.image_url
    return {"did": row["did"], "handle": row["handle"], "name": row["display_name"],
            "description": row["description"] or "", "type": row["type"],
            "avatar": image_url(row, "avatar"), "member_count": row["member_count"]}


async def my_communities(app: "Application", user_did: str, *, limit: int,
                         after_id: int | None) -> tuple[list[dict[str, Any]], int | None]:
    """The user's communities (newest membership first) with their role, and for those they
    run the number of pending join requests; plus the keyset position of the next page."""
    rows = await app.communities.memberships_of(user_did, limit=limit + 1, after_id=after_id)
    out = []
    for row in rows[:limit]:
        item = card(app, row) | {"role": role_of(row["admin_rank"])}
        item["pending_count"] = row["pending_count"] if row["admin_rank"] is not None else None
        out.append(item)
    more = rows[limit - 1]["member_id"] if len(rows) > limit else None
    return out, more


async def my_requests(app: "Application", user_did: str) -> list[dict[str, Any]]:
    """Communities the user asked to join (role "pending")."""
    return [card(app, r) | {"role": "pending", "pending_count": None}
            for r in await app.communities.requests_of(user_did)]


async def member_profile(app: "Application", community_did: str, member_did: str) -> dict[str, Any] | None:
    """A member's name for a confirmation ("Make <name> the primary admin?"), or None."""
    if not (await app.communities.membership(community_did, member_did)).is_member:
        return None
    profile = (await app.communities.profiles([member_did])).get(member_did)
    handle = profile["handle"] if profile else None
    name = (profile["displayName"] if profile else None) or handle or member_did
    return {"did": member_did, "handle": handle, "name": name}


#: Audit actions in words: "<actor> <words> <target>" (the sentences with more names are
#: built in `_sentence`).
AUDIT_WORDS = {
    "community.created": "created the community",
    "community.profile_updated": "edited the profile",
    "community.app_allowed": "allowed an app",
    "community.app_disallowed": "revoked an app",
    "community.settings_changed": "changed the community's settings",
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
    "role.created": "created the role",
    "role.updated": "changed the role",
    "role.deleted": "deleted the role",
    "role.assigned": "gave a role to",
    "role.unassigned": "took a role from",
    "reconciled": "finished an interrupted change",
}

#: The history's filters by kind: a name -> (label, the actions it covers).
AUDIT_KINDS = {
    "members": ("Joins, leaves and removals", ("member.joined", "member.left", "member.removed")),
    "requests": ("Requests to join", ("member.requested", "member.request_withdrawn", "member.approved",
                                      "member.rejected")),
    "bans": ("Bans", ("member.banned", "member.unbanned")),
    "roles": ("Admins and roles", ("admin.promoted", "admin.demoted", "admin.transferred", "role.created",
                                   "role.updated", "role.deleted", "role.assigned", "role.unassigned")),
    "invites": ("Invite links", ("invite.created", "invite.revoked")),
    "community": ("The community and its apps", ("community.created", "community.profile_updated",
                                                 "community.app_allowed", "community.app_disallowed",
                                                 "community.settings_changed", "community.deleted")),
}

#: Actions whose target is the actor themselves (the sentence names them once).
_SELF_ACTIONS = {"member.requested", "member.request_withdrawn", "member.joined", "member.left",
                 "community.created"}

#: Profile fields in words ("changed the avatar").
_FIELD_WORDS = {"display_name": "the name", "description": "the description", "type": "who can join",
                "avatar": "the avatar", "banner": "the banner"}


async def did_of_person(app: "Application", text: str) -> str | None:
    """A person named in a filter: a DID as it is, a handle through the profile cache."""
    text = text.strip().lstrip("@")
    if is_did(text):
        return text
    return await app.communities.person_did(text)


async def audit_entries(app: "Application", entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Audit entries (`views.audit_json` shapes) as sentences: people by handle where the
    profile cache knows them, apps by name, roles, pictures and ban ends named."""
    from plugins.web.dates import when
    from daemon.plugin.storage import AppsTable

    known = await app.communities.profiles([d for e in entries for d in (e["actorDid"], e["targetDid"]) if d])
    app_ids = {e["appId"] for e in entries if e["appId"]} | {
        e["metadata"].get("appId") for e in entries if isinstance(e["metadata"].get("appId"), str)}
    apps = {}
    for app_id in app_ids:
        row = await AppsTable.get(app.db, app_id)
        apps[app_id] = row["name"] if row is not None else app_id

    def name(did: str | None) -> str | None:
        if did is None:
            return None
        row = known.get(did)
        return (row["handle"] if row is not None and row["handle"] else None) or did

    out = []
    for e in entries:
        action, meta = e["action"], e["metadata"]
        target = None if action in _SELF_ACTIONS and e["targetDid"] == e["actorDid"] else name(e["targetDid"])
        # a plugin's own words (audit_tx in its words), else the action's name
        words, after = AUDIT_WORDS.get(action) or meta.get("words") or action, None
        role = meta.get("role") if isinstance(meta.get("role"), str) else None
        if action == "role.assigned" and role:
            words, after = "gave", f"the role {role}"
        elif action == "role.unassigned" and role:
            words, after = f"took the role {role} from", None
        elif action in ("role.created", "role.updated", "role.deleted") and role:
            words = f"{AUDIT_WORDS[action]} {role}"
        elif action == "community.profile_updated" and isinstance(meta.get("fields"), list):
            fields = [_FIELD_WORDS.get(f, f) for f in meta["fields"]]
            if fields:
                words = "changed " + (", ".join(fields[:-1]) + " and " + fields[-1] if len(fields) > 1 else fields[0])
        elif action in ("community.app_allowed", "community.app_disallowed") and meta.get("appId"):
            app_name = apps.get(meta["appId"], meta["appId"])
            words = (f"let the app {app_name} act for the admins" if meta.get("manage") else
                     f"allowed the app {app_name}") if action == "community.app_allowed" \
                else f"revoked the app {app_name}"
        elif action == "member.banned":
            after = f"until {when(meta['expiresAt'])}" if meta.get("expiresAt") else "with no end date"
        if e.get("outcome") == "denied":  # a refused admin action (denials.py): say so
            words = f"was refused ({meta.get('code')}) to {action}"
            after = None
        out.append({"when": e["createdAt"], "actor": name(e["actorDid"]) or "An app",
                    "words": words, "target": target, "after": after,
                    "reason": e["reason"], "app": apps.get(e["appId"]) if e["appId"] else None})
    return out


async def trusted_apps(app: "Application", community: "Row") -> list[dict[str, Any]]:
    """The apps a community trusts: the one that created it (always, for management) and
    those its admins allowed, with their name and domain."""
    from daemon.plugin.storage import AppsTable

    creator = community["creator_app_id"]
    entries: list[tuple[str, Row | None]] = [(creator, None)] if creator else []
    entries += [(r["app_id"], r) for r in await app.communities.allowed_apps(community["did"])
                if r["app_id"] != creator]
    out = []
    for app_id, granted in entries:
        found = await AppsTable.get(app.db, app_id)
        out.append({"id": app_id, "name": found["name"] if found else app_id,
                    "domain": found["domain"] if found else None,
                    "active": bool(found and found["active"]), "creator": granted is None,
                    "manage": granted is None or bool(granted["manage"]),
                    "since": granted["allowed_at"] if granted is not None else community["created_at"]})
    return out
