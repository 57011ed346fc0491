"""Holes the second security probe found (issue 22) in the network, proof, parsing and
backup layers: a token header whose ``alg`` is a list, duplicate JSON keys, encoded invite
codes in logs, connection floods, and the smaller findings that go with them."""

from __future__ import annotations

import base64
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.fixtures_communities import Api, seed_community

ADMIN = "did:plc:seedadmin"
USER = "did:plc:seeduser"


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _token(header: dict[str, Any], claims: dict[str, Any] | str) -> str:
    payload = claims if isinstance(claims, str) else _b64(claims)
    return f"{_b64(header)}.{payload}.{base64.urlsafe_b64encode(b'x' * 64).decode().rstrip('=')}"


# ------------------------------------------------------------------ hole 6: proofs


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"identity": {"user_proof": "optional"}}


async def test_a_token_whose_alg_is_not_a_string_is_a_proof_error_not_a_500(app: Any, client: Any) -> None:
    api = await Api.make(app, client)
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id)
    now = int(time.time())
    claims = {"iss": USER, "aud": app.proofs.did, "lxm": "community.commonroom.membership.join",
              "exp": now + 30, "iat": now, "jti": "j" * 16}
    for alg in (["ES256K"], {"ES256K": 1}, 256, None):
        resp = await client.post(api.path(did, "/members/join"), api_key=api.key, json={"userDid": USER},
                                 headers={"Authorization": f"Bearer {_token({'alg': alg, 'typ': 'JWT'}, claims)}"})
        assert resp.status == 401, (alg, resp.text)
        assert resp.json()["error"] == "proof_bad_signature", resp.text
    # A claim named twice (the last would win here, the first elsewhere) is not a token either.
    twice = base64.urlsafe_b64encode(
        f'{{"iss": "did:plc:other", "iss": "{USER}", "aud": "{app.proofs.did}"}}'.encode()).decode().rstrip("=")
    resp = await client.post(api.path(did, "/members/join"), api_key=api.key, json={"userDid": USER},
                             headers={"Authorization": f"Bearer {_token({'alg': 'ES256K'}, twice)}"})
    assert resp.status == 401 and resp.json()["error"] == "proof_bad_signature", resp.text


async def test_a_token_whose_claims_nest_too_deep_is_a_proof_error_not_a_500(app: Any, client: Any) -> None:
    """Claims nested deeper than the JSON parser goes (a RecursionError) fit in a token's
    8 KiB: they are no JWT, as for a request body, not an internal error."""
    api = await Api.make(app, client)
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id)
    deep = base64.urlsafe_b64encode(b"[" * 3000 + b"]" * 3000).decode().rstrip("=")
    resp = await client.post(api.path(did, "/members/join"), api_key=api.key, json={"userDid": USER},
                             headers={"Authorization": f"Bearer {_token({'alg': 'ES256K'}, deep)}"})
    assert resp.status == 401 and resp.json()["error"] == "proof_bad_signature", resp.text


# ------------------------------------------------------------------ keys in the configuration


def test_a_malformed_previous_secret_key_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"storage: {{state_dir: {tmp_path / 'st'}}}\n"
                      f"previous_secret_keys: ['{'ab' * 32}', 'not a key']\n")
    for command in ("serve", "check-config", "migrate"):
        result = subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), command],
                                capture_output=True, text=True, cwd=REPO, timeout=60)
        assert result.returncode == 2, (command, result.stderr)
        assert "configuration error: previous_secret_keys[1]: a secret key must be 32 bytes" in result.stderr
        assert "Traceback" not in result.stderr
    config.write_text(f"storage: {{state_dir: {tmp_path / 'st'}, backup_key: 'short'}}\n")
    result = subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), "check-config"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2 and "storage.backup_key: a secret key must be 32 bytes" in result.stderr


# ------------------------------------------------------------------ hole 5: connection floods


