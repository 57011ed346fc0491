"""A test-only plugin: routes that exercise the shared HTTP conventions."""

from __future__ import annotations

import asyncio
from typing import Any

from daemon import hookimpl

from daemon.http.base import validate
from daemon.http.base import BaseHandler


class EchoHandler(BaseHandler):
    auth = "any"

    async def post(self) -> None:
        body = self.json_body()
        count = validate.integer(body, "count", required=False, minimum=0)
        self.send_json({"count": count, "principal": self.principal.kind})


class PublicEchoHandler(BaseHandler):
    async def post(self) -> None:
        self.send_json({"size": len(self.json_body(required=False)), "bytes": len(self.body),
                        "streamed": self.streams_body})


class BoomHandler(BaseHandler):
    async def get(self) -> None:
        raise RuntimeError("secret internal detail /etc/passwd")


class AuthLimitedHandler(BaseHandler):
    rate_limit = "auth"

    async def post(self) -> None:
        self.send_json({"ok": True})


class SlowHandler(BaseHandler):
    async def get(self) -> None:
        await asyncio.sleep(float(self.get_query_argument("seconds", "1")))
        self.send_json({"slept": True})


class TestRoutes:
    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/test/echo", EchoHandler), (r"/test/public-echo", PublicEchoHandler),
                (r"/test/boom", BoomHandler), (r"/test/auth-limited", AuthLimitedHandler),
                (r"/test/slow", SlowHandler)]


plugin = TestRoutes()
