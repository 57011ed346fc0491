"""JSON shapes of communities, members and audit entries (camelCase, as the reference
service answers where that is sensible)."""

from __future__ import annotations

import json
from typing import Any

from plugins.communities.steps import MemberStatus
from daemon.plugin import Row
from daemon.plugin.atproto import blob_url


def image_url(row: Row, image: str) -> str | None:
    """The URL of a community's ``avatar`` or ``banner``, from its index row (the
    ``<image>_cid``, ``pds_url`` and ``did`` columns), or None when it has none."""
    cid = row[f"{image}_cid"]
    return blob_url(row["pds_url"], row["did"], cid) if cid else None


def community_summary(row: Row) -> dict[str, Any]:
    """A list/search result. `row` may carry `user_admin_rank`/`user_member_id` (relative
    to the userDid asked about)."""
    keys = row.keys()
    out = {
        "did": row["did"],
        "handle": row["handle"],
        "displayName": row["display_name"],
        "description": row["description"],
        "avatar": image_url(row, "avatar"),
        "type": row["type"],
        "memberCount": row["member_count"],
        "createdAt": row["created_at"],
    }
    if "user_member_id" in keys:
        out["isAdmin"] = row["user_admin_rank"] is not None
        out["isMember"] = row["user_member_id"] is not None
    return out


def community_details(row: Row, admins: list[Row], status: MemberStatus | None,
                      *, restricted: bool = False) -> dict[str, Any]:
    """Details. `restricted`: a private community seen by a non-member: name and type only."""
    if restricted:
        community = {"did": row["did"], "handle": row["handle"], "displayName": row["display_name"],
                     "avatar": image_url(row, "avatar"), "type": row["type"], "restricted": True}
    else:
        community = {
            **community_summary(row),
            "banner": image_url(row, "banner"),
            "admins": [{"did": a["member_did"], "addedAt": a["admin_since"],
                        "isPrimary": a["admin_rank"] == 0} for a in admins],
            "primaryAdmin": admins[0]["member_did"] if admins else None,
            "requireUserProof": bool(row["require_user_proof"]),
            "updatedAt": row["updated_at"],
        }
        if status is not None and status.is_admin:
            community["pendingCount"] = row["pending_count"]
            community["rosterVisibility"] = row["roster_visibility"]
            community["listed"] = bool(row["listed"])
    out: dict[str, Any] = {"community": community}
    if status is not None:
        out["isAdmin"] = status.is_admin
        out["membership"] = {**status.json(), "isPrimaryAdmin": status.is_primary}
    return out


def member_json(row: Row, *, admin_view: bool) -> dict[str, Any]:
    out = {
        "did": row["member_did"],
        "handle": row["handle"],
        "displayName": row["display_name"],
        "avatar": row["avatar_url"],
        "isAdmin": row["admin_rank"] is not None,
        "isPrimaryAdmin": row["admin_rank"] == 0,
        "confirmedAt": row["confirmed_at"],
        "roles": (["admin", "member"] if row["admin_rank"] is not None else ["member"])
                 + (row["roles"].split() if "roles" in row.keys() and row["roles"] else []),
    }
    if admin_view:
        out["membershipUri"] = row["membership_uri"]
        out["appId"] = row["app_id"]
    return out


def request_json(row: Row) -> dict[str, Any]:
    return {"userDid": row["member_did"], "did": row["member_did"], "handle": row["handle"],
            "displayName": row["display_name"], "avatar": row["avatar_url"],
            "requestedAt": row["requested_at"], "appId": row["app_id"]}


def audit_json(row: Row) -> dict[str, Any]:
    metadata = json.loads(row["metadata"] or "{}")
    # Whether the actor was proven (a browser session, or an app's verified proof);
    # false for entries without an actor and those written before proofs existed.
    proven = bool(metadata.pop("actorProven", False))
    # "denied": a refused admin or moderator action (denials.py); "done" otherwise
    outcome = metadata.pop("outcome", "done")
    return {"id": row["id"], "action": row["action"], "outcome": outcome, "actorDid": row["actor_did"],
            "adminDid": row["actor_did"], "actorProven": proven, "targetDid": row["target_did"],
            "reason": row["reason"], "metadata": metadata, "appId": row["app_id"],
            "createdAt": row["created_at"]}


def membership_json(row: Row) -> dict[str, Any]:
    """An entry of GET /users/me/memberships (reference shape plus role/status)."""
    return {
        "uri": row["membership_uri"], "cid": row["membership_cid"], "communityDid": row["did"],
        "joinedAt": row["confirmed_at"], "role": "admin" if row["admin_rank"] is not None else "member",
        "isPrimaryAdmin": row["admin_rank"] == 0, "status": "member",
        "community": {"did": row["did"], "handle": row["handle"], "displayName": row["display_name"],
                      "description": row["description"], "avatar": image_url(row, "avatar"),
                      "type": row["type"], "memberCount": row["member_count"]},
    }
