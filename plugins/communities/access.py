"""Who may see a community, who may act on it, and what a user is in it: the communities
plugin's rules over its own tables, published to other plugins (and to the core's event
audience) through its service (`CommunitiesService`: `may_see`, `membership`,
`sees_roster`, `acts_for_admins`, `event_audience`). Every answer comes from the local
index (SQLite), never the PDS.

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

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from daemon.plugin import APP_NOT_TRUSTED, NOT_FOUND, ROSTER_HIDDEN, AppSet, Audience, MemberStatus
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, Reader, Row

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
    roster (`app_sees_roster`: its creator app and apps granted management) hear of
    ``member.*`` events, and the others get every other event without the keys that name
    a person. A kind declared for the managers only (`managers_only`: `EventKind.audience`
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
    if managers_only or event_type.startswith("member."):
        return Audience(roster, EVERY)
    return Audience(hears, roster)


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
    row = await store.status_for_app(app.db, community_did, user_did, app_id)
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
    row = await store.get_community(app.db, did)
    app_id = getattr(principal, "app_id", None)
    if row is None:
        raise NOT_FOUND(did)
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
