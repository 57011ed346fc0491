"""Handle resolution through DNS and HTTPS, and did:web documents, without a network.

The devnet's `.test` handles resolve only through its PDS, and the tests have no public DNS
or HTTPS. So here the DNS resolver is a stub answering TXT queries, and the app's httpx client
is given a MockTransport that plays the handle's web server, a PLC directory and a did:web
host. What is under test is our logic: DNS before HTTPS, ambiguity refused, the bidirectional
check, did:web URLs, error mapping.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from daemon.atproto.identity import resolve_did, resolve_handle, resolve_identity
from daemon.http.base import ApiError

ALICE = "did:plc:aliceaaaaaaaaaaaaaaaaaaa"
BOB = "did:plc:bobbbbbbbbbbbbbbbbbbbbbb"


def doc(did: str, handle: str | None, pds: str = "https://pds.example.net") -> dict[str, Any]:
    return {"id": did, "alsoKnownAs": [f"at://{handle}"] if handle else [],
            "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",
                         "serviceEndpoint": pds}]}


class FakeTxt:
    def __init__(self, *texts: str) -> None:
        self.strings = [t.encode() for t in texts]


class FakeDns:
    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self.queries: list[str] = []

    async def resolve(self, name: str, rdtype: str, lifetime: float) -> list[FakeTxt]:
        self.queries.append(name)
        if name not in self.records:
            raise LookupError("NXDOMAIN")
        return [FakeTxt(t) for t in self.records[name]]


@pytest.fixture
def web(app: Any) -> dict[str, Any]:
    """URL -> (status, body) served to the app instead of the internet."""
    routes: dict[str, tuple[int, Any]] = {}
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        seen.append(url)
        status, body = routes.get(url, (404, "not found"))
        if isinstance(body, dict):
            return httpx.Response(status, json=body)
        return httpx.Response(status, text=body)

    app._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return {"routes": routes, "seen": seen}


@pytest.fixture
def dns(app: Any) -> FakeDns:
    fake = FakeDns({})
    app.identity.dns_resolver = fake
    return fake


async def test_dns_txt_wins_and_the_handle_is_verified_both_ways(app: Any, web: Any, dns: FakeDns) -> None:
    dns.records["_atproto.alice.example.com"] = [f"did={ALICE}"]
    web["routes"]["https://alice.example.com/.well-known/atproto-did"] = (200, BOB)
    web["routes"][f"https://plc.directory/{ALICE}"] = (200, doc(ALICE, "alice.example.com"))
    info = await resolve_identity(app, "Alice.Example.com")
    assert (info.did, info.handle, info.pds_url) == (ALICE, "alice.example.com", "https://pds.example.net")


async def test_https_well_known_is_used_when_dns_has_nothing(app: Any, web: Any, dns: FakeDns) -> None:
    web["routes"]["https://bob.example.org/.well-known/atproto-did"] = (200, f"{BOB}\n")
    assert await resolve_handle(app, "bob.example.org") == BOB


async def test_ambiguous_or_malformed_answers_are_not_trusted(app: Any, web: Any, dns: FakeDns) -> None:
    dns.records["_atproto.two.example.com"] = [f"did={ALICE}", f"did={BOB}"]
    web["routes"]["https://two.example.com/.well-known/atproto-did"] = (200, "<html>hello</html>")
    with pytest.raises(ApiError) as err:
        await resolve_handle(app, "two.example.com")
    assert err.value.code == "unknown_handle" and "two.example.com" in err.value.message


async def test_a_document_claiming_someone_elses_handle_is_not_verified(app: Any, web: Any,
                                                                        dns: FakeDns) -> None:
    dns.records["_atproto.alice.example.com"] = [f"did={ALICE}"]
    web["routes"][f"https://plc.directory/{BOB}"] = (200, doc(BOB, "alice.example.com"))
    info = await resolve_did(app, BOB)
    assert info.handle is None and info.pds_url == "https://pds.example.net"
    web["routes"][f"https://plc.directory/{ALICE}"] = (200, doc(ALICE, "someone.example.com"))
    with pytest.raises(ApiError) as err:
        await resolve_identity(app, "alice.example.com")
    assert err.value.code == "unknown_handle" and "someone.example.com" in err.value.message


async def test_reserved_domains_are_never_looked_up_publicly(app: Any, web: Any, dns: FakeDns) -> None:
    with pytest.raises(ApiError) as err:
        await resolve_handle(app, "alice.test")
    assert err.value.code == "unknown_handle"
    assert dns.queries == [] and web["seen"] == []


async def test_did_web_documents_come_from_the_host(app: Any, web: Any, dns: FakeDns) -> None:
    did = "did:web:club.example.com"
    web["routes"]["https://club.example.com/.well-known/did.json"] = (200, doc(did, None))
    info = await resolve_did(app, did)
    assert info.did == did and info.handle is None
    with pytest.raises(ApiError) as err:
        await resolve_did(app, "did:web:example.com:users:alice")
    assert err.value.code == "unsupported_did"


async def test_a_document_for_another_did_or_a_broken_directory_is_a_502(app: Any, web: Any,
                                                                         dns: FakeDns) -> None:
    web["routes"][f"https://plc.directory/{ALICE}"] = (200, doc(BOB, None))
    with pytest.raises(ApiError) as err:
        await resolve_did(app, ALICE)
    assert err.value.status == 502
    web["routes"][f"https://plc.directory/{BOB}"] = (200, json.dumps([1, 2]))
    with pytest.raises(ApiError) as err:
        await resolve_did(app, BOB)
    assert err.value.status == 502
