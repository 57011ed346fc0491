"""The daemon's HTTP server: Tornado's `HTTPServer` with the limits that keep a flood of
connections from freezing it (docs/operations.md, "Connection floods").

* **Per-address cap.** At most `server.max_connections_per_address` open HTTP connections
  from one client address (an IPv6 client: from one /64, which any one of them holds).
  A connection over the cap is answered ``429 too_many_connections`` at once and closed,
  so it costs a file descriptor for a moment, not for the idle timeout (at most
  `REFUSE_TIMEOUT`: with TLS served directly, a client that never starts its handshake
  cannot hold it longer). Addresses in
  `server.trusted_proxies` are exempt (every client behind the proxy arrives from it; the
  proxy limits them). WebSocket subscribers are counted on their own, against
  `server.max_websockets_per_address`, by the route that upgrades them
  (`ConnectionLimits.open_websocket`): an upgraded connection leaves the HTTP count.
* **Accept failures back off.** When ``accept()`` fails (no file descriptors left:
  ``EMFILE``/``ENFILE``; no buffers), the listening socket is paused for a moment
  (50 ms, doubling to 1 s while it keeps failing) instead of being retried in a busy loop,
  and one line is logged per interval (`ACCEPT_LOG_INTERVAL`) saying how many failed, never
  a traceback per attempt. Connections waiting meanwhile stay in the kernel's queue.

* **Head and body time limits**, with Tornado's meaning: `server.idle_connection_timeout_seconds`
  bounds both the wait for a request's head (an idle keep-alive connection) and the time the
  head may take to arrive, and `server.body_timeout_seconds` the time a declared body may
  take; a connection over either is closed unanswered (a late body is logged at info, as
  Tornado does). They are kept per connection and checked by one sweep a second (more often
  for limits under 4 s), instead of Tornado's two timers per request (`gen.with_timeout`
  around the head and the body): each of those cost an extra trip round the event loop,
  ~12 % of a small request's CPU (docs/performance.md, issue 27). A limit therefore fires
  up to one sweep late.

Tornado's `TCPServer` keeps its listening sockets and their accept handlers in
``_sockets`` and ``_handlers`` and builds a connection's stream in ``_handle_connection``;
`add_sockets` below fills the same two maps (so `stop` works unchanged) and calls that
method, with its own accept loop in place of `tornado.netutil.add_accept_handler`.
"""

from __future__ import annotations

import datetime
import errno
import ipaddress
import logging
import resource
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from tornado import gen, httputil, iostream
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop

log = logging.getLogger("commonroom.http")

#: At most one line a minute about failed accepts or refused connections.
ACCEPT_LOG_INTERVAL = 60.0
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 1.0
#: How long a refused connection may take to receive its 429 before it is closed anyway:
#: with TLS served directly, the write waits for the client's handshake, which a flooding
#: client never sends (the refused connection is not counted, so it must not linger).
REFUSE_TIMEOUT = 5.0
#: Connections accepted in one go before other work gets a turn (Tornado's figure).
_ACCEPT_BATCH = 128

_TOO_MANY = (b"HTTP/1.1 429 Too Many Requests\r\n"
             b"Content-Type: application/json; charset=utf-8\r\n"
             b"Retry-After: 5\r\nConnection: close\r\nServer: commonroom\r\n"
             b"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n")
_TOO_MANY_BODY = (b'{"error":"too_many_connections","message":"Too many open connections from your '
                  b'address: reuse one (keep-alive) or close some, then retry."}')


