"""One connection to the network's event stream: dial it with the `websockets` asyncio
client (its public API only) and hand every raw frame over as it arrives.

It does not reconnect, decode or filter: the sync (`daemon.sync.service`) owns the cursor to
resume from, the backoff between dials (slept on the application's clock) and the filter
(`daemon.sync.filters`, which decodes DAG-CBOR with `libipld` and JSON with pydantic-core).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable
from urllib.parse import urlencode

from pydantic_core import from_json
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from daemon.sync.filters import StreamError

FIREHOSE_METHOD = "com.atproto.sync.subscribeRepos"
JETSTREAM_METHOD = "network.bsky.jetstream.subscribeEvents"
#: Jetstream v2's JSON framing, asked for in the handshake.
JETSTREAM_SUBPROTOCOL = Subprotocol("xrpc.v1.json")

#: The largest frame read, per source: a bigger one fails the connection (which is dialled
#: again from the cursor, after the backoff). A firehose commit carries at most a few MB of
#: blocks (larger ones come as ``tooBig``); a Jetstream v2 frame embeds the record as JSON.
MAX_FRAME_BYTES = {"firehose": 5 * 1024 * 1024, "jetstream": 32 * 1024 * 1024}

#: How long closing the connection may wait for the server's answer to our close frame.
CLOSE_TIMEOUT_SECONDS = 1.0


def stream_url(source: str, url: str, cursor: int | None) -> str:
    """The WebSocket URL to dial: `url` (``sync.url``: a base URL, with or without
    ``/xrpc`` or the method) with ``http(s)`` as ``ws(s)``, the subscription method and,
    when there is one, the cursor to resume from."""
    method = JETSTREAM_METHOD if source == "jetstream" else FIREHOSE_METHOD
    base = url.rstrip("/")
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if base.startswith(plain):
            base = secure + base[len(plain):]
    base = base.removesuffix("/" + method)
    if not base.endswith("/xrpc"):
        base += "/xrpc"
    query = "?" + urlencode({"cursor": cursor}) if cursor is not None else ""
    return f"{base}/{method}{query}"


def _refusal(exc: InvalidStatus) -> StreamError | None:
    """A handshake the server refused with an XRPC error (Jetstream answers ``CursorTooOld``
    this way, before the upgrade), as the `StreamError` an error frame would be; None for
    anything else (a 5xx, a proxy's page), which is just a failed connection."""
    response = exc.response
    if not 400 <= response.status_code < 500 or not response.body:
        return None
    try:
        body = from_json(response.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return None
    message = body.get("message")
    return StreamError(body["error"], message if isinstance(message, str) else None)


async def read_stream(source: str, url: str, *, on_open: Callable[[ClientConnection], None],
                      on_frame: Callable[[bytes | str], Any],
                      deliver: Callable[[Any], Awaitable[None]]) -> None:
    """Connect to `url` and, for every frame in turn, call ``on_frame(frame)``; what it
    returns, unless None, is awaited in ``deliver(item)`` before the next frame is read (a
    slow `deliver` slows the reading: the server may then drop us). Most frames of the
    network are irrelevant, so they cost no coroutine. ``on_open(connection)`` is called once
    the handshake succeeded; closing that connection ends the reading.

    Returns when the stream is closed cleanly (by either side). Raises when the connection
    cannot be made or fails (``OSError``, ``websockets.exceptions.WebSocketException``, a
    timeout), `StreamError` when the server refused us with an XRPC error, and whatever
    `on_frame` or `deliver` raise (the connection is closed first).

    The client's pings (every 20 s, 20 s to answer: `websockets`' defaults) notice a dead
    connection; there is no receive timeout, as a quiet stream (a small PDS) is no failure.
    """
    options: dict[str, Any] = {
        "max_size": MAX_FRAME_BYTES.get(source, MAX_FRAME_BYTES["firehose"]),
        "close_timeout": CLOSE_TIMEOUT_SECONDS,
        "user_agent_header": "commonroom",
    }
    if source == "jetstream":
        options["subprotocols"] = [JETSTREAM_SUBPROTOCOL]
    try:
        async with connect(url, **options) as connection:
            on_open(connection)
            async for frame in connection:  # ends on a clean close, raises on a failed one
                item = on_frame(frame)
                if item is not None:
                    await deliver(item)
    except InvalidStatus as exc:
        refusal = _refusal(exc)
        if refusal is None:
            raise
        raise refusal from exc
