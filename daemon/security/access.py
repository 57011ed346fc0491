"""Who may see a community, who may act on it, and what a user is in it: a core service,
since the communities, records and webhook plugins all need it (plugins never import
each other). Every answer comes from the local index (SQLite), never the PDS.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, NamedTuple

from daemon.base.types import ApiError
from store import communities as communities_store
from store import members as members_store
from store.db import Reader, Row

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

__all__ = ["Actor", "MemberStatus", "NOBODY", "status_from_row", "member_status", "app_can_see",
           "AppSet", "Audience", "EVERY_APP", "NO_APP", "event_audience",
           "require_community", "checked_status", "NOT_FOUND", "APP_NOT_TRUSTED", "app_manages",
           "require_manager", "app_sees_roster", "event_data_for", "ROSTER_HIDDEN"]


@dataclass(frozen=True)
class Actor:
    """Who acts: the user (asserted by an app, or the session user) and the app, if any."""

    did: str
    app_id: str | None = None
    #: The user is proven: a browser session, or a verified proof from the app (daemon/atproto/proofs.py).
    proven: bool = False


class MemberStatus(NamedTuple):
    """What a user is in a community (a tuple: one is made per membership/check)."""

    is_member: bool
    is_admin: bool
    is_pending: bool
    is_primary: bool
    #: The roles assigned to the member (`moderator`, custom roles), as stored.
    roles: tuple[str, ...] = ()
    #: What those roles grant: catalogue capabilities, `records.*` as `records.create:<collection>`.
    grants: frozenset[str] = frozenset()

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"isMember": self.is_member, "isAdmin": self.is_admin,
                               "isPending": self.is_pending}
        if self.roles:
            out["roles"] = list(self.roles)
        return out

    def holds(self, capability: str, collection: str | None = None) -> bool:
        """Whether the member may do what `capability` allows (on `collection`, for the
        per-collection ``records.*``): admins hold every capability, others what their roles
        grant (docs/communities.md, "Roles and capabilities")."""
        if not self.is_member:
            return False
        if self.is_admin:
            return True
        return (f"{capability}:{collection}" if collection else capability) in self.grants


NOBODY = MemberStatus(False, False, False, False)


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
    return status_from_row(await members_store.status(db, community_did, user_did))


def _visible(row: Row, app_id: str | None, allowed: bool) -> bool:
    if row["state"] != "active":
        return False
    if row["type"] != "private" or app_id is None:
        return True
    return row["creator_app_id"] == app_id or allowed


async def app_can_see(db: Reader, community_did: str, app_id: str | None) -> bool:
    """Whether `app_id` (None: no app, i.e. the service's own browser routes) may see the
    community at all. False for unknown communities."""
    row = await communities_store.get_community(db, community_did)
    if row is None:
        return False
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await communities_store.app_allowed(db, community_did, app_id))
    return _visible(row, app_id, allowed)


# ------------------------------------------------------------------ who hears of an event


@dataclass(frozen=True)
class AppSet:
    """Every app, or only those in `apps`."""

    everyone: bool
    apps: frozenset[str] = frozenset()

    def has(self, app_id: str | None) -> bool:
        return self.everyone or (app_id is not None and app_id in self.apps)

    def stored(self) -> str:
        """The form kept in ``events.audience`` and ``events.people``
        (store/migrations/0005_event_audience.sql)."""
        if self.everyone:
            return "*"
        return f" {' '.join(sorted(self.apps))} " if self.apps else ""

    @classmethod
    def from_stored(cls, text: str | None) -> "AppSet":
        if text == "*":
            return EVERY
        return cls(False, frozenset((text or "").split()))


EVERY = AppSet(True)
NONE = AppSet(False)


@dataclass(frozen=True)
class Audience:
    """Who may hear of an event (`hears`), and who of them may see the people its data
    names (`people`): the others get the data without `PERSON_KEYS` (`event_data_for`)."""

    hears: AppSet
    people: AppSet = EVERY

    def admits(self, app_id: str | None) -> bool:
        return self.hears.has(app_id)

    def shows_people_to(self, app_id: str | None) -> bool:
        return self.people.has(app_id)

    @classmethod
    def from_stored(cls, hears: str | None, people: str | None = "*") -> "Audience":
        return cls(AppSet.from_stored(hears), AppSet.from_stored(people))


EVERY_APP = Audience(EVERY)
NO_APP = Audience(NONE)


async def event_audience(db: Reader, community_did: str | None, caused_by_app: str | None,
                         event_type: str, *, managers_only: bool = False) -> Audience:
    """Which apps may hear of an event, and which of them may see the people it names,
    decided once in the transaction that records it (`daemon.runtime.events.emit_tx`) and
    kept with it: webhook fan-out and the event stream both obey it, so what an app hears
    "as of the event's commit" is the same on every way out.

    An event in a community reaches the apps that may see that community (`app_can_see`);
    one outside any community only the app that caused it. Where the community hides its
    roster (``rosterVisibility`` ``members`` or ``admins``), only the apps that see the
    roster (`app_sees_roster`: its creator app and apps granted management) hear of
    ``member.*`` events, and the others get every other event without the keys that name
    a person. A kind declared for the managers only (`managers_only`: `EventKind.audience`
    ``"managers"``) reaches only the apps that act for the admins, whole."""
    if community_did is None:
        return Audience(AppSet(False, frozenset({caused_by_app}))) if caused_by_app else NO_APP
    row = await communities_store.get_community(db, community_did)
    if row is None or row["state"] != "active":
        return NO_APP
    if row["type"] != "private":
        hears = EVERY
    else:
        apps = set(await communities_store.allowed_app_ids(db, community_did))
        if row["creator_app_id"]:
            apps.add(row["creator_app_id"])
        hears = AppSet(False, frozenset(apps))
    if row["roster_visibility"] == "public" and not managers_only:
        return Audience(hears)
    managers = set(await communities_store.managing_app_ids(db, community_did))
    if row["creator_app_id"]:
        managers.add(row["creator_app_id"])
    if not hears.everyone:
        managers &= hears.apps
    roster = AppSet(False, frozenset(managers))
    if managers_only or event_type.startswith("member."):
        return Audience(roster, EVERY)
    return Audience(hears, roster)


def NOT_FOUND(did: str) -> ApiError:  # noqa: N802 (reads like a constant at call sites)
    return ApiError(404, "community_not_found", f"No community {did} here.")


async def checked_status(app: "Application", community_did: str, user_did: str, principal: Any,
                         proves_user: Callable[[], Awaitable[bool]] | None = None) -> MemberStatus:
    """`require_community` and `member_status` in one indexed query (membership/check).

    Where the community hides its roster (``rosterVisibility`` ``members`` or ``admins``)
    from the principal's app (`app_sees_roster`: it neither created the community nor was
    granted management), the answer would tell the app who the members are, so it is given
    only when the request proves it acts for `user_did` himself: `proves_user` (the
    handler's check of the user's service-auth token, docs/identity.md) returns True.
    Otherwise 403 ``roster_hidden``."""
    app_id = getattr(principal, "app_id", None)
    row = await members_store.status_for_app(app.db, community_did, user_did, app_id)
    if row is None or not _visible(row, app_id, bool(row["app_allowed"])):
        raise NOT_FOUND(community_did)
    if row["roster_visibility"] != "public" and app_id is not None and row["creator_app_id"] != app_id \
            and not row["app_manages"]:
        if proves_user is None or not await proves_user():
            raise ROSTER_HIDDEN(community_did)
    return status_from_row(row)


async def require_community(app: "Application", did: str, principal: Any) -> Row:
    """The community's index row, or 404 ``community_not_found`` if it is unknown, deleted,
    still being created, or private and not visible to the principal's app."""
    row = await communities_store.get_community(app.db, did)
    app_id = getattr(principal, "app_id", None)
    if row is None:
        raise NOT_FOUND(did)
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await communities_store.app_allowed(app.db, did, app_id))
    if not _visible(row, app_id, allowed):
        raise NOT_FOUND(did)
    return row


