"""Routes of the event stream (API key): ``GET /api/v1/events`` (pull, long-poll) and the
WebSocket ``/api/v1/events/subscribe``. The rules live in stream.py."""

from __future__ import annotations

import asyncio
import logging
import re
import struct
from typing import Any, Sequence

import tornado.iostream
import tornado.websocket

from daemon.plugin import is_did
from daemon.plugin import ApiError, BaseHandler, encode_cursor
from daemon.plugin.http import SERVER_HEADER, RequestLogic, decode_cursor, encode_json, error_for
from daemon.plugin import DID, STRING, arr, obj, operation, query
from daemon.plugin.http import CURSOR, Response
from daemon.plugin import CommunitiesService
from daemon.plugin.http import NOT_FOUND
from plugins.events.stream import (CLOSE_CURSOR_EXPIRED, MAX_LIMIT, MAX_WAIT, EventStream, Filter, Subscriber,
                                   event_message, parse_kinds, stream_of)

log = logging.getLogger("commonroom.events")

_LIMIT_RE = re.compile(r"[0-9]{1,4}")
_WAIT_RE = re.compile(r"[0-9]{1,2}(\.[0-9]{1,3})?")

EVENT = obj({"id": {"type": "string", "description": "evt_ + 24 hex: the webhook-id of the same event"},
             "type": STRING, "timestamp": {"type": "string", "description": "ISO 8601 time of the commit"},
             "data": {"type": "object", "description": "as in the webhook body, with communityDid"},
             "cursor": {"type": "string", "description": "resume after this event"}},
            ["id", "type", "timestamp", "data", "cursor"])
STREAM_PARAMS = (
    query("cursor", CURSOR, description="resume after this cursor; absent: start at now"),
    query("kinds", STRING, description="comma-separated event kinds (default: every kind)"),
    query("communityDid", DID, description="only this community's events"),
)


def query_text(h: RequestLogic, name: str, code: str = "invalid_request") -> str | None:
    """A query parameter of both routes as text, the same way for the pull and the WebSocket
    (whose handler is not Tornado's RequestHandler): the last value, not UTF-8 a 400 `code`
    naming it, before anything else looks at it."""
    values = h.request.query_arguments.get(name)
    if not values:
        return None
    try:
        return values[-1].decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, code, f"{name}: is not UTF-8 text",
                       details=[{"field": name, "message": "is not UTF-8 text"}]) from None


async def stream_params(h: RequestLogic) -> tuple[Filter, int]:
    """The query parameters both routes share, checked: the reader's filter and where it
    starts (400 for bad input, 404 for a community the app may not see, 410 for an expired
    cursor)."""
    app = h.app
    assert h.principal is not None and h.principal.app_id is not None
    kinds = parse_kinds(app, query_text(h, "kinds"))
    community_did = query_text(h, "communityDid")
    if community_did is not None:
        if not is_did(community_did):
            raise ApiError(400, "invalid_request", "communityDid: must be a DID",
                           details=[{"field": "communityDid", "message": "must be a DID"}])
        communities = app.service(CommunitiesService)
        if communities is None:
            raise NOT_FOUND(community_did)
        await communities.visible(community_did, h.principal.app_id)
    stream = stream_of(app)
    raw_cursor = query_text(h, "cursor", "invalid_cursor")
    if raw_cursor is None:
        after = await stream.now()
    else:
        after = int(decode_cursor(raw_cursor, 1, "i")[0])
        await stream.check_cursor(after)
    return Filter(h.principal.app_id, kinds, community_did), after


