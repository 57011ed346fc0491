"""The communities plugin's rules, and the steps every community command is built from
(membership.py, admins.py, lifecycle.py, roles.py, bans.py, and the reconciler's kinds in
reconcile.py).

The rules ("who may see and act", below): who may see a community, who may act on it, and
what a user is in it, over the plugin's own tables, published to other plugins (and to the
core's event audience) through its service (`CommunitiesService`: `may_see`, `membership`,
`sees_roster`, `acts_for_admins`, `event_audience`); a ban in force (`refuse_banned`,
`banned_tx`) and an admin's role (`require_role`) are checked here too. Every answer comes
from the local index (SQLite), never the PDS.

Visibility rules:

* ``open`` and ``admin-approved`` communities are visible to every app;
* a ``private`` community is visible to the app that created it and to the apps its
  admins allowed (``POST /api/v1/communities/:did/apps/:appId``). Requests without an
  app (browser sessions on this service's own web app, ``app_id=None``) see it too;
  their member-level gating is up to the route.

A community whose creation has not finished is invisible (treated as unknown).

The roster (who the members are) has its own rule, `app_sees_roster`, which every way a
member's DID leaves the service without a user to answer for asks: webhook and event
fan-out (`event_data_for`), the records' ``authorDid``, and ``membership/check`` for a
user the request does not prove it acts for (docs/communities.md, "Visibility").

The steps: every command is a :class:`CommunityCommand` run by the core's one write path
(``app.writes.run``, daemon/atproto/writes.py): check → intent → PDS write(s) → one local
transaction (index, event, audit). Commands that rewrite a record several commands share
(``admins``, ``profile``, ``roles``) or remove a member hold the community's lock, so two
of them never compute from the same old state; the reconciler holds it too while it
settles a community's intent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence
from urllib.parse import unquote

from daemon.plugin import Actor, MemberStatus
from daemon.plugin.events import AppSet, Audience
from daemon.plugin.http import APP_NOT_TRUSTED, NOT_FOUND, ROSTER_HIDDEN
from daemon.plugin import ApiError, Reader, Row, Transaction, is_did
from daemon.plugin.atproto import Command, pds
from daemon.plugin import Visibility
from plugins.communities import store

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
    await store.insert_entry_tx(
        tx, community_did=community_did, action=action, actor_did=actor.did if actor else None,
        target_did=target_did, reason=reason, metadata=metadata,
        app_id=actor.app_id if actor else None, now=app.clock.iso_now())


async def community_repo_for(app: "Application", did: str) -> Any:
    """The community account's repo client (502 rather than any other error)."""
    from daemon.plugin.atproto import community_repo
    return await pds(community_repo(app, did))


async def fetch_profile(app: "Application", did: str) -> tuple[str | None, str | None, str | None] | None:
    """(handle, displayName, avatar URL) of a user, best effort and time-bounded."""
    from daemon.plugin.atproto import read_user_profile, resolve_identity

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
        await store.upsert_profile_tx(tx, did, *profile, app.clock.iso_now())


async def require_person(app: "Application", did: str, field: str) -> None:
    """`did` names a real person before it is written to the PDS or the index: a strict
    did:plc / did:web whose document resolves (cached; 400 ``invalid_request`` /
    ``unsupported_did`` / ``unknown_did``, 502 if the directory cannot be reached)."""
    from daemon.plugin.atproto import require_known_did
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
    ban = await store.active_ban(app.db, community_did, user_did, app.clock.iso_now())
    if ban is not None:
        raise Banned(ban)


async def banned_tx(app: "Application", tx: Transaction, community_did: str, user_did: str) -> ApiError | None:
    """The refusal, if a ban is in force, read inside an admission's own transaction (a ban
    that committed after the admission's first check still holds)."""
    ban = await store.active_ban(tx, community_did, user_did, app.clock.iso_now())
    return Banned(ban) if ban is not None else None


def require_role(status: MemberStatus, *, admin: bool = False, primary: bool = False) -> None:
    if primary and not status.is_primary:
        raise ApiError(403, "not_primary_admin", "Only the primary admin may do this.")
    if admin and not status.is_admin:
        raise ApiError(403, "not_admin", "Only an admin of this community may do this.")


