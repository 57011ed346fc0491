"""Lean routes: the hottest API routes, served without a Tornado RequestHandler.

Apps call ``membership/check`` on every page view of theirs, so its cost per request sets
how many page views one daemon can serve. A `tornado.web.RequestHandler` spends about as
much CPU on its own set-up and tear-down (UI modules, output transforms, etag, a task per
request) as the whole HTTP/1.1 exchange costs; for a route that is one indexed read, that
is most of the work. A `LeanHandler` is answered by a small `HTTPMessageDelegate` instead,
with the same conventions as every other route, because the shared part lives in
`daemon.http.base.RequestLogic`:

* the same authentication hook, failed-attempt throttling, CSRF check and rate limits;
* the same JSON errors (`ApiError`), request ids, ``Cache-Control: no-store``,
  ``X-Content-Type-Options: nosniff``, rate-limit headers, ``Date`` and ``Server``;
* the same capped body, in-flight counting (graceful shutdown) and access log;
* the same connection handling: the body is read before the request is judged, so a
  refusal leaves the connection usable, except that a body declared over the limit is
  refused (413) as soon as the headers arrive, unread, with ``Connection: close``.

The handler's coroutine starts at once (`start_eagerly`): when it never has to wait, as
``membership/check`` with its synchronous point reads, the response is written before the
delegate returns, with no task and no extra trip round the event loop. When it does wait,
an ordinary asyncio Task carries it on. Which of the two served each request is counted
in ``/metrics`` (``commonroom_http_serving_path_total``, path ``lean`` or ``lean_task``).
Only public Tornado and asyncio APIs are used.

Its methods are ``async def get/post/...`` taking the decoded path groups, like a
RequestHandler's; they answer with `send_json`. Redirects, cookies, templates and
streaming output are not available: routes that need them stay on `BaseHandler`.
A lean route must be registered through `cr_routes` (the daemon's route table).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import re
from collections.abc import Generator
from http.client import responses as _REASONS
from typing import TYPE_CHECKING, Any

from tornado import httputil
from tornado.web import RequestHandler

from daemon.http.base import (_JSON_CT, SERVER_HEADER, ApiError, HttpDate, RequestLogic, as_answer, encode_json,
                              error_for, log_failure)

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.http")

_METHODS = frozenset(RequestHandler.SUPPORTED_METHODS)
# What Tornado's get_argument blanks in a query value (C0 controls but tab, newline, CR...).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f]")
_ASCII_DIGITS = re.compile(r"[0-9]{1,18}")


_ETAGS = re.compile(r'\*|(?:W/)?"[^"]*"')


#: ETags of bodies answered lately, by the body object's identity (an answer kept in a cache,
#: such as a page of members, is the same bytes object every time: its SHA-1 is taken once).
#: The entry holds the body itself, so an id is never reused while its entry lives.
_KNOWN_ETAGS: dict[int, tuple[bytes, str]] = {}
_KNOWN_ETAGS_MAX = 64


def etag_of(body: bytes) -> str:
    known = _KNOWN_ETAGS.get(id(body))
    if known is not None and known[0] is body:
        return known[1]
    etag = f'"{hashlib.sha1(body).hexdigest()}"'
    if len(body) >= 4096:  # small bodies are cheaper to hash than to remember
        if len(_KNOWN_ETAGS) >= _KNOWN_ETAGS_MAX:
            _KNOWN_ETAGS.clear()
        _KNOWN_ETAGS[id(body)] = (body, etag)
    return etag


def _etag_matches(etag: str, if_none_match: str | None) -> bool:
    """Whether `If-None-Match` names `etag` (or ``*``), compared weakly, as Tornado does."""
    if not if_none_match:
        return False
    tags = _ETAGS.findall(if_none_match)
    return bool(tags) and (tags[0] == "*" or any(t.removeprefix("W/") == etag for t in tags))


class LeanHandler(RequestLogic):
    """Base class of a lean route (see the module docstring). Set ``auth``, ``rate_limit``
    and ``max_body`` as on `BaseHandler`."""

    #: How this request is served (``commonroom_http_serving_path_total``'s `path`):
    #: ``lean`` when answered at once, ``lean_task`` when it had to wait and went on in a
    #: task (the fast path lost: the benchmark prints these counts).
    serving_path = "lean"

    def __init__(self, application: "Application", request: httputil.HTTPServerRequest,
                 **kwargs: Any) -> None:
        self.application = application
        self.request = request
        self.route_kwargs = kwargs
        self._status = 200
        self._finished = False
        self._headers = httputil.HTTPHeaders()
        self._headers["Cache-Control"] = "no-store"
        self._headers["X-Content-Type-Options"] = "nosniff"
        self._body = bytearray()
        self.start_request()

    # ---------------------------------------------------------------- what RequestLogic needs

    def put_header(self, name: str, value: str) -> None:
        self._headers[name] = value

    def get_cookie(self, name: str, default: str | None = None) -> str | None:
        cookies = self.request.cookies
        return cookies[name].value if name in cookies else default

    def get_query_argument(self, name: str, default: Any = None, strip: bool = True) -> Any:
        """The last value of a query argument, decoded like Tornado's (UTF-8, control
        characters blanked, stripped), or `default`."""
        values = self.request.query_arguments.get(name)
        if not values:
            return default
        try:
            value = values[-1].decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "bad_request", f"The query argument {name} is not UTF-8.") from None
        value = _CONTROL_CHARS.sub(" ", value)
        return value.strip() if strip else value

    def get_status(self) -> int:
        return self._status

    # ---------------------------------------------------------------- output

    def send_json(self, value: Any, status: int = 200) -> None:
        self._respond(status, encode_json(value))

    def send_json_bytes(self, body: bytes, status: int = 200) -> None:
        """Answer JSON already encoded (e.g. built by SQLite: store.members.member_page)."""
        self._respond(status, body)

    def _respond(self, status: int, body: bytes) -> None:
        if self._finished:
            raise RuntimeError("the response was already sent")
        self._finished = True
        headers = self._headers
        if status == 200 and self.request.method in ("GET", "HEAD"):
            # As a RequestHandler does: an ETag, and 304 when the client has this version.
            headers["Etag"] = etag = etag_of(body)
            if _etag_matches(etag, self.request.headers.get("If-None-Match")):
                status, body = 304, b""
        self._status = status
        if status != 304:
            headers["Content-Type"] = _JSON_CT
            headers["Content-Length"] = str(len(body))
        headers["Date"] = HttpDate.now()
        headers["Server"] = SERVER_HEADER
        if self.close_connection:
            headers["Connection"] = "close"
        if self.request.method == "HEAD":
            body = b""
        conn = self.request.connection
        conn.write_headers(httputil.ResponseStartLine("", status, _REASONS.get(status, "Unknown")),
                           headers, body)
        conn.finish()
        self.application.log_request(self)

    def _respond_error(self, exc: BaseException) -> None:
        exc = as_answer(self, exc)
        status = exc.status if isinstance(exc, ApiError) else 500
        log_failure(self.request, exc)
        err = error_for(exc, status, self.request_id)
        for k, v in err.headers.items():
            self.put_header(k, v)
        if not self._finished:
            self._respond(status, encode_json(err.body()))

    # ---------------------------------------------------------------- the request

    async def _run(self, path_args: list[bytes]) -> None:
        app = self.application
        app.inflight_started()
        try:
            method = self.request.method or ""
            if method not in _METHODS:
                raise ApiError(405)
            await self.admit()
            answer = getattr(self, method.lower(), None)
            if answer is None:
                raise ApiError(405)
            args = []
            for arg in path_args:
                try:
                    args.append(arg.decode("utf-8") if isinstance(arg, bytes) else arg)
                except UnicodeDecodeError:
                    raise ApiError(400, "bad_request", "The path is not UTF-8.") from None
            await answer(*args)
            if not self._finished:
                raise RuntimeError(f"{type(self).__name__}.{method.lower()} sent no response")
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON answer
            try:
                self._respond_error(exc)
            except Exception:  # noqa: BLE001 - never leave the client waiting
                log.exception("could not answer %s %s", self.request.method, self.request.path)
                self.request.connection.close()
        finally:
            app.inflight_finished()


def start_eagerly(coro: Any, context: contextvars.Context) -> "asyncio.Task[Any] | None":
    """Run `coro` in `context` at once, up to its first real suspension, as Python 3.12's
    eager tasks do: None if it finished there (membership/check usually does: its reads
    are synchronous), else the task that carries it on. Saves a task and a trip round the
    event loop per request.

    Only public APIs: a coroutine's ``send`` (PEP 492) for the first step; when it
    suspends, an ordinary `asyncio.Task` takes over through `_Suspended`, which hands the
    Task what the coroutine yielded (the future it waits for), exactly as the coroutine's
    own ``await`` would have, so waiting, wake-up and cancellation are the Task's own."""
    try:
        yielded = context.run(coro.send, None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_carry_on(_Suspended(coro, yielded)), context=context)


