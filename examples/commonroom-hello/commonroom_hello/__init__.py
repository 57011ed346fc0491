"""commonroom-hello: the smallest useful Commonroom plugin (a tutorial; see README.md).

It declares a config section, keeps its own state on the application, adds a route,
and observes every domain event. Only hook implementations live here; the handler is in
a sibling module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.plugin import hookimpl

from commonroom_hello.handlers import HelloHandler


@dataclass(frozen=True)
class HelloConfig:
    greeting: str = "hello"


@hookimpl
def cr_config_section() -> tuple[str, type]:
    return ("hello", HelloConfig)


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return [(r"/hello", HelloHandler)]


@dataclass
class HelloState:
    """What the plugin remembers while the daemon runs: ``app.extensions["hello"]``."""

    events: list[str] = field(default_factory=list)


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    # A plugin's own state hangs off the application under the plugin's name.
    return {"hello": HelloState()}


@hookimpl
async def cr_event(app: Any, event: Any) -> None:
    # After-commit observer: keep the last 100 event types seen.
    seen = app.extensions["hello"].events
    seen.append(event.type)
    del seen[:-100]
