"""XRPC timeouts, retries and error mapping, against a tiny scripted server on loopback.

The real PDS cannot be made to answer 500 or 429 (with a Retry-After) on demand, so these
failures come from a local Tornado app that plays a misbehaving PDS. Pausing and stopping
the real PDS is tested in test_atproto_failures.py.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import tornado.web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from daemon.atproto.lexicons import LexiconError
from daemon.atproto.pds import PdsError, RepoClient, xrpc


class Script:
    """What the fake PDS answers, per path: a list of (status, headers, body) used in turn;
    the last one repeats."""

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, dict[str, str], Any]]] = {}
        self.calls: dict[str, int] = {}
        self.delay = 0.0

    def hits(self, nsid: str) -> int:
        return self.calls.get(f"/xrpc/{nsid}", 0)


class FakePds(tornado.web.RequestHandler):
    def initialize(self, script: Script) -> None:
        self.script = script

    async def _answer(self) -> None:
        path = self.request.path
        n = self.script.calls.get(path, 0)
        self.script.calls[path] = n + 1
        if self.script.delay:
            await asyncio.sleep(self.script.delay)
        answers = self.script.answers.get(path) or [(404, {}, {"error": "MethodNotImplemented"})]
        status, headers, body = answers[min(n, len(answers) - 1)]
        self.set_status(status)
        for k, v in headers.items():
            self.set_header(k, v)
        self.finish(body)

    get = post = _answer


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"atproto": {"allow_insecure_http": True, "allowed_private_targets": ["127.0.0.0/8"],
                        "request_timeout_seconds": 0.5,
                        "max_retries": 2, "retry_backoff_seconds": 0.01,
                        "retry_after_max_seconds": 0.4}}


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between attempts the client asks for (recorded, not waited)."""
    from daemon.atproto import pds
    asked: list[float] = []

    async def pause(delay: float) -> None:
        asked.append(delay)

    monkeypatch.setattr(pds, "_pause", pause)
    return asked


@pytest.fixture
def fake_pds(io_loop: Any) -> Any:
    script = Script()
    sock, port = bind_unused_port()
    server = HTTPServer(tornado.web.Application([(r"/.*", FakePds, {"script": script})]))
    server.add_sockets([sock])
    script.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield script
    server.stop()


async def test_a_5xx_is_retried_and_the_next_success_returned(app: Any, fake_pds: Script) -> None:
    fake_pds.answers["/xrpc/x.y.z"] = [(500, {}, {"error": "InternalServerError", "message": "boom"}),
                                       (502, {}, "bad gateway"), (200, {}, {"ok": True})]
    assert await xrpc(app, "GET", fake_pds.url, "x.y.z") == {"ok": True}
    assert fake_pds.hits("x.y.z") == 3


async def test_persistent_5xx_is_a_502_with_the_pds_message_after_bounded_attempts(
        app: Any, fake_pds: Script) -> None:
    fake_pds.answers["/xrpc/x.y.z"] = [(500, {}, {"error": "InternalServerError",
                                                  "message": "database is locked"})]
    with pytest.raises(PdsError) as err:
        await xrpc(app, "POST", fake_pds.url, "x.y.z", json={})
    assert fake_pds.hits("x.y.z") == 3  # max_retries=2
    assert err.value.status == 502
    assert err.value.body() == {"error": "pds_error", "message": "database is locked"}
    assert err.value.pds_status == 500


async def test_a_4xx_is_never_retried(app: Any, fake_pds: Script) -> None:
    fake_pds.answers["/xrpc/x.y.z"] = [(400, {}, {"error": "InvalidRequest", "message": "bad rkey"}),
                                       (200, {}, {"ok": True})]
    with pytest.raises(PdsError) as err:
        await xrpc(app, "POST", fake_pds.url, "x.y.z", json={})
    assert fake_pds.hits("x.y.z") == 1
    assert err.value.status == 502 and err.value.pds_error == "InvalidRequest"
    assert err.value.message == "bad rkey"


