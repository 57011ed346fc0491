"""The sync's own stream reader (daemon/sync/reader.py) against a small local WebSocket server
that plays the stream's part, frame by frame and connection by connection.

Jetstream cannot run in this environment (it is a separate service in front of a relay), so
this is where the Jetstream mode is tested end to end: the handshake asks for its
``xrpc.v1.json`` framing, frames constructed exactly as Jetstream v2 sends them reach the
plugins, a reconnect resumes at the cursor, and a refused cursor (``CursorTooOld``, answered
before the upgrade) starts again from the live stream. The firehose's own path is tested on
the real devnet PDS (tests/test_sync_network.py); here only what a PDS cannot be made to do:
send a frame that cannot be decoded, or refuse our cursor."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Callable, Iterator

import libipld
import pytest
from websockets.sync.server import ServerConnection, serve

from daemon import hookimpl
from daemon.sync import Interest
from daemon.sync.reader import stream_url

ALICE = "did:plc:alicealicealicealicealic"
BOB = "did:plc:bobbobbobbobbobbobbobbobb"
JS = "network.bsky.jetstream.subscribeEvents#"


def js_account(did: str, seq: int) -> str:
    return json.dumps({"$type": "message", "payload": {
        "$type": JS + "account", "did": did, "seq": seq, "time": "2026-11-26T00:00:00.000000Z",
        "account": {"did": did, "seq": 7, "time": "2026-11-26T00:00:00.000000Z", "active": True}}})


def js_like(did: str, seq: int) -> str:
    return json.dumps({"$type": "message", "payload": {
        "$type": JS + "commit", "did": did, "seq": seq, "time": "2026-11-26T00:00:00.000000Z", "rev": "3rev",
        "collection": "app.bsky.feed.like", "rkey": "3kx", "operation": "create",
        "cid": "bafyreihshmjgvw4kqfnc3tmm5h767taf5haalx4bli3v5dsashpzacly6q", "record": {"subject": "x"}}})


def fh_frame(header: dict, body: dict) -> bytes:
    return libipld.encode_dag_cbor(header) + libipld.encode_dag_cbor(body)


def fh_account(did: str, seq: int) -> bytes:
    return fh_frame({"op": 1, "t": "#account"},
                    {"did": did, "seq": seq, "time": "2026-11-26T00:00:00.000Z", "active": True})


class FakeStream:
    """A WebSocket server on a loopback port, in a thread. Connection *n* plays ``steps[n]``:
    ``("send", [frames])`` sends the frames and closes cleanly, ``("refuse", status, body)``
    answers the handshake with that status and JSON body; connections past the steps stay
    open and quiet. Records each connection's request path and subprotocol."""

    def __init__(self, steps: list[tuple], subprotocols: list[str] | None = None) -> None:
        self.steps = steps
        self.paths: list[str] = []
        self.subprotocols: list[str | None] = []
        self._lock = threading.Lock()
        self._server = serve(self._handle, "127.0.0.1", 0, process_request=self._process,
                             subprotocols=subprotocols)
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _step(self, index: int) -> tuple:
        return self.steps[index] if index < len(self.steps) else ("idle",)

    def _process(self, connection: ServerConnection, request: Any) -> Any:
        with self._lock:
            index = len(self.paths)
            self.paths.append(request.path)
        step = self._step(index)
        if step[0] == "refuse":
            response = connection.respond(step[1], json.dumps(step[2]))
            response.headers["Content-Type"] = "application/json"
            self.subprotocols.append(None)
            return response
        return None

    def _handle(self, connection: ServerConnection) -> None:
        with self._lock:
            index = len(self.subprotocols)
            self.subprotocols.append(connection.subprotocol)
        step = self._step(index)
        if step[0] == "send":
            for frame in step[1]:
                connection.send(frame)
            connection.close()
            return
        for _ in connection:  # quiet until the client closes
            pass

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


