from __future__ import annotations

from daemon.http import BaseHandler


class HelloHandler(BaseHandler):
    """GET /hello: the configured greeting and the events observed so far."""

    async def get(self) -> None:
        config = self.app.config.plugin("hello")
        self.send_json({"greeting": config.greeting, "events": self.app.state["hello"]["events"]})
