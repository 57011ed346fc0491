from __future__ import annotations

from daemon.plugin import STRING, BaseHandler, arr, obj, operation


class HelloHandler(BaseHandler):
    """GET /hello: the configured greeting and the events observed so far."""

    # Every route that answers JSON declares its operation: /api/v1/openapi.json is built from it.
    @operation("The greeting and the events seen so far", responses={200: obj(
        {"greeting": STRING, "events": arr(STRING)}, ["greeting", "events"])})
    async def get(self) -> None:
        config = self.app.config.plugin("hello")
        self.send_json({"greeting": config.greeting, "events": self.app.extensions["hello"].events})