def _half_sent(port: int, source: str, count: int) -> list[socket.socket]:
    """`count` connections from `source` that start a request's head and never finish it."""
    opened = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(2)
        s.bind((source, 0))
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        except OSError:
            s.close()
            continue
        opened.append(s)
    return opened


def _health_from(port: int, source: str, timeout: float = 1.0) -> tuple[int, float]:
    """GET /health from `source`: (status, seconds taken). Raises if it takes longer."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), time.monotonic() - started


def _refused_with_429(conns: list[socket.socket]) -> int:
    refused = 0
    for s in conns:
        s.settimeout(0.5)
        try:
            head = s.recv(4096)
        except (socket.timeout, OSError):
            continue
        if head.startswith(b"HTTP/1.1 429") and b"too_many_connections" in head:
            refused += 1
    return refused


class _Daemon:
    """`commonroom serve` in a subprocess whose open files are capped at `nofile`."""

    def __init__(self, tmp_path: Path, nofile: int, server: dict[str, Any]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        extra = "".join(f", {k}: {v}" for k, v in server.items())
        config = tmp_path / "config.yaml"
        config.write_text(
            f"server: {{host: 127.0.0.1, port: {self.port}, base_url: 'http://127.0.0.1:{self.port}'{extra}}}\n"
            f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{'22' * 32}'\n")
        self.log = tmp_path / "daemon.log"

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with self.log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), "serve"],
                                         cwd=REPO, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
        deadline = time.monotonic() + 60
        while "listening on" not in self.log.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text()


@pytest.fixture
def daemon_at(tmp_path: Path) -> Any:
    started: list[_Daemon] = []

    def start(nofile: int, **server: Any) -> _Daemon:
        started.append(_Daemon(tmp_path, nofile, server))
        return started[-1]

    yield start
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def test_half_sent_requests_from_one_address_leave_health_answering_for_others(daemon_at: Any) -> None:
    """The probe's flood: more half-sent requests from one address than the daemon has files
    for. The address gets its cap (the rest are refused at once with 429), and /health
    from another address still answers within a second."""
    d = daemon_at(128, max_connections_per_address=16)
    flood = _half_sent(d.port, "127.0.0.2", 200)
    try:
        status, took = _health_from(d.port, "127.0.0.3", timeout=1.0)
        assert status == 200 and took < 1.0
        assert _refused_with_429(flood) >= 150
    finally:
        for s in flood:
            s.close()
    log = d.stop()
    assert "Traceback" not in log and log.count("refused a connection from 127.0.0.2") == 1, log


def test_accept_failing_for_lack_of_files_backs_off_and_logs_once(daemon_at: Any) -> None:
    """No cap (0): the flood exhausts the open files, accept() fails with EMFILE; the daemon
    pauses accepting and logs one line per interval, never a traceback per attempt, and
    answers again as soon as files are free."""
    d = daemon_at(96, max_connections_per_address=0)
    flood = _half_sent(d.port, "127.0.0.2", 150)
    try:
        time.sleep(3)
        log = d.log.read_text()
        assert log.count("cannot accept connections: Too many open files") == 1, log
        assert "Traceback" not in log and "Exception in callback" not in log, log
    finally:
        for s in flood:
            s.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            status, _ = _health_from(d.port, "127.0.0.3", timeout=2.0)
            break
        except OSError:
            assert time.monotonic() < deadline
    assert status == 200
    assert "Traceback" not in d.stop()


def test_connection_limits_exempt_trusted_proxies_and_count_websockets_apart() -> None:
    from daemon.http.server import ConnectionLimits

    limits = ConnectionLimits(2, 1, exempt=("10.0.0.0/8",))
    assert limits.open_http("192.0.2.7") and limits.open_http("192.0.2.7")
    assert limits.open_http("192.0.2.7") is False and limits.refused == 1
    assert limits.open_http("::ffff:192.0.2.7") is False   # the same client, written as IPv6
    assert all(limits.open_http("10.1.2.3") is None for _ in range(10))   # a trusted proxy
    # One IPv6 client holds a whole /64: its addresses share one count.
    assert limits.open_http("2001:db8::1") and limits.open_http("2001:db8::2")
    assert limits.open_http("2001:db8::ffff") is False and limits.open_http("2001:db8:0:1::1")
    # WebSocket subscribers have their own budget, whatever the HTTP count.
    assert limits.open_websocket("192.0.2.7") and not limits.open_websocket("192.0.2.7")
    limits.close_websocket("192.0.2.7")
    assert limits.open_websocket("192.0.2.7")
    assert limits.open_count("192.0.2.7") == (2, 1)
    limits.close_http("192.0.2.7")
    assert limits.open_count("192.0.2.7") == (1, 1) and limits.open_http("192.0.2.7")


# ------------------------------------------------------------------ what a refusal says


async def test_refusals_of_host_names_never_say_what_they_resolve_to(app: Any, client: Any) -> None:
    """POST /login needs no account: its errors must not make the daemon an oracle on its
    own DNS. A name resolving to a private or loopback address, or to nothing, is refused
    with the same words, and no address appears."""
    answers: dict[str, list[str]] = {"intranet.example.com": ["10.0.0.5"], "wiki.example.com": ["127.0.0.1"],
                                     "mixed.example.com": ["fd00::7", "192.168.1.9"]}

    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    app.http._transport.guard.resolver = resolve  # the guard under app.http (httpx keeps it there)
    said = {}
    for host in [*answers, "nowhere.example.com"]:
        for typed in (f"https://{host}", f"did:web:{host}"):
            resp = await client.post("/login", json={"input": typed})
            assert resp.status == 400, resp.text
            message = resp.json()["message"]
            assert f"{host} does not resolve to a public address" in message, message
            for leak in ("10.0.0.5", "127.0.0.1", "fd00", "192.168", "private", "loopback", "not known"):
                assert leak not in message, message
            said[typed] = message.replace(host, "HOST")
    assert len({m for t, m in said.items() if t.startswith("https")}) == 1
    assert len({m for t, m in said.items() if t.startswith("did")}) == 1
    # Typed as a handle, the name is looked up the same way, with the same words for all.
    handles = set()
    for host in [*answers, "nowhere.example.com"]:
        resp = await client.post("/login", json={"input": host})
        assert resp.status == 400 and resp.json()["error"] == "unknown_handle", resp.text
        assert not any(leak in resp.text for leak in ("10.0.0.5", "127.0.0.1", "fd00", "192.168"))
        handles.add(resp.json()["message"].replace(host, "HOST"))
    assert len(handles) == 1


# ------------------------------------------------------------------ files and headers


async def test_a_new_database_is_created_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    from store.db import Database

    old = os.umask(0o022)
    try:
        db = Database(tmp_path / "fresh" / "x.sqlite3")
        await db.open()
        async with db.transaction("test") as tx:
            await tx.execute("CREATE TABLE t (x)")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "fresh").iterdir()}
        await db.close()
    finally:
        os.umask(old)
    assert modes["x.sqlite3"] == 0o600
    assert all(mode == 0o600 for mode in modes.values()), modes   # -wal and -shm follow it


async def test_the_api_reference_page_may_not_be_framed(app: Any, client: Any) -> None:
    resp = await client.get("/api/v1/docs")
    assert resp.status == 200 and resp.headers["X-Frame-Options"] == "DENY"


# ------------------------------------------------------------------ invites: a cap and a budget


class TestInvites:
    @pytest.fixture
    def config_overrides(self) -> dict[str, Any]:
        return {"communities": {"max_active_invites": 3},
                "rate_limits": {"auth": {"requests": 3, "window_seconds": 900},
                                "invites": {"requests": 4, "window_seconds": 900}}}

    async def test_a_community_has_at_most_the_configured_active_invites(self, app: Any, client: Any,
                                                                         clock: Any) -> None:
        api = await Api.make(app, client)
        did = await seed_community(app, ADMIN, creator_app_id=api.app_id)

        async def create(**fields: Any) -> Any:
            return await api.post(api.path(did, "/invites"), {"adminDid": ADMIN, **fields})

        made = [await create() for _ in range(2)]
        soon = await create(expiresAt=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.time() + 60)))
        assert all(r.status == 201 for r in [*made, soon]), [r.text for r in made]
        refused = await create()
        assert refused.status == 409 and refused.json()["error"] == "too_many_invites", refused.text
        assert "communities.max_active_invites" in refused.json()["message"]
        # Revoked and expired invites no longer count.
        revoked = await api.delete(api.path(did, f"/invites/{made[0].json()['id']}"), {"adminDid": ADMIN})
        assert revoked.status == 200, revoked.text
        assert (await create()).status == 201
        assert (await create()).status == 409
        clock.advance(120)
        assert (await create()).status == 201

    async def test_sign_in_and_invite_pages_have_separate_budgets(self, app: Any, client: Any) -> None:
        # Sign-in's budget used up ...
        for _ in range(3):
            assert (await client.post("/login", json={"input": "https://10.0.0.1"})).status == 400
        assert (await client.post("/login", json={"input": "https://10.0.0.1"})).status == 429
        # ... leaves the invites' whole: the preview and the page share that one.
        for _ in range(3):
            assert (await client.get("/api/v1/invites/nosuchcode0123456789abcd")).status == 404
        assert (await client.get("/invite/nosuchcode0123456789abcd")).status == 404
        assert (await client.get("/api/v1/invites/nosuchcode0123456789abcd")).status == 429
        assert (await client.get("/invite/nosuchcode0123456789abcd")).status == 429


# ------------------------------------------------------------------ names that look like others


async def test_names_typed_here_may_not_hold_direction_overrides_or_zero_width_spaces(app: Any, client: Any) -> None:
    from tests.helpers import login_as, register_app

    session = await login_as(app, "did:plc:namer", "namer.test")
    for bad in ("adm\u202enimda", "Garden\u2066 club", "pay\u200bpal", "\ufeffAdmin", "x\u2060yz"):
        resp = await client.post("/api/v1/apps/register", json={"name": bad, "domain": "names.example.com"},
                                 session=session)
        assert resp.status == 400, resp.text
        assert resp.json()["details"][0]["field"] == "name" and "U+" in resp.json()["message"]
    did = await seed_community(app, ADMIN)
    admin = await login_as(app, ADMIN, "seedadmin.test")
    resp = await client.request("PUT", f"/communities/{did}/profile", json={"displayName": "Club\u202e"},
                                session=admin)
    assert resp.status == 400 and resp.json()["details"][0]["field"] == "displayName", resp.text
    # The joiners of emoji and of Persian or Indic spelling are letters' business: kept.
    made = await register_app(client, session, name="Family \U0001F468\u200d\U0001F469\u200d\U0001F467 m\u200cn",
                              domain="family.example.com")
    assert made["name"] == "Family \U0001F468\u200d\U0001F469\u200d\U0001F467 m\u200cn"


async def test_names_from_the_network_are_shown_without_direction_overrides(app: Any, client: Any) -> None:
    from plugins.communities import store as members_store

    bob = "did:plc:seedbob"
    did = await seed_community(app, ADMIN, members=(bob,))
    shown = "Bob \U0001F469\u200d\U0001F4BB"
    async with app.db.transaction("test.profile") as tx:
        await members_store.upsert_profile_tx(tx, bob, "bob.test", "\u202eBob\u200b \U0001F469\u200d\U0001F4BB\u2069",
                                              None, "2026-01-01T00:00:00Z")
    page = await client.get(f"/c/{did}")
    assert page.status == 200, page.text
    assert shown in page.text, page.text
    for c in ("\u202e", "\u200b", "\u2069"):
        assert c not in page.text


def test_a_head_that_never_ends_is_dropped_after_the_idle_timeout(daemon_at: Any) -> None:
    """Tornado's idle timeout also bounds a head once started: a drip-fed head is closed."""
    d = daemon_at(1024, idle_connection_timeout_seconds=1)
    (conn,) = _half_sent(d.port, "127.0.0.2", 1)
    conn.settimeout(10)
    started = time.monotonic()
    conn.sendall(b"more")
    assert conn.recv(4096) == b""   # closed by the server, unanswered
    assert time.monotonic() - started < 5
    conn.close()
    assert _health_from(d.port, "127.0.0.2")[0] == 200
    d.stop()