class PullHandler(BaseHandler):
    auth = "app"

    @operation("Events this app may see, in commit order, after a cursor (long-poll with wait)",
               description="The same event ids and bodies as webhook deliveries. Without a cursor the "
                           "answer starts at now (no events; keep its cursor). An empty page whose cursor "
                           "moved means more may follow: pull again. docs/events.md.",
               params=[*STREAM_PARAMS,
                       query("limit", {"type": "string", "pattern": "^[0-9]{1,4}$",
                                       "description": f"1 to {MAX_LIMIT}, default 100"}),
                       query("wait", {"type": "string", "pattern": r"^[0-9]{1,2}(\.[0-9]{1,3})?$",
                                      "description": f"seconds (0 to {MAX_WAIT:g}) to wait for an event "
                                                     "when there is none yet"})],
               responses={200: obj({"events": arr(EVENT), "cursor": {"type": "string",
                                    "description": "pass it back to continue after this page"}},
                                   ["events", "cursor"])},
               errors={404: "community_not_found", 410: "cursor_expired (details.oldestCursor)"})
    async def get(self) -> None:
        f, after = await stream_params(self)
        limit = self._limit()
        wait = self._wait()
        page = await stream_of(self.app).pull(f, after, limit, wait)
        if self.request.connection is None or self.request.connection.stream.closed():
            return
        stream_of(self.app).record_sent(len(page.rows))
        self.send_json_bytes(b'{"events":[' + b",".join(event_message(r, f.app_id, self.app.event_kinds) for r in page.rows)
                             + b'],"cursor":"' + encode_cursor([page.cursor]).encode() + b'"}')

    def _limit(self) -> int:
        raw = query_text(self, "limit", "invalid_limit")
        if raw is None:
            return 100
        if not _LIMIT_RE.fullmatch(raw) or not 1 <= int(raw) <= MAX_LIMIT:
            raise ApiError(400, "invalid_limit", f"limit must be a whole number from 1 to {MAX_LIMIT}.")
        return int(raw)

    def _wait(self) -> float:
        raw = query_text(self, "wait", "invalid_wait")
        if raw is None:
            return 0.0
        if not _WAIT_RE.fullmatch(raw) or not 0 <= float(raw) <= MAX_WAIT:
            raise ApiError(400, "invalid_wait", f"wait must be a number of seconds from 0 to {MAX_WAIT:g}.")
        return float(raw)


