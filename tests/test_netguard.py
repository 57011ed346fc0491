"""The SSRF guard on the daemon's own outbound client (`app.http`): what outsiders can make
the daemon fetch (`POST /login` server URLs, DID documents' PDS endpoints) must not reach
loopback, private or link-local addresses unless `atproto.allowed_private_targets` says so.

Each test starts real listeners on loopback and counts the connections they receive: a
refused target must not see a single one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Iterator

import pytest

from daemon.atproto.pds import PdsError, read_user_profile
from daemon.runtime.config import Config, ConfigError
from daemon.security.netguard import Guard

DID = "did:plc:netguardtestaaaaaaaaaaab"  # a strict did:plc: 24 base32 characters
BASE = {"allow_insecure_http": True, "max_retries": 0, "request_timeout_seconds": 2.0,
        "plc_url": "http://127.0.0.1:9"}


class Listener:
    """A TCP listener that counts connections and answers HTTP GETs from `routes`
    (path -> JSON body; anything else is a 404)."""

    def __init__(self) -> None:
        self.connections = 0
        self.paths: list[str] = []
        self.routes: dict[str, Any] = {}
        self.server: asyncio.AbstractServer | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self, host: str) -> None:
        self.server = await asyncio.start_server(self._serve, host, 0)
        self.host, self.port = host, self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            path = head.split(b" ", 2)[1].decode().split("?", 1)[0]
            self.paths.append(path)
            if path in self.routes:
                status, body = "200 OK", json.dumps(self.routes[path]).encode()
            else:
                status, body = "404 Not Found", b'{"error":"NotFound"}'
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def listen(io_loop: Any) -> Iterator[Callable[[str], Listener]]:
    """``listen("127.0.0.1")`` -> a started Listener on that address."""
    started: list[Listener] = []

    def make(host: str = "127.0.0.1") -> Listener:
        listener = Listener()
        io_loop.run_sync(lambda: listener.start(host))
        started.append(listener)
        return listener

    yield make
    for listener in started:
        assert listener.server is not None
        listener.server.close()


@pytest.fixture
def target(listen: Callable[[str], Listener]) -> Listener:
    """A would-be victim on loopback: it must never be contacted while refused."""
    return listen("127.0.0.1")


async def login(client: Any, text: str) -> Any:
    return await client.post("/login", json={"input": text})


# ------------------------------------------------------------------ the default: public only


class TestDefaultRefusesNonPublicServers:
    @pytest.fixture
    def config_overrides(self) -> dict[str, Any]:
        return {"atproto": BASE}  # plain http allowed, so only the guard stands in the way

    @pytest.mark.parametrize("url", ["http://127.0.0.1:{port}", "http://localhost:{port}",
                                     "http://[::ffff:127.0.0.1]:{port}/some/path"])
    async def test_a_loopback_server_url_is_a_400_and_never_contacted(self, app, client, target, url):
        resp = await login(client, url.format(port=target.port))
        assert resp.status == 400, resp.text
        body = resp.json()
        assert body["error"] == "server_not_reachable"
        assert "not reachable from this service" in body["message"]
        # A literal address is named; a host name's refusal never says what it resolves to.
        assert "loopback" in body["message"] if "localhost" not in url else \
            "localhost does not resolve to a public address" in body["message"]
        assert target.connections == 0

    @pytest.mark.parametrize("url", ["https://10.0.0.1", "https://169.254.169.254",
                                     "https://[fd00::1]:8443", "https://100.64.0.1"])
    async def test_private_and_link_local_server_urls_are_a_400(self, app, client, url):
        resp = await login(client, url)
        assert resp.status == 400, resp.text
        assert resp.json()["error"] == "server_not_reachable"
        assert "not reachable from this service" in resp.json()["message"]

    @pytest.fixture
    def proxy(self, listen: Callable[[str], Listener]) -> Listener:
        return listen("127.0.0.1")

    async def test_a_proxy_from_the_environment_is_not_used(self, app, client, proxy, monkeypatch):
        # A proxy resolves names itself, out of the guard's sight: app.http must ignore it.
        # (app.http is made at its first use, below, so it sees these variables.)
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        resp = await login(client, "https://10.0.0.1")
        assert resp.status == 400, resp.text
        assert proxy.connections == 0


# ------------------------------------------------------------------ a DID document names the PDS


class TestDidDocumentNamingARefusedPds:
    """A (stub) PLC directory on 127.0.0.2, which the operator allowed, serves a DID document
    whose PDS is on 127.0.0.1, which nobody allowed."""

    @pytest.fixture
    def plc(self, listen: Callable[[str], Listener], target: Listener) -> Listener:
        plc = listen("127.0.0.2")
        plc.routes[f"/{DID}"] = {
            "id": DID, "alsoKnownAs": [],
            "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",
                         "serviceEndpoint": target.url}]}
        return plc

    @pytest.fixture
    def config_overrides(self, plc: Listener) -> dict[str, Any]:
        return {"atproto": {**BASE, "plc_url": plc.url, "allowed_private_targets": ["127.0.0.2/32"]}}

    async def test_login_with_the_did_is_a_502_pds_error(self, app, client, plc, target):
        resp = await login(client, DID)
        assert resp.status == 502, resp.text
        assert resp.json()["error"] == "pds_error"
        assert "not reachable from this service" in resp.json()["message"]
        assert plc.paths == [f"/{DID}"]      # the document was read ...
        assert target.connections == 0       # ... but its PDS never contacted

    async def test_reading_from_that_pds_is_a_502_pds_error(self, app, plc, target):
        with pytest.raises(PdsError) as info:
            await read_user_profile(app, DID)
        assert (info.value.status, info.value.code) == (502, "pds_error")
        assert "127.0.0.1 is a loopback address" in info.value.message
        assert target.connections == 0


# ------------------------------------------------------------------ the allowlist


class TestAllowlist:
    @pytest.fixture
    def config_overrides(self) -> dict[str, Any]:
        return {"atproto": {**BASE, "allowed_private_targets": ["localhost"]}}

    async def test_an_allowed_host_name_is_contacted(self, app, client, target):
        resp = await login(client, f"http://localhost:{target.port}")
        # The listener is no OAuth server: the login fails, but only after asking it.
        assert resp.status == 502, resp.text
        assert resp.json()["error"] == "server_metadata_missing"
        assert "/.well-known/oauth-protected-resource" in target.paths

    async def test_the_same_address_under_another_name_is_still_refused(self, app, client, target):
        resp = await login(client, f"http://127.0.0.1:{target.port}")
        assert resp.status == 400, resp.text
        assert target.connections == 0

    @pytest.mark.parametrize("config_overrides", [{"atproto": {
        **BASE, "allowed_private_targets": ["127.0.0.0/8", "::1"]}}])
    async def test_an_allowed_range_is_contacted(self, app, client, target):
        resp = await login(client, f"http://127.0.0.1:{target.port}")
        assert resp.status == 502, resp.text
        assert target.connections >= 1


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "http://pds.lan", "pds.lan:2583", "1.2.3", ""])
def test_an_unusable_allowlist_entry_is_refused_naming_the_key(entry):
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"atproto": {"allowed_private_targets": ["127.0.0.0/8", entry]}})
    assert info.value.path == "atproto.allowed_private_targets[1]"


def test_allowlist_entries_may_be_ranges_addresses_and_names():
    config = Config.from_mapping({"atproto": {"allowed_private_targets": [
        "10.1.0.0/16", "::1", "192.168.1.7", "pds.lan"]}})
    assert config.atproto.allowed_private_targets == ("10.1.0.0/16", "::1", "192.168.1.7", "pds.lan")
    assert Config.from_mapping({}).atproto.allowed_private_targets == ()


# ------------------------------------------------------------------ the address rules


@pytest.mark.parametrize("address, words", [
    ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
    ("192.168.1.1", "private"), ("169.254.169.254", "link-local"), ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"), ("100.64.0.1", "not a public"), ("::1", "loopback"),
    ("fe80::1", "link-local"), ("fd00::1", "private"), ("::ffff:10.0.0.1", "private"),
    ("64:ff9b::a00:1", "reserved"), ("2002:7f00:1::1", "loopback"),
])
def test_non_public_addresses_are_refused(address, words):
    reason = Guard(True, ()).refusal(address)
    assert reason is not None and words in reason


def test_allowlisted_ranges_and_names():
    guard = Guard(True, ["10.1.0.0/16", "::1", "pds.lan"])
    assert guard.refusal("10.1.2.3") is None
    assert guard.refusal("10.2.0.1") is not None
    assert guard.refusal("::1") is None and guard.refusal("::ffff:10.1.0.9") is None
    assert guard.host_allowed("PDS.lan.") and not guard.host_allowed("other.lan")
