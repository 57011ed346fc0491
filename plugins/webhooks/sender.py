"""A small HTTP/1.1 client for webhook deliveries.

A delivery is one POST with a `Content-Length` body, and all that matters of the answer is
its status, a few headers (`Retry-After`, `Location`) and the start of its body for the
delivery log. A general client (httpcore over anyio, h11) spent most of the delivery
loop's time on layers this does not need, so this one does only that, on asyncio streams:

- connections are kept alive and pooled per (scheme, host, port); a connection idle for
  longer than `idle_timeout` is closed (checked when the pool is used and on `sweep`);
- every new connection goes through the outbound guard (`Guard.connectable`): the host is
  resolved and checked there, and the socket connects to a checked address, so a changed
  DNS answer cannot redirect a delivery; TLS verifies the certificate against the host
  name (SNI) with the default context;
- the answer's body (Content-Length, chunked, or up to the close) is read and dropped,
  keeping its first `SNIPPET_BYTES`; past `max_body` bytes the connection is closed
  instead of read further;
- a request sent on a reused connection that the receiver had already closed (it answers
  nothing at all) is sent once more on a new connection; any other failure is raised, and
  the caller records it as a failed attempt (retried with backoff: at least once).

The caller bounds each request with a timeout; a request cut short closes its connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote, urlsplit

from daemon.plugin.security import Guard

#: How much of an answer's body is kept (for the delivery log's error text).
SNIPPET_BYTES = 4096
#: An answer's status line and headers together may not be longer than this.
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100


class SendError(Exception):
    """The receiver's answer was missing or not HTTP/1.x (the attempt failed)."""


@dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes            # the first SNIPPET_BYTES of the body


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        try:
            host = self.host.encode("idna").decode("ascii")
        except UnicodeError:
            host = self.host.encode("ascii", "replace").decode("ascii")  # resolving it fails anyway
        host = f"[{host}]" if ":" in host else host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def close(self) -> None:
        self.writer.close()

    @property
    def usable(self) -> bool:
        # A receiver that closed an idle connection has left an EOF in the reader.
        return not self.writer.is_closing() and not self.reader.at_eof()