class SubscribeHandler(RequestLogic, tornado.websocket.WebSocketHandler):
    """The WebSocket: refused with a JSON error before the upgrade (401 without a valid
    key), then replay from the cursor and live events, one event per text message."""

    auth = "app"

    def initialize(self, **kwargs: Any) -> None:
        self.start_request()
        self.sub: Subscriber | None = None
        self._task: asyncio.Task[None] | None = None

    def put_header(self, name: str, value: str) -> None:
        self._headers[name] = value

    def set_default_headers(self) -> None:
        self._headers["Server"] = SERVER_HEADER
        self._headers["Cache-Control"] = "no-store"
        self._headers["X-Content-Type-Options"] = "nosniff"

    @property
    def ping_interval(self) -> float | None:
        return self.app.config.plugin("events").ping_interval_seconds

    @property
    def ping_timeout(self) -> float | None:
        return self.app.config.plugin("events").ping_interval_seconds

    @operation("Subscribe over a WebSocket: replay after the cursor, then live events",
               description="Send X-Api-Key with the upgrade request. Each text message is one event "
                           "(the pull's event object, with its cursor). Close codes: 1001 server "
                           "shutting down, 4008 slow consumer, 4010 cursor expired during replay; "
                           "reconnect with the last cursor received. docs/events.md.",
               params=list(STREAM_PARAMS),
               responses={101: Response("Switching to the WebSocket protocol")},
               errors={404: "community_not_found", 410: "cursor_expired (details.oldestCursor)",
                       426: "upgrade_required: not a WebSocket request",
                       429: "too_many_subscribers, or rate limited"})
    async def get(self, *args: Any, **kwargs: Any) -> None:
        try:
            await self.admit()
            f, after = await stream_params(self)
            stream = stream_of(self.app)
            if stream.stopping:
                raise ApiError(503, "unavailable", "The service is shutting down.")
            cap = stream.config.max_subscribers_per_app
            if stream.subscribers_of(f.app_id) >= cap:
                raise ApiError(429, "too_many_subscribers",
                               f"This app already has {cap} subscriptions open (events.max_subscribers_per_app).")
            if self.request.headers.get("Upgrade", "").lower() != "websocket":
                raise ApiError(426, "upgrade_required", "This route is a WebSocket: send an upgrade request.",
                               headers={"Upgrade": "websocket"})
        except Exception as exc:  # noqa: BLE001 (answered as JSON before any upgrade)
            self._refuse(exc)
            return
        self.sub = Subscriber(f, after, self._close_for)
        await super().get(*args, **kwargs)

    def _refuse(self, exc: Exception) -> None:
        err = error_for(exc, getattr(exc, "status", 500), self.request_id)
        if not isinstance(exc, ApiError):
            log.error("subscribe failed", exc_info=exc)
        self.set_status(err.status)
        for k, v in err.headers.items():
            self.set_header(k, v)
        self.put_header("Content-Type", "application/json; charset=utf-8")
        self.finish(encode_json(err.body()))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors Tornado answers by itself (405 for another method) in the JSON shape."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        err = error_for(exc, status_code, self.request_id)
        self.put_header("Content-Type", "application/json; charset=utf-8")
        self.finish(encode_json(err.body()))

    # ---------------------------------------------------------------- the connection

    def open(self, *args: Any, **kwargs: Any) -> None:
        assert self.sub is not None
        stream = stream_of(self.app)
        stream.register(self.sub)
        self.set_nodelay(True)
        self._task = self.app.spawn(self._serve(stream, self.sub), name="events.subscriber")

    async def _serve(self, stream: EventStream, sub: Subscriber) -> None:
        try:
            try:
                await stream.replay(sub, self._send)
            except ApiError as exc:
                if exc.status == 410:
                    stream.close_subscriber(sub, CLOSE_CURSOR_EXPIRED, "cursor expired: " + exc.message[:100])
                    return
                raise
            while not sub.closing:
                await sub.wake.wait()
                sub.wake.clear()
                while sub.queue and not sub.closing:
                    batch = list(sub.queue)
                    sub.queue.clear()
                    size = sum(len(m) for _, m in batch)
                    try:
                        await self._send([m for _, m in batch])
                    finally:
                        sub.queued_bytes = max(0, sub.queued_bytes - size)
                    stream.record_sent(len(batch))
        except tornado.websocket.WebSocketClosedError:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("event subscription of app %s failed", sub.filter.app_id)
            stream.close_subscriber(sub, 1011, "internal error; reconnect with your last cursor")
        finally:
            stream.unregister(sub)

    def _send(self, messages: Sequence[bytes]) -> Any:
        """Write `messages`, one text frame each, in one write to the connection; the
        awaitable completes when they are flushed. (Tornado's write_message makes a write
        and a task per message: a third of the replay's time.)"""
        conn = self.ws_connection
        if conn is None or conn.is_closing():
            raise tornado.websocket.WebSocketClosedError()
        stream = getattr(conn, "stream", None)
        if stream is None or getattr(conn, "_compressor", None) is not None:  # pragma: no cover
            last = None
            for m in messages:
                last = self.write_message(m.decode())
            return last if last is not None else asyncio.sleep(0)
        out = bytearray()
        for m in messages:
            n = len(m)
            if n < 126:
                out += bytes((0x81, n))
            elif n <= 0xFFFF:
                out += struct.pack("!BBH", 0x81, 126, n)
            else:
                out += struct.pack("!BBQ", 0x81, 127, n)
            out += m
        try:
            flushed = stream.write(bytes(out))
        except tornado.iostream.StreamClosedError:
            raise tornado.websocket.WebSocketClosedError() from None
        return _closed_as_websocket(flushed)

    def _close_for(self, code: int, reason: str) -> None:
        if self.ws_connection is not None:
            self.close(code, reason)

    def on_close(self) -> None:
        if self.sub is not None:
            self.sub.closing = True
            self.sub.wake.set()
            stream_of(self.app).unregister(self.sub)

    def on_message(self, message: str | bytes) -> None:
        """Messages from the subscriber are ignored (the stream is one-way)."""

    def check_origin(self, origin: str) -> bool:
        # The key travels in a header, which browsers cannot set on a WebSocket: callers are
        # programs. A page from another site cannot reuse a browser's credentials here.
        return True


async def _closed_as_websocket(flushed: Any) -> None:
    try:
        await flushed
    except tornado.iostream.StreamClosedError:
        raise tornado.websocket.WebSocketClosedError() from None


def routes() -> list[tuple]:
    return [
        (r"/api/v1/events", PullHandler),
        (r"/api/v1/events/subscribe", SubscribeHandler),
    ]