# ------------------------------------------------------------------ management (trust model)
#
# An app names the acting admin (`adminDid`, `currentOwnerDid`) and this service believes it,
# but only for the apps the community trusts: its creator app, and the apps an admin granted
# management (`community_apps.manage`). Browser sessions (app_id None) act as themselves.


def APP_NOT_TRUSTED(did: str, app_id: str) -> ApiError:  # noqa: N802
    return ApiError(403, "app_not_trusted",
                    f"App {app_id} may not act for the admins of {did}: only the app that created the "
                    "community and apps an admin granted management may. An admin can grant it on "
                    "this service (POST /communities/:did/apps/:appId with {\"manage\": true}).")


async def app_manages(db: Reader, row: Row, app_id: str | None) -> bool:
    """Whether `app_id` may act for the community's admins (None: a browser session: yes)."""
    if app_id is None or row["creator_app_id"] == app_id:
        return True
    return await communities_store.app_manages(db, row["did"], app_id)


async def app_manages_community(db: Reader, community_did: str, app_id: str | None) -> bool:
    """`app_manages` by the community's DID (False for an unknown community)."""
    row = await communities_store.get_community(db, community_did)
    return row is not None and await app_manages(db, row, app_id)


async def require_manager(db: Reader, row: Row, app_id: str | None) -> None:
    """403 `app_not_trusted` unless `app_id` may act for the community's admins."""
    if not await app_manages(db, row, app_id):
        raise APP_NOT_TRUSTED(row["did"], app_id or "-")


# ------------------------------------------------------------------ the roster (who the members are)


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
    row = await communities_store.get_community(db, community_did)
    if row is None:
        return False
    allowed = (row["type"] == "private" and app_id is not None and row["creator_app_id"] != app_id
               and await communities_store.app_allowed(db, community_did, app_id))
    if not _visible(row, app_id, allowed):
        return False
    if row["roster_visibility"] == "public":
        return True
    return await app_manages(db, row, app_id)


#: Keys of an event's data that name a person (the member, the writer, the moderator).
PERSON_KEYS = frozenset({"memberDid", "userDid", "authorDid", "actorDid", "approvedBy", "rejectedBy",
                         "removedBy", "bannedBy", "unbannedBy", "updatedBy"})


def event_data_for(event_type: str, data: dict[str, Any], *, sees_roster: bool) -> dict[str, Any] | None:
    """An event's data as an app receives it, given `app_sees_roster` for the app and the
    event's community: all of it if the app sees the roster; otherwise None (not sent at
    all) for ``member.*`` events, which exist to say who joined or left, and for any other
    event the data without the keys that name a person (`PERSON_KEYS`: a record event
    keeps its collection, rkey, uri and cid and loses ``userDid``)."""
    if sees_roster:
        return dict(data)
    if event_type.startswith("member."):
        return None
    return {k: v for k, v in data.items() if k not in PERSON_KEYS}


def ROSTER_HIDDEN(did: str) -> ApiError:  # noqa: N802 (reads like a constant at call sites)
    return ApiError(403, "roster_hidden",
                    f"The members of {did} are hidden from this app (rosterVisibility): it may ask about a "
                    "user only with that user's service-auth token (docs/identity.md), unless the community "
                    "trusts it to act for its admins.")