class Sender:
    """Sends POSTs over pooled keep-alive connections (see the module docstring)."""

    def __init__(self, guard: Guard, *, ssl_context: ssl.SSLContext | None = None,
                 idle_timeout: float = 30.0, max_idle_per_origin: int = 32,
                 max_body: int = 64 * 1024,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.guard = guard
        self.ssl_context = ssl_context
        self.idle_timeout = idle_timeout
        self.max_idle_per_origin = max_idle_per_origin
        self.max_body = max_body
        self.monotonic = monotonic
        self._idle: dict[Origin, list[Connection]] = {}
        self._targets: dict[str, tuple[Origin, str]] = {}   # url -> (origin, path and query)
        self.opened = 0                                      # connections made (tests, metrics)

    # ---------------------------------------------------------------- requests

    async def post(self, url: str, headers: dict[str, str], body: bytes, timeout: float) -> Response:
        """POST `body` to `url`; the answer, or an exception (`SendError`, `OSError`,
        `ssl.SSLError`, the guard's refusals, `TimeoutError` after `timeout` seconds)."""
        origin, target = self._target(url)
        lines = [f"POST {target} HTTP/1.1", f"Host: {origin.host_header}",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        async with asyncio.timeout(timeout):
            conn = self._take_idle(origin)
            if conn is not None:
                try:
                    return await self._exchange(conn, origin, head, body)
                except _ClosedBeforeAnswer:
                    pass  # the receiver had closed it while idle: once more on a new one
            conn = await self._connect(origin)
            try:
                return await self._exchange(conn, origin, head, body)
            except _ClosedBeforeAnswer as exc:
                raise SendError(str(exc)) from None

    async def _exchange(self, conn: Connection, origin: Origin, head: bytes, body: bytes) -> Response:
        keep = False
        try:
            try:
                conn.writer.write(head + body)
                await conn.writer.drain()
                head = await _read_head(conn.reader, first=True)
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise _ClosedBeforeAnswer("the connection closed before an answer") from exc
            response, keep = await self._read_response(conn.reader, head)
            return response
        finally:
            if keep:
                conn.idle_since = self.monotonic()
                self._put_idle(origin, conn)
            else:
                conn.close()

    async def _read_response(self, reader: asyncio.StreamReader,
                             head: bytes) -> tuple[Response, bool]:
        """The answer, and whether the connection may carry another request."""
        while True:
            version, status, headers = _parse_head(head)
            if status >= 200 or status == 101:
                break
            head = await _read_head(reader)  # 1xx informational answers precede the real one
        fields = {k.lower(): v for k, v in headers}
        connection = fields.get(b"connection", b"").lower()
        keep = b"close" not in connection and (version == b"HTTP/1.1" or b"keep-alive" in connection)
        try:
            if status in (101, 204, 304):
                return Response(status, headers, b""), keep and status != 101
            if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
                snippet, complete = await self._read_chunked(reader)
            elif b"content-length" in fields:
                try:
                    length = int(fields[b"content-length"])
                except ValueError:
                    raise SendError("the answer's Content-Length is not a number") from None
                if length < 0:
                    raise SendError("the answer's Content-Length is negative")
                snippet, complete = await self._read_length(reader, length)
            else:  # the body runs until the receiver closes the connection
                snippet, complete = await self._read_to_close(reader)
                keep = False
        except asyncio.IncompleteReadError:
            raise SendError("the connection closed in the middle of the answer") from None
        return Response(status, headers, snippet), keep and complete

    async def _read_length(self, reader: asyncio.StreamReader, length: int) -> tuple[bytes, bool]:
        if length > self.max_body:
            return await reader.read(SNIPPET_BYTES), False
        data = await reader.readexactly(length)
        return data[:SNIPPET_BYTES], True

    async def _read_chunked(self, reader: asyncio.StreamReader) -> tuple[bytes, bool]:
        kept, total = bytearray(), 0
        while True:
            size_line = await _read_line(reader)
            if len(size_line) > 1024:
                raise SendError("the answer's chunked body is malformed")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise SendError("the answer's chunked body is malformed") from None
            if size == 0:
                while await _read_line(reader):  # trailers, up to the blank line
                    pass
                return bytes(kept), True
            total += size
            if total > self.max_body:
                return bytes(kept), False
            chunk = await reader.readexactly(size)
            if len(kept) < SNIPPET_BYTES:
                kept += chunk[:SNIPPET_BYTES - len(kept)]
            if await reader.readexactly(2) != b"\r\n":
                raise SendError("the answer's chunked body is malformed")

    async def _read_to_close(self, reader: asyncio.StreamReader) -> tuple[bytes, bool]:
        kept, total = bytearray(), 0
        while total <= self.max_body:
            chunk = await reader.read(65536)
            if not chunk:
                return bytes(kept), True
            total += len(chunk)
            if len(kept) < SNIPPET_BYTES:
                kept += chunk[:SNIPPET_BYTES - len(kept)]
        return bytes(kept), False

    # ---------------------------------------------------------------- connections

    def _target(self, url: str) -> tuple[Origin, str]:
        known = self._targets.get(url)
        if known is None:
            checked = self.guard.parse(url)
            parts = urlsplit(url)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            # Spaces, controls and non-ASCII become %XX (UTF-8), as a browser sends them;
            # what is already escaped stays as it is.
            target = quote(target, safe="!#$%&'()*+,/:;=?@[]~")
            known = (Origin(checked.scheme, checked.host, checked.port), target)
            if len(self._targets) > 10_000:
                self._targets.clear()
            self._targets[url] = known
        return known

    async def _connect(self, origin: Origin) -> Connection:
        # The guard resolves the host and returns only allowed addresses (or raises
        # AddressRefused / TargetRefused); the socket connects to one of those.
        addresses = await self.guard.connectable(origin.host, origin.port)
        tls = origin.scheme == "https"
        if tls and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        last: OSError | None = None
        for address in addresses:
            try:
                reader, writer = await asyncio.open_connection(
                    address, origin.port, ssl=self.ssl_context if tls else None,
                    server_hostname=origin.host if tls else None, limit=MAX_HEAD_BYTES)
            except OSError as exc:  # ssl.SSLError included
                last = exc
                continue
            self.opened += 1
            return Connection(reader, writer)
        assert last is not None
        raise last

    def _take_idle(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        now = self.monotonic()
        while idle:
            conn = idle.pop()   # the most recently used: the least likely to be closed
            if conn.usable and now - conn.idle_since < self.idle_timeout:
                return conn
            conn.close()
        return None

    def _put_idle(self, origin: Origin, conn: Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self.max_idle_per_origin:
            conn.close()
        else:
            idle.append(conn)

    def sweep(self) -> None:
        """Close connections idle for longer than `idle_timeout`."""
        now = self.monotonic()
        for origin, idle in list(self._idle.items()):
            keep = [c for c in idle if c.usable and now - c.idle_since < self.idle_timeout]
            for conn in idle:
                if conn not in keep:
                    conn.close()
            if keep:
                self._idle[origin] = keep
            else:
                del self._idle[origin]

    def idle_connections(self) -> int:
        return sum(len(v) for v in self._idle.values())

    async def aclose(self) -> None:
        """Close every idle connection (those in use close when their request ends)."""
        idle = [c for conns in self._idle.values() for c in conns]
        self._idle.clear()
        for conn in idle:
            conn.close()
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass


class _ClosedBeforeAnswer(Exception):
    """The receiver closed the connection without answering at all."""


async def _read_head(reader: asyncio.StreamReader, first: bool = False) -> bytes:
    """The answer's status line and headers. A connection closed before the `first` byte
    of an answer raises `_ClosedBeforeAnswer`; closed later, `SendError`."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if first and not exc.partial:
            raise _ClosedBeforeAnswer("the connection closed before an answer") from None
        raise SendError("the connection closed in the middle of the answer") from None
    except asyncio.LimitOverrunError:
        raise SendError("the answer's head is too long") from None


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """One line (of a chunked body), without its line break."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        raise SendError("the connection closed in the middle of the answer") from None
    except asyncio.LimitOverrunError:
        raise SendError("the answer's chunked body is malformed") from None
    return line.rstrip(b"\r\n")


def _parse_head(head: bytes) -> tuple[bytes, int, list[tuple[bytes, bytes]]]:
    """(HTTP version, status, headers) of an answer's head."""
    status_line, *lines = head[:-4].split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise SendError(f"not an HTTP/1.x answer: {status_line[:60]!r}")
    if len(lines) > MAX_HEADERS:
        raise SendError("the answer has too many headers")
    headers = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise SendError(f"malformed header in the answer: {line[:60]!r}")
        headers.append((name, value.strip()))
    return parts[0], int(parts[1]), headers