async def gone(reader: Reader, did: str) -> ApiError:
    """404 ``community_not_found``, or 410 ``community_moved`` naming where a community
    handed over to another Commonroom went (plugins/communities/handover.py)."""
    moved = await reader.fetchone("SELECT * FROM community_handovers WHERE did = ?", (did,))
    if moved is None:
        return NOT_FOUND(did)
    where = moved["moved_to"] or None  # empty: its primary admin did not say
    said = (f"it was handed over to {where} on {moved['handed_over_at'][:10]}. Use it there." if where else
            f"it was handed over to another Commonroom on {moved['handed_over_at'][:10]} (its primary "
            "admin did not say which). Ask its admins where it went.")
    return ApiError(410, "community_moved", f"{moved['display_name']} left this instance: {said}",
                    details={"movedTo": where, "handedOverAt": moved["handed_over_at"]})


async def active_tx(tx: Transaction, did: str) -> Row:
    row = await store.get_community(tx, did)
    if row is None:
        raise await gone(tx, did)
    if row["state"] != "active":
        raise NOT_FOUND(did)
    return row


async def admins_list(db: Reader, community_did: str) -> list[tuple[str, str]]:
    """The admins as (did, addedAt), primary first."""
    return [(r["member_did"], r["admin_since"]) for r in await store.admins(db, community_did)]


# ------------------------------------------------------------------ who may see and act
# The rules of the module doc: visibility, what a user is in a community, management, the
# roster, an event's audience. Published through the service (public.py).

NOBODY = MemberStatus(False, False, False, False)
EVERY = AppSet(True)
NO_APP = Audience(AppSet(False))


def status_from_row(row: Row | None) -> MemberStatus:
    if row is None or row["state"] != "active":
        return NOBODY
    rank = row["admin_rank"]
    roles = row["roles"]
    if not roles:  # most members: no role, nothing to parse (membership/check is hot)
        return MemberStatus(row["member_id"] is not None, rank is not None, bool(row["pending"]), rank == 0)
    grants = row["grants"]
    return MemberStatus(row["member_id"] is not None, rank is not None, bool(row["pending"]), rank == 0,
                        tuple(roles.split()), frozenset(grants.split()) if grants else frozenset())


async def member_status(db: Reader, community_did: str, user_did: str) -> MemberStatus:
    """What `user_did` is in the community (all False if the community is unknown); `db`:
    ``app.db``, or the transaction a command checks in."""
    return status_from_row(await store.status(db, community_did, user_did))


def _visible(row: Row, app_id: str | None, allowed: bool) -> bool:
    if row["state"] != "active":
        return False
    if row["type"] != "private" or app_id is None:
        return True
    return row["creator_app_id"] == app_id or allowed


def roster_visible(row: Row, status: MemberStatus | None, *, as_admin: bool = True) -> bool:
    """Whether a viewer with `status` may list the members (`rosterVisibility`, and a
    private community's members-only rule)."""
    if row["roster_visibility"] == "admins":
        return bool(as_admin and status and status.is_admin)
    if row["roster_visibility"] == "members" or row["type"] == "private":
        return bool(status and status.is_member)
    return True


NOTHING = MemberStatus(False, False, False, False)


async def visibility(db: Reader, row: Row | None, viewer: str | None, app_id: str | None, *,
                     proven: bool | None = None, as_admin: bool = True) -> Visibility:
    """What `viewer` (None: signed out) may see of the community `row` through `app_id`
    (None: the site's pages): the one rule behind `CommunitiesService.visibility`, `may_see`,
    `details`, the member lists of the API and the pages. A viewer an app names without
    proof (`proven` False, the default with an app) is any DID the app chose: where the
    roster is hidden, the members show through such a viewer only to the apps that see the
    roster anyway (`app_sees_roster`), as the API's member list requires a proof."""
    if row is None:
        return Visibility(False, False, False, NOTHING)
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await store.app_allowed(db, row["did"], app_id))
    status = await member_status(db, row["did"], viewer) if viewer else NOTHING
    if not _visible(row, app_id, allowed):
        return Visibility(False, False, False, status)
    records = row["type"] != "private" or status.is_member
    if app_id is None:
        members = roster_visible(row, status, as_admin=as_admin)
    else:  # the app's own right (`app_sees_roster`), or a person it proved it acts for
        members = (row["roster_visibility"] == "public" or await app_manages(db, row, app_id)
                   or (bool(proven) and roster_visible(row, status, as_admin=as_admin)))
    return Visibility(True, records, members, status)