class _Throttled:
    """Logs a warning at most once per `interval`, counting what it did not log."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = float("-inf")
        self.suppressed = 0

    def warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last such message)" if self.suppressed else ""
        self.last, self.suppressed = now, 0
        log.warning(message + more, *args)


class ConnectionLimits:
    """Open connections per client address (``app.connections``): HTTP connections, counted
    by the server, and WebSocket subscribers, counted by the routes that upgrade them. A cap
    of 0 is no cap. Not thread-safe: the event loop's thread only."""

    def __init__(self, per_address: int, websockets_per_address: int, exempt: Iterable[str] = ()) -> None:
        self.per_address = per_address
        self.websockets_per_address = websockets_per_address
        self._exempt = [ipaddress.ip_network(n, strict=False) for n in exempt]
        self._http: dict[str, int] = {}
        self._websockets: dict[str, int] = {}
        self.refused = 0  # connections refused over a cap since the start
        self.accept_failures = 0  # failed accept() calls (no files ...) since the start

    def key(self, address: str) -> str | None:
        """The counter `address` is counted under, or None when it is exempt (a trusted
        proxy) or not an IP address (a Unix socket)."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return None
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self._exempt):
            return None
        if isinstance(ip, ipaddress.IPv6Address):
            return str(ipaddress.IPv6Network((ip, 64), strict=False))
        return str(ip)

    def _open(self, counts: dict[str, int], cap: int, address: str) -> str | None | bool:
        key = self.key(address)
        if key is None:
            return None
        n = counts.get(key, 0)
        if cap and n >= cap:
            self.refused += 1
            return False
        counts[key] = n + 1
        return key

    @staticmethod
    def _close(counts: dict[str, int], key: str) -> None:
        n = counts.get(key, 0) - 1
        if n > 0:
            counts[key] = n
        else:
            counts.pop(key, None)

    # HTTP connections (the server)

    def open_http(self, address: str) -> str | None | bool:
        """Count a new connection: its key (pass it to `close_http`), None when not
        counted, False when `address` is at its cap."""
        return self._open(self._http, self.per_address, address)

    def close_http(self, key: str) -> None:
        self._close(self._http, key)

    # WebSocket subscribers (the routes that upgrade)

    def open_websocket(self, address: str) -> bool:
        """Count a WebSocket subscriber from `address` (the peer, or the client address a
        trusted proxy forwarded); False when that address is at its cap: refuse the
        upgrade (429 ``too_many_connections``). Call `close_websocket` when it closes."""
        return self._open(self._websockets, self.websockets_per_address, address) is not False

    def close_websocket(self, address: str) -> None:
        key = self.key(address)
        if key is not None:
            self._close(self._websockets, key)

    def open_count(self, address: str) -> tuple[int, int]:
        """(HTTP connections, WebSocket subscribers) counted for `address` now."""
        key = self.key(address)
        return (self._http.get(key, 0), self._websockets.get(key, 0)) if key else (0, 0)


_HEAD, _BODY = 0, 1  # what a connection waits for (`Server._waiting`)


class _Timed(httputil.HTTPMessageDelegate):
    """One request's delegate, passed through, telling the server when the head has come
    (the body is awaited from then on) and when the request was read (no limit while the
    application answers)."""

    __slots__ = ("waiting", "conn", "inner")

    def __init__(self, waiting: dict[Any, tuple[int, float]], conn: Any, inner: httputil.HTTPMessageDelegate) -> None:
        self.waiting, self.conn, self.inner = waiting, conn, inner

    def headers_received(self, start_line: Any, headers: httputil.HTTPHeaders) -> Any:
        if self.conn in self.waiting:
            self.waiting[self.conn] = (_BODY, time.monotonic())
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Any:
        return self.inner.data_received(chunk)

    def finish(self) -> None:
        self.waiting.pop(self.conn, None)
        self.inner.finish()

    def on_connection_close(self) -> None:
        self.waiting.pop(self.conn, None)
        self.inner.on_connection_close()


class Server(HTTPServer):
    """`HTTPServer` with the per-address cap, the accept back-off and the head and body
    time limits kept per connection (module doc)."""

    def initialize(self, request_callback: Any, limits: ConnectionLimits | None = None,  # type: ignore[override]
                   idle_connection_timeout: float | None = None, body_timeout: float | None = None,
                   **kwargs: Any) -> None:
        # Tornado's own limits are left off: they cost two timers a request (module doc).
        super().initialize(request_callback, **kwargs)
        if idle_connection_timeout:
            # The sweep keeps the head's limit; Tornado would also put a timer on every
            # request's head (an hour, when given none): the head is awaited directly.
            self.conn_params.header_timeout = None
        self.limits = limits if limits is not None else ConnectionLimits(0, 0)
        self._counted: dict[Any, str] = {}  # stream -> the key it is counted under
        self._accept_log = _Throttled(ACCEPT_LOG_INTERVAL)
        self._refusal_log = _Throttled(ACCEPT_LOG_INTERVAL)
        self._limits_s = (idle_connection_timeout, body_timeout)   # by _HEAD, _BODY
        #: connection -> (what it waits for, since when); absent while the app answers
        self._waiting: dict[Any, tuple[int, float]] = {}
        known = [t for t in self._limits_s if t]
        self._sweep_every = min([1.0] + [t / 4 for t in known])
        self._sweeping: Any = None

    # ---------------------------------------------------------------- head and body limits

    def start_request(self, server_conn: Any, request_conn: Any) -> httputil.HTTPMessageDelegate:
        delegate = super().start_request(server_conn, request_conn)
        if not any(self._limits_s):
            return delegate
        self._waiting[server_conn] = (_HEAD, time.monotonic())
        if self._sweeping is None:
            self._sweeping = IOLoop.current().call_later(self._sweep_every, self._sweep)
        return _Timed(self._waiting, server_conn, delegate)

    def receiving_bodies(self) -> int:
        """How many connections have sent a request's head and not yet all its body (the
        daemon's drain waits for them: their handlers have not started)."""
        return sum(1 for what, _ in self._waiting.values() if what == _BODY)

    def _sweep(self) -> None:
        """Close the connections that waited too long for a head or a body."""
        self._sweeping = None
        now = time.monotonic()
        for conn, (what, since) in list(self._waiting.items()):
            limit = self._limits_s[what]
            if limit and now - since >= limit:
                del self._waiting[conn]
                if what == _BODY:
                    log.info("Timeout reading body from %s", getattr(conn, "context", "?"))
                conn.stream.close()
        if self._waiting:
            self._sweeping = IOLoop.current().call_later(self._sweep_every, self._sweep)

    # ---------------------------------------------------------------- per-address cap

    def handle_stream(self, stream: iostream.IOStream, address: Any) -> Any:
        ip = address[0] if isinstance(address, tuple) and address else ""
        key = self.limits.open_http(ip)
        if key is False:
            self._refusal_log.warn("refused a connection from %s: it has %d open, the most "
                                   "server.max_connections_per_address allows", ip, self.limits.per_address)
            return self._refuse(stream)
        if key:
            self._counted[stream] = key
        try:
            super().handle_stream(stream, address)
        except BaseException:
            self._release(stream)
            raise
        return None

    def on_close(self, server_conn: Any) -> None:
        # Also called when a route takes the connection over (a WebSocket upgrade): from
        # then on it is counted, if at all, as a WebSocket subscriber.
        self._waiting.pop(server_conn, None)
        self._release(server_conn.stream)
        super().on_close(server_conn)

    def _release(self, stream: Any) -> None:
        key = self._counted.pop(stream, None)
        if key is not None:
            self.limits.close_http(key)

    async def _refuse(self, stream: iostream.IOStream) -> None:
        try:
            await gen.with_timeout(
                datetime.timedelta(seconds=REFUSE_TIMEOUT),
                stream.write(_TOO_MANY + b"Content-Length: %d\r\n\r\n" % len(_TOO_MANY_BODY) + _TOO_MANY_BODY),
                quiet_exceptions=(iostream.StreamClosedError, OSError))
        except (iostream.StreamClosedError, OSError, gen.TimeoutError):
            pass
        finally:
            stream.close()

    # ---------------------------------------------------------------- accepting

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        for sock in sockets:
            self._sockets[sock.fileno()] = sock
            self._handlers[sock.fileno()] = self._accept_handler(sock)

    def _accept_handler(self, sock: socket.socket) -> Callable[[], None]:
        """Like `tornado.netutil.add_accept_handler`, but a failed accept pauses the socket
        (growing pauses) and is logged once per interval. Returns the remover."""
        io_loop = IOLoop.current()
        state: dict[str, Any] = {"removed": False, "paused": None, "backoff": _BACKOFF_FIRST}

        def accept(fd: Any, events: int) -> None:
            for _ in range(_ACCEPT_BATCH):
                if state["removed"]:
                    return
                try:
                    connection, address = sock.accept()
                except BlockingIOError:
                    return
                except ConnectionAbortedError:
                    continue
                except OSError as exc:
                    pause(exc)
                    return
                state["backoff"] = _BACKOFF_FIRST
                self._handle_connection(connection, address)

        def pause(exc: OSError) -> None:
            self.limits.accept_failures += 1
            delay = state["backoff"]
            state["backoff"] = min(delay * 2, _BACKOFF_MAX)
            io_loop.remove_handler(sock)
            state["paused"] = io_loop.call_later(delay, resume)
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                self._accept_log.warn("cannot accept connections: %s (open files limit %d, %d HTTP "
                                      "connections open); pausing new connections for %.2f s",
                                      exc.strerror, soft, len(self._connections), delay)
            else:
                self._accept_log.warn("cannot accept connections: %s; pausing new connections for %.2f s",
                                      exc.strerror or exc, delay)

        def resume() -> None:
            state["paused"] = None
            if not state["removed"]:
                io_loop.add_handler(sock, accept, IOLoop.READ)

        def remove() -> None:
            state["removed"] = True
            if state["paused"] is not None:
                io_loop.remove_timeout(state["paused"])
                state["paused"] = None
            else:
                io_loop.remove_handler(sock)

        io_loop.add_handler(sock, accept, IOLoop.READ)
        return remove


def raise_open_files_limit(wanted: int = 65536) -> tuple[int, int]:
    """Raise this process's soft limit of open files towards `wanted`, as far as the hard
    limit allows (outside systemd the soft limit is often 1,024 under a far higher hard
    one). Returns the (old, new) soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return soft, target
        except (ValueError, OSError):
            pass
    return soft, soft
