"""commonroom-hello: the smallest useful Commonroom plugin (a tutorial; see README.md).

It declares a config section, adds a route, and observes every domain event. Only
hook implementations live here; the handler is in a sibling module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon import hookimpl

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


@hookimpl
def cr_startup(app: Any) -> None:
    app.state["hello"] = {"events": []}


@hookimpl
async def cr_event(app: Any, event: Any) -> None:
    # After-commit observer: keep the last 100 event types seen.
    seen = app.state["hello"]["events"]
    seen.append(event.type)
    del seen[:-100]
