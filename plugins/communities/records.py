"""The records this plugin writes, in exactly the shapes of lexicons/*.json."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application


def nsid(app: "Application", name: str) -> str:
    """``profile`` -> ``community.commonroom.profile`` (the configured namespace)."""
    return f"{app.config.atproto.namespace}.{name}"


def blob_ref(cid: str, mime: str, size: int) -> dict[str, Any]:
    return {"$type": "blob", "ref": {"$link": cid}, "mimeType": mime, "size": int(size)}


def profile_record(row: Mapping[str, Any], *, created_at: str,
                   updated_at: str | None = None) -> dict[str, Any]:
    """`<ns>.profile` (rkey self) from an index row as a dict (display_name, description,
    type, avatar_cid/mime/size, banner_cid/mime/size)."""
    out: dict[str, Any] = {"displayName": row["display_name"], "type": row["type"],
                           "createdAt": created_at}
    if row.get("description"):
        out["description"] = row["description"]
    for image in ("avatar", "banner"):
        if row.get(f"{image}_cid"):
            out[image] = blob_ref(row[f"{image}_cid"], row.get(f"{image}_mime") or "image/png",
                                  row.get(f"{image}_size") or 0)
    if updated_at:
        out["updatedAt"] = updated_at
    return out


def admins_record(admins: Sequence[tuple[str, str]], updated_at: str) -> dict[str, Any]:
    """`<ns>.admins` (rkey self): index 0 is the primary admin."""
    return {"admins": [{"did": did, "addedAt": added} for did, added in admins],
            "updatedAt": updated_at}


def membership_proof(member_did: str, confirmed_at: str, membership_uri: str | None = None,
                     membership_cid: str | None = None) -> dict[str, Any]:
    """`<ns>.membershipProof` (rkey TID) in the community's repo."""
    out: dict[str, Any] = {"memberDid": member_did, "confirmedAt": confirmed_at}
    if membership_uri:
        out["membershipUri"] = membership_uri
    if membership_cid:
        out["cid"] = membership_cid
    return out


def membership(community_did: str, joined_at: str) -> dict[str, Any]:
    """`<ns>.membership` (rkey TID) in the user's own repo."""
    return {"community": community_did, "joinedAt": joined_at}
