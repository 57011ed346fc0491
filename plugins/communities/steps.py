"""The steps every community command is built from (membership.py, admins.py,
lifecycle.py, roles.py, bans.py, and the reconciler's kinds in reconcile.py).

Every command is a :class:`CommunityCommand` run by the core's one write path
(``app.writes.run``, daemon/atproto/writes.py): check → intent → PDS write(s) → one local
transaction (index, event, audit). Commands that rewrite a record several commands share
(``admins``, ``profile``, ``roles``) or remove a member hold the community's lock, so two
of them never compute from the same old state; the reconciler holds it too while it
settles a community's intent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Mapping, Sequence
from urllib.parse import unquote

from daemon.plugin import NOT_FOUND, Actor, MemberStatus
from daemon.plugin import ApiError, Command, Reader, Row, Transaction, is_did, pds
from plugins.communities import store as audit_store
from plugins.communities import store as communities_store
from plugins.communities import store as members_store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities")

# The kinds of write this plugin registers (reconcile.py says how each is settled).
PROOF = "communities.proof"            # join, approve: a membership proof put
REMOVE = "communities.remove"          # leave, remove: a proof deleted (and the admins record)
ADMINS = "communities.admins"          # promote, demote, transfer: the admins record put
PROFILE = "communities.profile"        # profile and image changes: the profile record put
MEMBERSHIP = "communities.membership"  # browser join, leave: the user's own membership record
CREATE = "communities.create"          # create: profile, admins and the creator's proof put
DELETE = "communities.delete"          # delete: the profile and admins records deleted


#: A DID in a path; colons may arrive percent-encoded (Tornado decodes the group).
DID = r"(did(?::|%3[Aa])[^/?#]+)"


def path_did(value: str) -> str:
    """The DID a URL path names (decoded), or 404 ``community_not_found``."""
    value = unquote(value)
    if not is_did(value):
        raise NOT_FOUND(value)
    return value


def community_lock_key(did: str) -> str:
    return f"community:{did}"


def community_lock(app: "Application", did: str) -> Any:
    """The lock held by every command that rewrites a community's shared records."""
    return app.writes.lock(community_lock_key(did))


class CommunityCommand(Command):
    """A command on one community's repo (`did`), by `actor`; it holds the community's lock
    unless it says otherwise."""

    def __init__(self, app: "Application", did: str, actor: Actor) -> None:
        self.app, self.did, self.actor = app, did, actor

    def locks(self) -> Sequence[str]:
        return [community_lock_key(self.did)]

    async def repo(self) -> Any:
        return await community_repo_for(self.app, self.did)


async def audit_tx(app: "Application", tx: Transaction, community_did: str, action: str, actor: Actor | None,
                   target_did: str | None = None, reason: str | None = None,
                   metadata: dict[str, Any] | None = None) -> None:
    if actor is not None:
        metadata = {**(metadata or {}), "actorProven": actor.proven}
    await audit_store.insert_entry_tx(
        tx, community_did=community_did, action=action, actor_did=actor.did if actor else None,
        target_did=target_did, reason=reason, metadata=metadata,
        app_id=actor.app_id if actor else None, now=app.clock.iso_now())


async def community_repo_for(app: "Application", did: str) -> Any:
    """The community account's repo client (502 rather than any other error)."""
    from daemon.atproto.accounts import community_repo
    return await pds(community_repo(app, did))


async def fetch_profile(app: "Application", did: str) -> tuple[str | None, str | None, str | None] | None:
    """(handle, displayName, avatar URL) of a user, best effort and time-bounded."""
    from daemon.atproto.identity import resolve_identity
    from daemon.atproto.pds import read_user_profile

    timeout = app.config.plugin("communities").profile_fetch_timeout_seconds

    async def both() -> tuple[str | None, str | None, str | None]:
        info = await resolve_identity(app, did)
        profile = None
        try:
            profile = await read_user_profile(app, did)
        except Exception as exc:  # noqa: BLE001
            log.info("no profile for %s: %s", did, exc)
        profile = profile or {}
        return info.handle, profile.get("displayName"), profile.get("avatar")

    try:
        return await asyncio.wait_for(both(), timeout)
    except Exception as exc:  # noqa: BLE001 (best effort: the member list shows the DID)
        log.info("could not fetch the profile of %s: %r", did, exc)
        return None


def let_finish(task: "asyncio.Future[Any]") -> None:
    """Leave an unneeded profile fetch to finish on its own (it is time-bounded) rather than
    cancel it: a cancel landing while it caches an identity in a transaction could leave the
    writer connection inside that transaction (see the report on store/db.py)."""
    if not task.done():
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def store_profile_tx(app: "Application", tx: Transaction, did: str,
                           profile: tuple[str | None, str | None, str | None] | None) -> None:
    if profile is not None:
        await members_store.upsert_profile_tx(tx, did, *profile, app.clock.iso_now())


async def require_person(app: "Application", did: str, field: str) -> None:
    """`did` names a real person before it is written to the PDS or the index: a strict
    did:plc / did:web whose document resolves (cached; 400 ``invalid_request`` /
    ``unsupported_did`` / ``unknown_did``, 502 if the directory cannot be reached)."""
    from daemon.atproto.identity import require_known_did
    await require_known_did(app, did, field)


class Banned(ApiError):
    """403 ``banned``; the body carries ``expiresAt`` (null: until lifted)."""

    def __init__(self, ban: Row) -> None:
        until = f" until {ban['expires_at']}" if ban["expires_at"] else ""
        super().__init__(403, "banned", f"This user is banned from the community{until}.")
        self.expires_at = ban["expires_at"]

    def body(self) -> dict[str, Any]:
        return {**super().body(), "expiresAt": self.expires_at}


async def refuse_banned(app: "Application", community_did: str, user_did: str) -> None:
    """403 ``banned`` if a ban on `user_did` is in force (joins, requests, invites; the bans
    themselves are bans.py's)."""
    ban = await members_store.active_ban(app.db, community_did, user_did, app.clock.iso_now())
    if ban is not None:
        raise Banned(ban)


async def banned_tx(app: "Application", tx: Transaction, community_did: str, user_did: str) -> ApiError | None:
    """The refusal, if a ban is in force, read inside an admission's own transaction (a ban
    that committed after the admission's first check still holds)."""
    ban = await members_store.active_ban(tx, community_did, user_did, app.clock.iso_now())
    return Banned(ban) if ban is not None else None


def require_role(status: MemberStatus, *, admin: bool = False, primary: bool = False) -> None:
    if primary and not status.is_primary:
        raise ApiError(403, "not_primary_admin", "Only the primary admin may do this.")
    if admin and not status.is_admin:
        raise ApiError(403, "not_admin", "Only an admin of this community may do this.")


async def active_tx(tx: Transaction, did: str) -> Row:
    row = await communities_store.get_community(tx, did)
    if row is None or row["state"] != "active":
        raise NOT_FOUND(did)
    return row


async def admins_list(db: Reader, community_did: str) -> list[tuple[str, str]]:
    """The admins as (did, addedAt), primary first."""
    return [(r["member_did"], r["admin_since"]) for r in await members_store.admins(db, community_did)]


# ------------------------------------------------------------------ the records
# What this plugin writes to repos, in exactly the shapes of lexicons/*.json.


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


def membership_record(community_did: str, joined_at: str) -> dict[str, Any]:
    """`<ns>.membership` (rkey TID) in the user's own repo."""
    return {"community": community_did, "joinedAt": joined_at}
