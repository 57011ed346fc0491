"""Domain events: written to the outbox in the transaction of the change, observed by
plugins inside that transaction (`cr_event_tx`) and after it commits (`cr_event`)."""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from daemon.runtime.declarations import EventKind, event_data_for  # noqa: F401 (re-exported)
from store.db import Reader, Row, Transaction, narrowed

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger(__name__)

#: The event kinds of the spec (section 6). Plugins may emit others with their own prefix.
EVENT_TYPES = (
    "member.joined", "member.left", "member.approved", "member.rejected", "member.removed",
    "member.banned", "member.unbanned", "member.roles_changed",
    "record.created", "record.updated", "record.deleted",
)


# ------------------------------------------------------------------ who hears of an event


@dataclass(frozen=True)
class AppSet:
    """Every app, or only those in `apps`."""

    everyone: bool
    apps: frozenset[str] = frozenset()

    def has(self, app_id: str | None) -> bool:
        return self.everyone or (app_id is not None and app_id in self.apps)

    def __and__(self, other: "AppSet") -> "AppSet":
        if self.everyone:
            return other
        if other.everyone:
            return self
        return AppSet(False, self.apps & other.apps)

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
    names (`people`): the others get the data without the keys that name a person
    (`event_data_for`, by the kind's declared `EventKind.person_keys`)."""

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


@dataclass(frozen=True)
class Event:
    id: str
    seq: int
    type: str
    community_did: str | None
    app_id: str | None
    actor_did: str | None
    data: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    #: The apps that may hear of it, decided at commit (`decide_audience`).
    audience: Audience | None = None

    def payload(self) -> dict[str, Any]:
        """The body delivered to webhooks: ``{type, timestamp, data: {..., communityDid}}``."""
        data = dict(self.data)
        if self.community_did is not None:
            data.setdefault("communityDid", self.community_did)
        return {"type": self.type, "timestamp": self.created_at, "data": data}


def managers_only(app: "Application", type: str) -> bool:
    """Whether the declared kind `type` is for the apps that act for the community's admins
    only (`EventKind.audience` ``"managers"``, e.g. the reports plugin's kinds)."""
    kind = getattr(app, "event_kinds", {}).get(type)
    return kind is not None and kind.audience == "managers"


async def decide_audience(app: "Application", tx: Transaction, community_did: str | None, app_id: str | None,
                          type: str) -> Audience:
    """Who may hear of an event: one outside any community only the app that caused it; one
    in a community as the communities plugin decides, which owns the community's visibility
    (`CommunitiesService.event_audience`; the core reads no plugin's table). Without that
    plugin, no app."""
    if community_did is None:
        return Audience(AppSet(False, frozenset({app_id}))) if app_id else NO_APP
    if app.communities is None:
        return NO_APP
    audience = await app.communities.event_audience(tx, community_did, app_id, type,
                                                    managers_only=managers_only(app, type))
    kind = getattr(app, "event_kinds", {}).get(type)
    if kind is not None and kind.about_people:
        # An event that exists to say who (`EventKind.about_people`): only those who may see.
        return Audience(audience.hears & audience.people, EVERY)
    return audience


async def emit_tx(app: "Application", tx: Transaction, type: str, *, community_did: str | None,
                  data: dict[str, Any], app_id: str | None = None,
                  actor_did: str | None = None, only_apps: Iterable[str] | None = None) -> Event:
    """Record an event in `tx` and let plugins react inside the same transaction. `type`
    must be a declared kind (`cr_event_kinds`): no app could subscribe to any other, so an
    undeclared one is refused (ValueError naming it) rather than left in the outbox.
    `only_apps`: these apps hear of it and no other, whatever the community's audience (an
    instance-wide event for the apps the operator trusts); None: the community decides."""
    if type not in app.event_kinds:
        raise ValueError(f"emit_tx: the event kind {type!r} is not declared by any plugin (cr_event_kinds)")
    event_id = "evt_" + secrets.token_hex(12)
    created_at = app.clock.iso_now()
    if only_apps is not None:
        audience = Audience(AppSet(False, frozenset(only_apps)))
    else:
        audience = await decide_audience(app, tx, community_did, app_id, type)
    seq = await insert_event_tx(
        tx, event_id=event_id, type=type, community_did=community_did, app_id=app_id,
        actor_did=actor_did, data_json=json.dumps(data, separators=(",", ":")), created_at=created_at,
        audience=audience.hears.stored(), people=audience.people.stored())
    event = Event(event_id, seq, type, community_did, app_id, actor_did, data, created_at, audience)
    await app.call_hook(app.pm.hook.cr_event_tx, app=app, tx=tx, event=event)
    tx.after_commit(lambda: _observe(app, event))
    return event


async def _observe(app: "Application", event: Event) -> None:
    try:
        await app.call_hook(app.pm.hook.cr_event, app=app, event=event)
    except Exception:
        log.exception("an observer of event %s (%s) failed", event.id, event.type)


# ------------------------------------------------------------------ the outbox's queries (table `events`)


async def insert_event_tx(tx: Transaction, *, event_id: str, type: str, community_did: str | None,
                          app_id: str | None, actor_did: str | None, data_json: str,
                          created_at: str, audience: str = "", people: str = "*") -> int:
    """Record an event; `audience` (who hears of it) and `people` (who of them sees the
    people it names) in the stored form of `daemon.runtime.events.AppSet`."""
    cur = await tx.execute(
        "INSERT INTO events (id, type, community_did, app_id, actor_did, data, created_at, audience, people) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (event_id, type, community_did, app_id, actor_did, data_json, created_at, audience, people))
    return cur.lastrowid


async def get_event(db: Reader, event_id: str) -> Row | None:
    return await db.fetchone("SELECT * FROM events WHERE id = ?", (event_id,))


# ------------------------------------------------------------------ the event stream


async def bounds(db: Reader) -> tuple[int, int]:
    """(oldest seq kept, newest seq ever written) in one snapshot; (head + 1, head) when
    the outbox is empty (everything pruned, or nothing written yet)."""
    row = await db.fetchone(
        "SELECT (SELECT MIN(seq) FROM events) AS oldest, COALESCE((SELECT MAX(seq) FROM events), "
        "(SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) AS head")
    assert row is not None
    head = int(row["head"])
    return (int(row["oldest"]) if row["oldest"] is not None else head + 1), head


# `body`: the event as the stream shows it, built by SQLite on the reader thread: the
# webhook body (daemon.runtime.events.Event.payload: type, timestamp, data with
# communityDid added last unless the data has one) after the event id.
_STREAM_COLUMNS = (
    "seq, type, community_did, audience, people, json_object('id', id, 'type', type, 'timestamp', created_at, "
    "'data', CASE WHEN community_did IS NULL OR json_type(data, '$.communityDid') IS NOT NULL "
    "THEN json(data) ELSE json_set(data, '$.communityDid', community_did) END) AS body")


async def stream_after(db: Reader, after: int, upto: int, *, app_id: str | None,
                       kinds: Sequence[str] | None, community_did: str | None,
                       limit: int) -> list[Row]:
    """Up to `limit` events with ``after < seq <= upto`` in commit order that `app_id` may
    hear of (None: every event, whatever its audience: the stream's own fan-out, which
    filters per subscriber), optionally of these `kinds` and this community."""
    kinds = tuple(kinds or ())
    return await db.fetchall(*narrowed(
        f"SELECT {_STREAM_COLUMNS} FROM events WHERE seq > ? AND seq <= ?", [after, upto],
        {"(audience = '*' OR instr(audience, ?) > 0)": None if app_id is None else f" {app_id} ",
         f"type IN ({','.join('?' * len(kinds))})": kinds, "community_did = ?": community_did},
        "ORDER BY seq LIMIT ?", limit))


async def prune_tx(tx: Transaction, created_before: str, below_seq: int | None, limit: int) -> int:
    """Delete the oldest events, at most `limit`, up to the first one that is not older
    than `created_before` (ISO 8601) or not below `below_seq`: always a prefix of the
    outbox, so every event after the oldest one kept is still there. The count deleted."""
    rows = await tx.fetchall("SELECT seq, created_at FROM events ORDER BY seq LIMIT ?", (limit,))
    last = None
    for row in rows:
        if row["created_at"] >= created_before or (below_seq is not None and row["seq"] >= below_seq):
            break
        last = row["seq"]
    if last is None:
        return 0
    cur = await tx.execute("DELETE FROM events WHERE seq <= ?", (last,))
    return cur.rowcount


class Outbox:
    """The events outbox (table ``events``, a core table plugins may read), as plugins reach
    it through the plugin API (``daemon.plugin.events.Outbox``; docs/plugins.md, "Storage"). Events
    are written only by ``emit_tx``, in the transaction of the change they tell of."""

    #: ``await Outbox.bounds(db)``: (oldest seq kept, newest seq ever written).
    bounds = staticmethod(bounds)
    #: ``await Outbox.after(db, after, upto, app_id=, kinds=, community_did=, limit=)``: the
    #: events with ``after < seq <= upto`` an app may hear of, in commit order, as rows
    #: (``seq``, ``type``, ``community_did``, ``audience``, ``people``, ``body``: the event's JSON).
    after = staticmethod(stream_after)
    #: ``await Outbox.prune_tx(tx, created_before, below_seq, limit)``: delete the oldest
    #: events (a prefix of the outbox); the retention pass of the ``events`` plugin only.
    prune_tx = staticmethod(prune_tx)
