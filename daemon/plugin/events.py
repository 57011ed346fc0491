"""Who hears of an event, decided at its commit and stored with it, and the outbox's read API: what
the webhooks and events plugins use, and a plugin that sends events elsewhere must use too.

    from daemon.plugin.events import Audience, event_data_for

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.runtime.events import AppSet, Audience, decide_audience, Event, event_data_for, EVENT_TYPES, Outbox

__all__ = [
    "EVENT_TYPES", "Event", "AppSet", "Audience", "decide_audience", "event_data_for", "Outbox",
]
