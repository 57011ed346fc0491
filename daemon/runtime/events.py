"""Domain events: written to the outbox in the transaction of the change, observed by
plugins inside that transaction (`cr_event_tx`) and after it commits (`cr_event`)."""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daemon.runtime.plugins import call_hook
from daemon.security.access import Audience, event_audience
from store import events as events_store
from store.db import Transaction

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger(__name__)

#: The event kinds of the spec (section 6). Plugins may emit others with their own prefix.
EVENT_TYPES = (
    "member.joined", "member.left", "member.approved", "member.rejected", "member.removed",
    "member.banned", "member.unbanned", "member.roles_changed",
    "record.created", "record.updated", "record.deleted",
)


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
    #: The apps that may hear of it, decided at commit (`daemon.security.access.event_audience`).
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


async def emit_tx(app: "Application", tx: Transaction, type: str, *, community_did: str | None,
                  data: dict[str, Any], app_id: str | None = None,
                  actor_did: str | None = None) -> Event:
    """Record an event in `tx` and let plugins react inside the same transaction."""
    event_id = "evt_" + secrets.token_hex(12)
    created_at = app.clock.iso_now()
    audience = await event_audience(tx, community_did, app_id, type, managers_only=managers_only(app, type))
    seq = await events_store.insert_event_tx(
        tx, event_id=event_id, type=type, community_did=community_did, app_id=app_id,
        actor_did=actor_did, data_json=json.dumps(data, separators=(",", ":")), created_at=created_at,
        audience=audience.hears.stored(), people=audience.people.stored())
    event = Event(event_id, seq, type, community_did, app_id, actor_did, data, created_at, audience)
    await call_hook(app.pm.hook.cr_event_tx, app=app, tx=tx, event=event)
    tx.after_commit(lambda: _observe(app, event))
    return event


async def _observe(app: "Application", event: Event) -> None:
    try:
        await call_hook(app.pm.hook.cr_event, app=app, event=event)
    except Exception:
        log.exception("an observer of event %s (%s) failed", event.id, event.type)