async def app_can_see(db: Reader, community_did: str, app_id: str | None) -> bool:
    """Whether `app_id` (None: no app, i.e. the service's own browser routes) may see the
    community at all. False for unknown communities."""
    row = await store.get_community(db, community_did)
    if row is None:
        return False
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await store.app_allowed(db, community_did, app_id))
    return _visible(row, app_id, allowed)


async def event_audience(db: Reader, community_did: str | None, caused_by_app: str | None,
                         event_type: str, *, managers_only: bool = False) -> Audience:
    """Which apps may hear of an event, and which of them may see the people it names,
    decided once in the transaction that records it (`daemon.runtime.events.emit_tx`) and
    kept with it: webhook fan-out and the event stream both obey it, so what an app hears
    "as of the event's commit" is the same on every way out.

    An event in a community reaches the apps that may see that community (`app_can_see`);
    one outside any community only the app that caused it. Where the community hides its
    roster (``rosterVisibility`` ``members`` or ``admins``), only the apps that see the
    roster (`app_sees_roster`: its creator app and apps granted management) see the people
    an event names: the others get it without the keys that name a person, and none of a
    kind `about_people` (``member.*``: the core narrows those, `decide_audience`). A kind declared for the managers only (`managers_only`: `EventKind.audience`
    ``"managers"``) reaches only the apps that act for the admins, whole."""
    if community_did is None:  # the core decides these itself (`decide_audience`)
        return Audience(AppSet(False, frozenset({caused_by_app}))) if caused_by_app else NO_APP
    row = await store.get_community(db, community_did)
    if row is None or row["state"] != "active":
        return NO_APP
    if row["type"] != "private":
        hears = EVERY
    else:
        apps = set(await store.allowed_app_ids(db, community_did))
        if row["creator_app_id"]:
            apps.add(row["creator_app_id"])
        hears = AppSet(False, frozenset(apps))
    if row["roster_visibility"] == "public" and not managers_only:
        return Audience(hears)
    managers = set(await store.managing_app_ids(db, community_did))
    if row["creator_app_id"]:
        managers.add(row["creator_app_id"])
    if not hears.everyone:
        managers &= hears.apps
    roster = AppSet(False, frozenset(managers))
    if managers_only:
        return Audience(roster, EVERY)
    return Audience(hears, roster)


#: How many users' statuses `checked_status` keeps per application (each a small tuple):
#: when full, the cache starts afresh.
CHECKED_STATUSES_CACHED = 1024
_UNKNOWN = ()  # a cached "no such community"


class CheckCache:
    """What membership/check has read since this daemon's last commit (`Communities.check_cache`):
    two `VersionedCache`s, so never stale for this daemon's own writes (emptied by every
    commit before its caller resumes) and at most a second for another process's (the
    operator CLI). The community's part (its state, type, roster visibility and the asking
    app's grants) is the same for every user and is kept per community and app; the user's
    part (a `MemberStatus`) per community and user. Values are plain tuples, not SQLite
    rows: a check whose user is not cached runs one small query and keeps no row object."""

    def __init__(self) -> None:
        import time  # real time, as `Database`'s own caches: another process's writes are real
        from daemon.plugin.storage import VersionedCache
        self.communities = VersionedCache(time, max_entries=CHECKED_STATUSES_CACHED)
        self.statuses = VersionedCache(time, max_entries=CHECKED_STATUSES_CACHED)