async def test_the_up_front_check_of_a_url_says_the_same_for_every_refused_name() -> None:
    """What a webhook's `url` is checked with when it is saved."""
    from daemon.security.netguard import Guard, TargetRefused

    answers = {"private.example.com": ["10.9.8.7"], "loop.example.com": ["::1"], "none.example.com": []}

    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    guard = Guard(False, [], resolver=resolve)
    said = set()
    for host in [*answers, "nxdomain.example.com"]:
        with pytest.raises(TargetRefused) as refused:
            await guard.check(f"https://{host}/hook")
        said.add(str(refused.value).replace(host, "HOST"))
    assert said == {"the host HOST does not resolve to a public address"}
    with pytest.raises(TargetRefused, match="10.9.8.7 is a private address"):
        await guard.check("https://10.9.8.7/hook")   # a typed address is named, with its kind


@pytest.mark.parametrize("server, key", [
    ({"max_connections_per_address": -1}, "server.max_connections_per_address"),
    ({"max_websockets_per_address": -5}, "server.max_websockets_per_address"),
    ({"idle_connection_timeout_seconds": 0}, "server.idle_connection_timeout_seconds"),
    ({"body_timeout_seconds": 7200}, "server.body_timeout_seconds"),
])
def test_connection_settings_out_of_range_are_configuration_errors(server: dict[str, Any], key: str) -> None:
    from daemon.runtime.config import Config, ConfigError

    with pytest.raises(ConfigError) as refused:
        Config.from_mapping({"server": server})
    assert refused.value.path == key
    assert Config.from_mapping({"server": {"max_connections_per_address": 0}}).server.max_connections_per_address == 0