class Follower:
    """Follows ALICE, and records every event the sync hands to plugins."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    @hookimpl
    def cr_sync_interest(self, app: Any) -> Interest:
        async def load(db: Any, mark: Any) -> tuple[set[str], bool]:
            return (set() if mark else {ALICE}), True
        return Interest("test-follower", load)

    @hookimpl
    def cr_sync_events_tx(self, app: Any, tx: Any, events: list[Any]) -> None:
        self.events.extend(events)


@pytest.fixture
def follower() -> Follower:
    return Follower()


@pytest.fixture
def extra_plugins(follower: Follower) -> tuple:
    return (follower,)


@pytest.fixture
def steps() -> list[tuple]:
    return []


@pytest.fixture
def source() -> str:
    return "firehose"


@pytest.fixture
def stream(steps: list[tuple], source: str) -> Iterator[FakeStream]:
    fake = FakeStream(steps, ["xrpc.v1.json"] if source == "jetstream" else None)
    yield fake
    fake.close()


@pytest.fixture
def config_overrides(stream: FakeStream, source: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{stream.port}"
    if source == "jetstream":
        url += "/xrpc/network.bsky.jetstream.subscribeEvents"
    return {"sync": {"source": source, "url": url}}


async def until(check: Callable[[], bool], what: str, step: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + 20  # generous: the machine may be busy
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within 20 s: {what}")
        if step is not None:
            step()
        await asyncio.sleep(0.02)


def kinds(follower: Follower) -> list[tuple[str, str, int]]:
    return [(e.kind, e.did, e.seq) for e in follower.events]


def test_stream_url_takes_a_base_url_or_the_subscription_url_and_adds_the_cursor():
    fh = "com.atproto.sync.subscribeRepos"
    assert stream_url("firehose", "http://localhost:2583", None) == f"ws://localhost:2583/xrpc/{fh}"
    assert stream_url("firehose", "https://bsky.network/", 42) == f"wss://bsky.network/xrpc/{fh}?cursor=42"
    assert stream_url("firehose", "wss://relay.test/xrpc", 7) == f"wss://relay.test/xrpc/{fh}?cursor=7"
    js = "wss://js.test/xrpc/network.bsky.jetstream.subscribeEvents"
    assert stream_url("jetstream", js, 9) == js + "?cursor=9"
    assert stream_url("jetstream", "https://js.test", None) == js


@pytest.mark.parametrize("source", ["jetstream"])
@pytest.mark.parametrize("steps", [[("send", [js_account(ALICE, 100), js_like(BOB, 101)])]])
async def test_jetstream_frames_reach_plugins_and_a_reconnect_resumes_at_the_cursor(app, clock, stream, follower):
    await until(lambda: kinds(follower) == [("account", ALICE, 100)], "the followed account's event")
    assert stream.subprotocols[0] == "xrpc.v1.json"  # Jetstream v2's JSON framing, asked for
    assert stream.paths[0] == "/xrpc/network.bsky.jetstream.subscribeEvents"  # a first start: live
    # the server closed the stream: dialled again after 1 s on the app's clock
    await until(lambda: app.sync.state == "backoff" and clock.sleepers, "the backoff")
    clock.advance(1.0)
    await until(lambda: len(stream.subprotocols) == 2 and app.sync.state == "live", "the second connection")
    # Jetstream replays from its cursor (inclusive): after the unrelated like at 101
    assert stream.paths[1] == "/xrpc/network.bsky.jetstream.subscribeEvents?cursor=102"
    await until(lambda: app.sync.cursor == 101, "the cursor saved past the irrelevant frame",
                step=lambda: clock.advance(1.0))
    assert kinds(follower) == [("account", ALICE, 100)]


@pytest.mark.parametrize("source", ["jetstream"])
@pytest.mark.parametrize("steps", [[
    ("send", [js_account(ALICE, 5)]),
    ("refuse", 400, {"error": "CursorTooOld", "message": "cursor is older than the retained events"}),
]])
async def test_jetstream_refusing_the_cursor_at_the_handshake_rebuilds_and_follows_the_live_stream(
        app, clock, stream, follower):
    await until(lambda: kinds(follower) == [("account", ALICE, 5)], "the first event")
    await until(lambda: len(stream.paths) == 3 and app.sync.state == "live",
                "refused at cursor 6, then dialled again", step=lambda: clock.advance(1.0))
    assert stream.paths[1].endswith("?cursor=6")
    # events may have been missed: every community is rebuilt, and the stream followed from now
    assert ("gap", "", -1) in kinds(follower)
    assert stream.paths[2] == "/xrpc/network.bsky.jetstream.subscribeEvents"


@pytest.mark.parametrize("source", ["firehose"])
@pytest.mark.parametrize("steps", [[
    ("send", [b"\xff not dag-cbor", "a text frame", fh_account(BOB, 10), fh_account(ALICE, 11),
              fh_frame({"op": -1}, {"error": "FutureCursor", "message": "cursor in the future"})]),
]])
async def test_firehose_skips_frames_it_cannot_decode_and_a_refused_cursor_starts_over(app, clock, stream, follower):
    await until(lambda: ("account", ALICE, 11) in kinds(follower), "the frame after the bad ones")
    await until(lambda: len(stream.paths) == 2 and app.sync.state == "live",
                "dialled again after the error frame", step=lambda: clock.advance(1.0))
    assert stream.subprotocols[0] is None
    assert kinds(follower) == [("account", ALICE, 11), ("gap", "", -1)]
    assert stream.paths[1] == "/xrpc/com.atproto.sync.subscribeRepos"  # from the live stream
    assert app.sync.counts["frames"] >= 3


def test_an_instance_that_follows_no_stream_does_not_load_the_stream_decoders(tmp_path) -> None:
    """`sync.source: off` (the default): the stream's decoders (pydantic-core, libipld) and the
    WebSocket client are never imported, ~3.4 MB of resident memory (docs/performance.md)."""
    import subprocess
    import sys
    from pathlib import Path
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from daemon.runtime.app import create_app, plugin_sections\n"
        "from daemon.runtime.config import Config\n"
        "from daemon.runtime.plugins import build_plugin_manager\n"
        "state = Path(sys.argv[1])\n"
        "pm = build_plugin_manager((), (), load_entry_points=False)\n"
        "config = Config.from_mapping({'storage': {'state_dir': str(state)}, 'secret_key': '00' * 31 + '01',\n"
        "                              'log_level': 'warning'}, base_dir=state, plugin_sections=plugin_sections(pm))\n"
        "async def main():\n"
        "    app = await create_app(config, pm)\n"
        "    print(app.sync.state, sorted({m.split('.')[0] for m in sys.modules} & {'pydantic_core', 'libipld', 'websockets'}))\n"
        "    await app.shutdown()\n"
        "asyncio.run(main())\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "off []"