async def checked_status(app: "Application", community_did: str, user_did: str, principal: Any,
                         proves_user: Callable[[], Awaitable[bool]] | None = None) -> MemberStatus:
    """`require_community` and `member_status` in two indexed reads (membership/check),
    each answered from `CheckCache` between two commits.

    Where the community hides its roster (``rosterVisibility`` ``members`` or ``admins``)
    from the principal's app (`app_sees_roster`: it neither created the community nor was
    granted management), the answer would tell the app who the members are, so it is given
    only when the request proves it acts for `user_did` himself: `proves_user` (the
    handler's check of the user's service-auth token, docs/identity.md) returns True.
    Otherwise 403 ``roster_hidden``."""
    app_id = getattr(principal, "app_id", None)
    db = app.db
    cache: CheckCache = app.communities.check_cache
    communities = cache.communities
    version = communities.version(db)
    key = (community_did, app_id)
    community = communities.get(version, key)
    if community is None:
        row = await store.community_for_app(db, community_did, app_id)
        community = _UNKNOWN if row is None else tuple(row)
        communities.put(version, key, community)
    if not community:
        raise await gone(db, community_did)  # 404, or 410 naming where a handed-over one went
    state, kind, creator_app_id, roster_visibility, allowed, manages = community
    if state != "active" or (kind == "private" and app_id is not None and creator_app_id != app_id
                             and not allowed):
        raise NOT_FOUND(community_did)
    if roster_visibility != "public" and app_id is not None and creator_app_id != app_id and not manages:
        if proves_user is None or not await proves_user():
            raise ROSTER_HIDDEN(community_did)
    statuses = cache.statuses
    version = statuses.version(db)
    key = (community_did, user_did)
    status = statuses.get(version, key)
    if status is None:
        status = _status_of(await store.member_row(db, community_did, user_did))
        statuses.put(version, key, status)
    return status


def _status_of(row: Row) -> MemberStatus:
    """`status_from_row` for `store.member_row`'s row (the community is known and active)."""
    member_id, rank, roles, grants, pending = row
    if not roles:  # most members: no role, nothing to parse
        return MemberStatus(member_id is not None, rank is not None, bool(pending), rank == 0)
    return MemberStatus(member_id is not None, rank is not None, bool(pending), rank == 0,
                        tuple(roles.split()), frozenset(grants.split()) if grants else frozenset())


async def require_community(app: "Application", did: str, principal: Any) -> Row:
    """The community's index row, or 404 ``community_not_found`` if it is unknown, deleted,
    still being created, or private and not visible to the principal's app."""
    row = await store.get_community(app.db, did)
    app_id = getattr(principal, "app_id", None)
    if row is None:
        raise await gone(app.db, did)
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await store.app_allowed(app.db, did, app_id))
    if not _visible(row, app_id, allowed):
        raise NOT_FOUND(did)
    return row


async def app_manages(db: Reader, row: Row, app_id: str | None) -> bool:
    """Whether `app_id` may act for the community's admins (None: a browser session: yes)."""
    if app_id is None or row["creator_app_id"] == app_id:
        return True
    return await store.app_manages(db, row["did"], app_id)


async def app_manages_community(db: Reader, community_did: str, app_id: str | None) -> bool:
    """`app_manages` by the community's DID (False for an unknown community)."""
    row = await store.get_community(db, community_did)
    return row is not None and await app_manages(db, row, app_id)


async def require_manager(db: Reader, row: Row, app_id: str | None) -> None:
    """403 `app_not_trusted` unless `app_id` may act for the community's admins."""
    if not await app_manages(db, row, app_id):
        raise APP_NOT_TRUSTED(row["did"], app_id or "-")


async def app_sees_roster(db: Reader, community_did: str, app_id: str | None) -> bool:
    """Whether `app_id` may learn who the community's members are without a user it proves
    it acts for: the one rule for member events (webhooks and the event stream, both through `event_audience`), records'
    ``authorDid`` and ``membership/check`` (docs/communities.md, "Visibility"), by
    ``rosterVisibility``:

    * ``public``: every app that may see the community (`app_can_see`);
    * ``members``, ``admins``: only the apps the community trusts to act for its admins, its
      creator app and apps an admin granted management (`app_manages`), since they already
      see every member list an admin sees.

    False for an unknown or invisible community. ``app_id`` None (the service's own browser
    routes) is True: those routes check their signed-in viewer themselves."""
    row = await store.get_community(db, community_did)
    if row is None:
        return False
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await store.app_allowed(db, community_did, app_id))
    if not _visible(row, app_id, allowed):
        return False
    if row["roster_visibility"] == "public":
        return True
    return await app_manages(db, row, app_id)


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
