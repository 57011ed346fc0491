"""The event stream: apps pull the events they may see after a cursor, or subscribe over a
WebSocket, replaying from a cursor and then live (docs/events.md). Old events leave the
outbox after `events.retention_days`."""

from __future__ import annotations

from typing import Any

from daemon.plugin import hookimpl

from plugins.events import handlers, retention
from plugins.events.metrics import StreamMetrics
from plugins.events.settings import EventsConfig, check
from plugins.events.stream import EventStream, cr_event, stream_of  # noqa: F401 (cr_event: the hook)


@hookimpl
def cr_config_section() -> tuple[str, type]:
    return ("events", EventsConfig)


@hookimpl
def cr_plugin_requires() -> list[str]:
    # A `communityDid` filter is checked against the communities the app may see (the
    # communities plugin's index).
    return ["communities"]


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return handlers.routes()


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    return {"events": EventStream(app)}


@hookimpl
def cr_metrics(app: Any, registry: Any) -> Any:
    stream = stream_of(app)
    stream.metrics = m = StreamMetrics(stream, registry)
    return m.refresh


@hookimpl
async def cr_startup(app: Any) -> None:
    config = app.config.plugin("events")
    check(config)
    await stream_of(app).start()
    if not app.read_only:  # a follower's copy is pruned by its primary (docs/scaling.md)
        app.spawn_periodic("events.retention", config.prune_interval_seconds,
                           lambda first: retention.prune_events(app))


@hookimpl
def cr_shutdown(app: Any) -> Any:
    return stream_of(app).stop()
