"""Calling the service through the user's own PDS (docs/xrpc.md): a client with a session on
the devnet PDS (the real @atproto/pds) sends `<pds>/xrpc/<our method>` with
`atproto-proxy: <our DID>#commonroom`; the PDS resolves our did:web, signs a service-auth
token for the user and forwards the call, and our answer comes back through it."""

from __future__ import annotations

import json
import time
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.testing import bind_unused_port

from commonroom_testing.app import deep_merge
from commonroom_testing.http import Response, serve_app
from daemon.atproto.xrpc import lexicons
from daemon.base import FakeClock
from tests.fixtures_communities import Api, EventRecorder, proofs_on_pds

NS = "community.commonroom"


@pytest.fixture
def bound() -> Iterator[tuple[Any, int]]:
    """A loopback socket bound first: the service's base URL (and so its did:web) names its port."""
    sock, port = bind_unused_port()
    yield sock, port


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], bound: tuple[Any, int]) -> dict[str, Any]:
    return deep_merge(communities_config, {"server": {"base_url": f"http://127.0.0.1:{bound[1]}"}})


@pytest.fixture
def extra_plugins(recorder: EventRecorder) -> tuple:
    return (recorder,)


@pytest.fixture
def server(io_loop: Any, app: Any, bound: tuple[Any, int]) -> Iterator[Any]:
    yield from serve_app(io_loop, app, bound[0], bound[1])


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())  # tokens carry the PDS's real time


async def through_pds(devnet: Any, person: dict[str, str], service_did: str, nsid: str,
                      body: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
                      proxy: bool = True) -> Response:
    """Call `nsid` on the user's PDS with their session, proxied to `service_did`."""
    url = f"{devnet.pds_url}/xrpc/{nsid}" + (f"?{urlencode(params)}" if params else "")
    headers = {"Authorization": f"Bearer {person['accessJwt']}"}
    if proxy:
        headers["atproto-proxy"] = f"{service_did}#commonroom"
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = HTTPRequest(url, method="POST" if body is not None else "GET", headers=headers,
                          body=json.dumps(body) if body is not None else None, request_timeout=30)
    client = AsyncHTTPClient(force_instance=True)
    try:
        resp = await client.fetch(request, raise_error=False)
    finally:
        client.close()
    return Response(resp.code, resp.headers, resp.body or b"")


@pytest.mark.pds
async def test_a_person_joins_through_their_pds(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Proxied club"))["did"]
    did = app.proofs.did
    assert did.startswith("did:web:localhost%3A")
    lex = lexicons(app)

    # bob writes his own membership record with his PDS session, as any atproto client does
    record = await through_pds(devnet, bob, did, "com.atproto.repo.createRecord", body={
        "repo": bob["did"], "collection": f"{NS}.membership",
        "record": {"$type": f"{NS}.membership", "community": community,
                   "joinedAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}}, proxy=False)
    assert record.status == 200, record.text
    ref = record.json()

    # ... then joins through his PDS, which proves him to us
    join_input = {"community": community, "membershipUri": ref["uri"], "membershipCid": ref["cid"]}
    lex.validate_input(f"{NS}.membership.join", join_input)
    joined = await through_pds(devnet, bob, did, f"{NS}.membership.join", body=join_input)
    assert joined.status == 200, joined.text
    assert joined.json()["status"] == "joined" and joined.json()["memberDid"] == bob["did"]
    lex.validate_output(f"{NS}.membership.join", joined.json())

    # the membership shows through /api/v1, with bob's own record, and the community's proof
    assert (await api.check(community, bob["did"]))["isMember"] is True
    members = await api.get(api.path(community, "/members"), adminDid=alice["did"])
    by_did = {m["did"]: m for m in members.json()["members"]}
    assert by_did[bob["did"]]["membershipUri"] == ref["uri"]
    proof = (await proofs_on_pds(app, community))[bob["did"]]
    assert proof["value"]["memberDid"] == bob["did"]
    entry = next(e for e in await api.audit(community, alice["did"])
                 if e["action"] == "member.joined" and e["targetDid"] == bob["did"])
    assert entry["actorProven"] is True

    # a query through the PDS: bob's own memberships
    mine = await through_pds(devnet, bob, did, f"{NS}.membership.listMine")
    assert mine.status == 200, mine.text
    assert [m["communityDid"] for m in mine.json()["memberships"]] == [community]
    lex.validate_output(f"{NS}.membership.listMine", mine.json())

    # errors come back through the PDS in XRPC's shape
    bad = await through_pds(devnet, bob, did, f"{NS}.membership.leave", body={"community": "nope"})
    assert bad.status == 400 and bad.json()["error"] == "InvalidRequest" and "community" in bad.json()["message"]
    unknown = await through_pds(devnet, bob, did, f"{NS}.membership.teleport", body={})
    assert unknown.status == 501 and unknown.json()["error"] == "MethodNotImplemented"
    again = await through_pds(devnet, bob, did, f"{NS}.membership.join", body={"community": community})
    assert again.status == 409 and again.json()["error"] == "already_member"


@pytest.mark.pds
async def test_the_atproto_sdk_calls_through_its_pds(app: Any, client: Any, devnet: Any, people: Any) -> None:
    """The Python atproto SDK's own proxy option (`with_proxy`), as docs/xrpc.md shows it."""
    from atproto import AsyncClient
    from atproto_client.models.base import ParamsModelBase

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "SDK club"))["did"]
    sdk = AsyncClient(base_url=f"{devnet.pds_url}/xrpc")
    await sdk.login(bob["handle"], bob["password"], fetch_bsky_profile=False)
    proxied = sdk.with_proxy("commonroom", app.proofs.did)
    joined = await proxied.invoke_procedure(f"{NS}.membership.join", content=json.dumps({"community": community}),
                                            headers={"Content-Type": "application/json"})
    assert joined.content["status"] == "joined", joined.content
    class CheckParams(ParamsModelBase):
        community: str

    check = await proxied.invoke_query(f"{NS}.membership.check", params=CheckParams(community=community))
    assert check.content["isMember"] is True
