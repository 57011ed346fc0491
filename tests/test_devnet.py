"""The local devnet (commonroom_testing/localnet.py): a real PLC directory + reference PDS that other tests
build on. These tests pin down what they rely on."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import json
import secrets
import socket
import ssl
import threading
from collections.abc import Iterator

import httpx
import pytest

from commonroom_testing.localnet import Devnet, DevnetError, TestCA
from tests.fixtures_devnet import TEST_SERVICE_HOST

COLLECTION = "dev.commonroom.test.note"


@pytest.fixture
def web() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15, trust_env=False) as client:
        yield client


def unique_handle(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}.test"  # the PDS allows 3-18 characters before .test


def xrpc(web: httpx.Client, devnet: Devnet, nsid: str, *, body: dict | None = None,
         params: dict | None = None, token: str | None = None,
         expect: int = 200) -> dict:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    url = f"{devnet.pds_url}/xrpc/{nsid}"
    r = (web.post(url, json=body, headers=headers) if body is not None
         else web.get(url, params=params, headers=headers))
    assert r.status_code == expect, f"{nsid}: {r.status_code} {r.text}"
    return r.json() if r.content else {}


@pytest.mark.pds
def test_pds_answers_describe_server(web: httpx.Client, devnet: Devnet) -> None:
    assert devnet.pds_url.startswith("http://localhost:")
    assert devnet.plc_url.startswith("http://localhost:")
    info = xrpc(web, devnet, "com.atproto.server.describeServer")
    assert info["availableUserDomains"] == [".test"]
    assert info["inviteCodeRequired"] is False
    meta = web.get(f"{devnet.pds_url}/.well-known/oauth-authorization-server").json()
    assert meta["issuer"] == devnet.pds_url


@pytest.mark.pds
def test_account_logs_in_and_writes_reads_deletes_records(web: httpx.Client,
                                                          devnet: Devnet) -> None:
    account = devnet.create_account(unique_handle("crud"))
    assert account["did"].startswith("did:plc:")
    session = xrpc(web, devnet, "com.atproto.server.createSession",
                   body={"identifier": account["handle"], "password": account["password"]})
    assert session["did"] == account["did"]
    token, did = session["accessJwt"], account["did"]

    record = {"$type": COLLECTION, "text": "hello", "createdAt": "2026-01-01T00:00:00Z"}
    created = xrpc(web, devnet, "com.atproto.repo.createRecord", token=token,
                   body={"repo": did, "collection": COLLECTION, "record": record})
    rkey = created["uri"].rsplit("/", 1)[1]
    assert created["uri"] == f"at://{did}/{COLLECTION}/{rkey}"
    xrpc(web, devnet, "com.atproto.repo.putRecord", token=token,
         body={"repo": did, "collection": COLLECTION, "rkey": "self", "record": record})

    got = xrpc(web, devnet, "com.atproto.repo.getRecord",
               params={"repo": did, "collection": COLLECTION, "rkey": rkey})
    assert got["value"] == record
    listed = xrpc(web, devnet, "com.atproto.repo.listRecords",
                  params={"repo": did, "collection": COLLECTION})
    assert sorted(r["uri"].rsplit("/", 1)[1] for r in listed["records"]) == sorted([rkey, "self"])

    xrpc(web, devnet, "com.atproto.repo.deleteRecord", token=token,
         body={"repo": did, "collection": COLLECTION, "rkey": rkey})
    gone = xrpc(web, devnet, "com.atproto.repo.getRecord", expect=400,
                params={"repo": did, "collection": COLLECTION, "rkey": rkey})
    assert gone["error"] == "RecordNotFound"


@pytest.mark.pds
def test_app_password_logs_in(web: httpx.Client, devnet: Devnet) -> None:
    account = devnet.create_account(unique_handle("app"))
    app_password = devnet.create_app_password(account, "commonroom-test")
    assert app_password != account["password"]
    session = xrpc(web, devnet, "com.atproto.server.createSession",
                   body={"identifier": account["handle"], "password": app_password})
    assert session["did"] == account["did"]
    xrpc(web, devnet, "com.atproto.server.createSession", expect=401,
         body={"identifier": account["handle"], "password": "not-the-password"})


@pytest.mark.pds
def test_handle_resolves_through_the_pds(web: httpx.Client, devnet: Devnet) -> None:
    account = devnet.create_account(unique_handle("hdl"))
    res = xrpc(web, devnet, "com.atproto.identity.resolveHandle",
               params={"handle": account["handle"]})
    assert res["did"] == account["did"]
    lex = devnet.lexicon_authority
    assert lex is not None and lex["handle"] == "lexicons.test"
    res = xrpc(web, devnet, "com.atproto.identity.resolveHandle", params={"handle": lex["handle"]})
    assert res["did"] == lex["did"]


@pytest.mark.pds
def test_plc_resolves_the_did_document(web: httpx.Client, devnet: Devnet) -> None:
    account = devnet.create_account(unique_handle("plc"))
    r = web.get(f"{devnet.plc_url}/{account['did']}")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["id"] == account["did"]
    assert doc["alsoKnownAs"] == [f"at://{account['handle']}"]
    pds = [s for s in doc["service"] if s["id"] == "#atproto_pds"]
    assert pds and pds[0]["serviceEndpoint"] == devnet.pds_url
    assert web.get(f"{devnet.plc_url}/did:plc:aaaaaaaaaaaaaaaaaaaaaaaa").status_code == 404


@pytest.mark.pds
def test_pause_makes_requests_time_out_and_resume_recovers(web: httpx.Client,
                                                           devnet: Devnet) -> None:
    url = f"{devnet.pds_url}/xrpc/com.atproto.server.describeServer"
    assert web.get(url).status_code == 200
    devnet.pause()
    try:
        with pytest.raises(httpx.TimeoutException):
            web.get(url, timeout=1.0)
    finally:
        devnet.resume()
    assert web.get(url, timeout=10).status_code == 200


class _MetadataServer(ThreadingHTTPServer):
    """An https server on loopback that records the paths asked for."""

    def __init__(self, ca: TestCA) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                body = json.dumps({"error": "not a real client"}).encode()
                self.send_response(404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ca.cert_pem, ca.key_pem)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)


@pytest.mark.pds
def test_pds_reaches_the_test_host_over_tls(web: httpx.Client, devnet: Devnet,
                                            test_ca: TestCA) -> None:
    """The PDS resolves commonroom.ci-test.dev to loopback and trusts the test CA: it fetches
    a confidential client's metadata from https://commonroom.ci-test.dev:<port>/."""
    server = _MetadataServer(test_ca)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"https://{TEST_SERVICE_HOST}:{server.server_address[1]}"
        r = web.post(f"{devnet.pds_url}/oauth/par", data={
            "client_id": f"{base}/client-metadata.json", "response_type": "code",
            "redirect_uri": f"{base}/callback", "scope": "atproto", "state": "s",
            "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "code_challenge_method": "S256"})
        assert r.status_code >= 400  # the metadata is a 404: only the fetch matters here
        assert "/client-metadata.json" in server.paths, (r.status_code, r.text)
    finally:
        server.shutdown()
        server.server_close()


def test_make_test_ca_certificate_verifies(test_ca: TestCA) -> None:
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(test_ca.cert_pem, test_ca.key_pem)
    client_ctx = ssl.create_default_context(cafile=str(test_ca.ca_pem))
    client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(1)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        for name in (TEST_SERVICE_HOST, "localhost", "127.0.0.1"):
            if name != TEST_SERVICE_HOST:
                thread.join(5)
                thread = threading.Thread(target=accept, daemon=True)
                thread.start()
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.getpeercert()["subject"] == ((("commonName", TEST_SERVICE_HOST),),)
                    tls.sendall(b"x")
    finally:
        listener.close()


@pytest.mark.pds
def test_a_devnet_stops_cleanly_and_removes_its_data() -> None:
    with Devnet() as net:
        port = int(net.pds_url.rsplit(":", 1)[1])
        data_dir = net.data_dir
        assert data_dir is not None and (data_dir / "pds").is_dir()
    assert net.returncode == 0  # SIGTERM -> clean shutdown
    assert not data_dir.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.pds
def test_a_devnet_that_cannot_start_says_why() -> None:
    net = Devnet(env={"DEVNET_HOSTS": "no-address-here"}, startup_timeout=60)
    expected = "(?s)exited with 1 before it was ready.*DEVNET_HOSTS: expected name=ip"
    with pytest.raises(DevnetError, match=expected):
        net.start()
    assert not net.running