async def test_a_refused_tls_connection_that_never_starts_its_handshake_is_closed_soon(
        io_loop: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """Over the cap, the 429 is written and the connection closed; with TLS served directly
    (`server.tls_cert`) that write waits for the client's handshake, so a client that opens
    TCP connections and sends nothing kept every refused one open, uncounted: the cap did
    not hold. A refusal gives the client a few seconds at most."""
    import asyncio
    import ssl

    from tornado.testing import bind_unused_port
    from tornado.web import Application

    from commonroom_testing.localnet import make_test_ca
    from daemon.http import server as server_mod

    monkeypatch.setattr(server_mod, "REFUSE_TIMEOUT", 0.3, raising=False)
    ca = make_test_ca(tmp_path, ["localhost"])
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(ca.cert_pem), str(ca.key_pem))
    srv = server_mod.Server(Application(), limits=server_mod.ConnectionLimits(1, 0), ssl_options=tls,
                            idle_connection_timeout=60)
    sock, port = bind_unused_port()
    srv.add_sockets([sock])
    first = socket.create_connection(("127.0.0.1", port))  # the address's one connection
    second = None
    try:
        await asyncio.sleep(0.2)
        second = socket.create_connection(("127.0.0.1", port))  # over the cap; no TLS ever
        second.setblocking(False)
        closed = False
        deadline = time.monotonic() + 3
        while not closed and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            try:
                closed = second.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed = True
        assert closed, "the refused connection is still open"
        assert srv.limits.refused == 1
    finally:
        srv.stop()
        first.close()
        if second is not None:
            second.close()