async def _carry_on(suspended: "_Suspended") -> Any:
    return await suspended


class _Suspended:
    """A coroutine that `start_eagerly` began, suspended on `yielded`, as an awaitable. (A
    started coroutine cannot be awaited again: Python refuses with "coroutine is being
    awaited already".) Awaiting it passes `yielded` up to the awaiting Task, then relays
    what the Task sends or throws (a cancellation) down to the coroutine, and the
    coroutine's next yield up, until it returns: what ``yield from`` does."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Any, yielded: Any) -> None:
        self.coro, self.yielded = coro, yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self.coro, self.yielded
        self.yielded = None
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - relayed, as yield from does
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


class LeanDelegate(httputil.HTTPMessageDelegate):
    """Feeds one request to a `LeanHandler` (what Tornado's _HandlerDelegate does for a
    RequestHandler): the body as it arrives, then the handler's method in a task."""

    def __init__(self, application: "Application", request: httputil.HTTPServerRequest,
                 handler_class: type[LeanHandler], kwargs: dict[str, Any], path_args: list[bytes]) -> None:
        self.application = application
        self.handler = handler_class(application, request, **kwargs)
        self.path_args = path_args

    def headers_received(self, start_line: Any, headers: httputil.HTTPHeaders) -> None:
        length = headers.get("Content-Length", "")
        if _ASCII_DIGITS.fullmatch(length) and int(length) > self.handler.body_limit():
            # Not worth reading megabytes to keep one connection: refuse now, unread, and
            # close (HTTP/1.1 allows nothing else once the body is left unread).
            self.handler._body_too_large = True
            self.handler.close_connection = True
            self.handler._respond_error(self.handler._too_large())
        return None

    def data_received(self, chunk: bytes) -> None:
        self.handler.data_received(chunk)

    def finish(self) -> None:
        task = start_eagerly(self.handler._run(self.path_args), contextvars.copy_context())
        if task is not None:
            self.handler.serving_path = "lean_task"
            # The connection waits for the response, not for the task: keep the task
            # referenced until it ends, even if the client goes away.
            tasks = self.application.request_tasks
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def on_connection_close(self) -> None:
        return None