async def test_429_waits_for_retry_after_but_no_longer_than_the_cap(app: Any, fake_pds: Script,
                                                                   pauses: list[float]) -> None:
    fake_pds.answers["/xrpc/x.y.z"] = [(429, {"Retry-After": "30"}, {"error": "RateLimitExceeded"}),
                                       (200, {}, {"ok": 1})]
    assert await xrpc(app, "GET", fake_pds.url, "x.y.z") == {"ok": 1}
    assert pauses == [0.4]  # capped at retry_after_max_seconds=0.4, not 30 s


async def test_429_retry_after_shorter_than_the_cap_is_honoured(app: Any, fake_pds: Script,
                                                                pauses: list[float]) -> None:
    fake_pds.answers["/xrpc/x.y.z"] = [(429, {"Retry-After": "0"}, {"error": "RateLimitExceeded"}),
                                       (429, {"Retry-After": "0"}, {"error": "RateLimitExceeded"}),
                                       (429, {"Retry-After": "0"}, {"error": "RateLimitExceeded",
                                                                    "message": "slow down"})]
    with pytest.raises(PdsError) as err:
        await xrpc(app, "GET", fake_pds.url, "x.y.z")
    assert pauses == [0, 0]  # the server's word, not the backoff
    assert fake_pds.hits("x.y.z") == 3 and err.value.message == "slow down"


async def test_a_silent_server_times_out_into_a_502_in_bounded_time(app: Any, fake_pds: Script) -> None:
    fake_pds.answers["/xrpc/x.y.z"] = [(200, {}, {"ok": True})]
    fake_pds.delay = 5.0
    with pytest.raises(PdsError) as err:
        await xrpc(app, "GET", fake_pds.url, "x.y.z")
    assert fake_pds.hits("x.y.z") == 3  # each attempt timed out (0.5 s), then gave up
    assert err.value.status == 502 and "did not answer" in err.value.message and "timed out" in err.value.message
    assert err.value.pds_status is None


async def test_a_closed_port_is_a_502_after_bounded_retries(app: Any) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(PdsError) as err:
        await xrpc(app, "GET", f"http://127.0.0.1:{port}", "x.y.z")
    assert err.value.status == 502 and "3 attempt(s)" in err.value.message


async def test_plain_http_is_refused_unless_configured(app: Any, fake_pds: Script) -> None:
    app.config = app.config.replace(atproto=app.config.atproto.__class__(allow_insecure_http=False))
    with pytest.raises(PdsError) as err:
        await xrpc(app, "GET", fake_pds.url, "x.y.z")
    assert "only https://" in err.value.message
    assert fake_pds.hits("x.y.z") == 0


async def test_an_expired_token_is_refreshed_once_and_the_call_repeated(app: Any, fake_pds: Script) -> None:
    fake_pds.answers["/xrpc/com.atproto.repo.deleteRecord"] = [
        (400, {}, {"error": "ExpiredToken", "message": "Token has expired"}), (200, {}, {})]
    asked: list[str | None] = []

    async def tokens(stale: str | None) -> str:
        asked.append(stale)
        return "new" if stale else "old"

    repo = RepoClient(app, "did:plc:abc", fake_pds.url, tokens)
    await repo.delete_record("com.example.thing", "3k2abcdefgh22")
    assert asked == [None, "old"]
    assert fake_pds.hits("com.atproto.repo.deleteRecord") == 2


async def test_records_of_our_lexicons_are_validated_before_anything_is_sent(
        app: Any, fake_pds: Script) -> None:
    async def tokens(stale: str | None) -> str:
        return "token"

    repo = RepoClient(app, "did:plc:abc", fake_pds.url, tokens)
    with pytest.raises(LexiconError) as err:
        await repo.create_record("community.commonroom.membershipProof",
                                 {"memberDid": "alice.test", "confirmedAt": "now"})
    assert "memberDid" in str(err.value) and "confirmedAt" in str(err.value)
    assert fake_pds.calls == {}
