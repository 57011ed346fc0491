"""Proofs of the acting user (docs/identity.md), against the devnet: the app sends the
user's service-auth token from their PDS (com.atproto.server.getServiceAuth), and the
service checks its signature, issuer, audience, method, expiry and freshness."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from daemon.base import FakeClock
from daemon.atproto.proofs import ReplayCache, service_did
from tests.conftest import REPO
from tests.fixtures_communities import Api, devnet_module_fixtures

_, extra_plugins = devnet_module_fixtures()
NS = "community.commonroom"
SERVICE_DID = "did:web:localhost%3A8080"  # config.yaml's base_url, http://127.0.0.1:8080


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())  # tokens carry the PDS's real time


@pytest.fixture
def policy() -> str:
    return "optional"


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], policy: str) -> dict[str, Any]:
    return {**communities_config, "identity": {"user_proof": policy}}


def token(devnet: Any, person: dict[str, str], method: str, aud: str = SERVICE_DID) -> str:
    """A fresh service-auth token of `person` from their PDS."""
    got = devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": aud, "lxm": f"{NS}.{method}"},
                      token=person["accessJwt"])
    return got["token"]


def bearer(jwt: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt}"}


async def join(api: Api, community: str, user: str, headers: dict[str, str] | None = None) -> Any:
    return await api.client.post(api.path(community, "/members/join"), api_key=api.key,
                                 json={"userDid": user}, headers=headers or {})


async def audit_entries(api: Api, devnet: Any, community: str, admin: dict[str, str]) -> list[dict[str, Any]]:
    resp = await api.client.get(api.path(community, "/audit-log"), api_key=api.key,
                                params={"adminDid": admin["did"]},
                                headers=bearer(token(devnet, admin, "community.readAuditLog")))
    assert resp.status == 200, resp.text
    return resp.json()["entries"]


@pytest.mark.pds
async def test_the_service_publishes_its_did_and_method_ids(app: Any, client: Any) -> None:
    assert service_did(app.config) == SERVICE_DID
    doc = (await client.get("/.well-known/did.json")).json()
    assert doc["id"] == SERVICE_DID
    assert doc["service"] == [{"id": "#commonroom", "type": "CommonroomService",
                               "serviceEndpoint": "http://127.0.0.1:8080"}]
    listed = (await client.get("/api/v1/method-ids")).json()
    assert listed["serviceDid"] == SERVICE_DID and listed["userProof"] == "optional"
    by_id = {m["id"]: m for m in listed["methods"]}
    assert by_id[f"{NS}.membership.join"] == {
        "id": f"{NS}.membership.join", "httpMethod": "POST", "path": "/api/v1/communities/{did}/members/join",
        "userField": "userDid", "description": by_id[f"{NS}.membership.join"]["description"]}
    assert by_id[f"{NS}.membership.approve"]["path"].endswith("/members/approve")
    assert by_id[f"{NS}.admin.transfer"]["userField"] == "currentOwnerDid"
    # Each method id has its lexicon, and each method lexicon is a listed method.
    lexicons = {p.stem for p in (REPO / "lexicons").glob("*.json")}
    methods = {f for f in lexicons if json.loads((REPO / "lexicons" / f"{f}.json").read_text())
               ["defs"]["main"]["type"] in ("procedure", "query")}
    proven = {m for m in by_id if m.startswith(NS + ".") and m not in app.declarations.lexicons}  # plugins ship their own
    # the rest are the XRPC reads that name no user to prove (docs/xrpc.md)
    reads = {f"{NS}.{n}" for n in ("community.get", "community.list", "community.getSettings",
                                   "membership.listMine", "role.list", "record.getSettings")}
    assert methods == proven | reads and not proven & reads


@pytest.mark.pds
@pytest.mark.parametrize("policy", ["required"])
async def test_required_proofs_refuse_every_bad_token_and_accept_a_fresh_one(
        app: Any, client: Any, devnet: Any, people: Any, clock: FakeClock) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    created = await api.client.post("/api/v1/communities", api_key=api.key,
                                    json={"creatorDid": alice["did"], "displayName": "Proven club", "type": "open"},
                                    headers=bearer(token(devnet, alice, "community.create")))
    assert created.status == 201, created.text
    community = created.json()["community"]["did"]

    async def refused(headers: dict[str, str] | None) -> str:
        resp = await join(api, community, bob["did"], headers)
        assert resp.status == 401, resp.text
        assert resp.headers.get("WWW-Authenticate", "").startswith("Bearer") or resp.json()["error"] == \
            "user_proof_required"
        return resp.json()["error"]

    assert await refused(None) == "user_proof_required"
    assert await refused(bearer(token(devnet, alice, "membership.join"))) == "proof_wrong_user"
    assert await refused(bearer(token(devnet, bob, "membership.join", aud="did:web:elsewhere.test"))) \
        == "proof_wrong_audience"
    assert await refused(bearer(token(devnet, bob, "membership.leave"))) == "proof_wrong_method"
    good = token(devnet, bob, "membership.join")
    head, payload, signature = good.split(".")
    forged_claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged_claims["jti"] = "f" * 32  # same user, audience and method: only the signature is wrong
    forged = ".".join([head, base64.urlsafe_b64encode(json.dumps(forged_claims).encode()).decode().rstrip("="),
                       signature])
    assert await refused(bearer(forged)) == "proof_bad_signature"
    assert await refused({"Authorization": "Basic Ym9iOnB3"}) == "proof_bad_signature"
    # Nothing was written by any refusal.
    assert (await api.check(community, bob["did"]))["isMember"] is False

    joined = await join(api, community, bob["did"], bearer(good))
    assert joined.status == 201, joined.text
    assert await refused(bearer(good)) == "proof_replayed"  # before any state check

    entries = await audit_entries(api, devnet, community, alice)
    join_entry = next(e for e in entries if e["targetDid"] == bob["did"])
    assert join_entry["actorDid"] == bob["did"] and join_entry["actorProven"] is True
    assert "actorProven" not in join_entry["metadata"]
    created_entry = next(e for e in entries if e["action"] == "community.created")
    assert created_entry["actorProven"] is True

    carol = people("carol")
    stale = token(devnet, carol, "membership.join")
    clock.advance(120)  # getServiceAuth's tokens live 60 s (last: the clock only moves forward)
    resp = await join(api, community, carol["did"], bearer(stale))
    assert resp.status == 401 and resp.json()["error"] == "proof_expired"


@pytest.mark.pds
async def test_optional_proofs_mark_the_audit_and_still_refuse_bad_tokens(
        app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    community = (await api.create(alice, "Optional club"))["did"]
    assert (await join(api, community, bob["did"])).status == 201  # the app vouches
    bad = await join(api, community, carol["did"], bearer(token(devnet, bob, "membership.join")))
    assert bad.status == 401 and bad.json()["error"] == "proof_wrong_user"
    assert (await join(api, community, carol["did"], bearer(token(devnet, carol, "membership.join")))).status == 201
    entries = {e["targetDid"]: e for e in await audit_entries(api, devnet, community, alice)
               if e["action"] == "member.joined"}
    assert entries[bob["did"]]["actorProven"] is False
    assert entries[carol["did"]]["actorProven"] is True


@pytest.mark.pds
async def test_admins_can_require_proofs_in_their_community(
        app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    other = await Api.make(app, client, owner="did:plc:otherowner")
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Strict club"))["did"]
    settings = api.path(community, "/settings")
    assert (await api.client.get(settings, api_key=api.key)).json() == {
        "communityDid": community, "requireUserProof": False, "rosterVisibility": "public", "listed": True}
    untrusted = await other.client.put(settings, api_key=other.key,
                                       json={"adminDid": alice["did"], "requireUserProof": True})
    assert untrusted.status == 403
    not_admin = await api.client.put(settings, api_key=api.key, json={"adminDid": bob["did"], "requireUserProof": True})
    assert not_admin.status == 403 and not_admin.json()["error"] == "not_admin"
    changed = await api.client.put(settings, api_key=api.key, json={"adminDid": alice["did"], "requireUserProof": True})
    assert changed.status == 200 and changed.json()["requireUserProof"] is True
    details = await api.get(api.path(community))
    assert details.json()["community"]["requireUserProof"] is True

    missing = await join(api, community, bob["did"])
    assert missing.status == 401 and missing.json()["error"] == "user_proof_required"
    assert (await join(api, community, bob["did"], bearer(token(devnet, bob, "membership.join")))).status == 201
    entries = await audit_entries(api, devnet, community, alice)
    assert any(e["action"] == "community.settings_changed" and e["metadata"] == {"requireUserProof": True}
               for e in entries)


@pytest.mark.pds
@pytest.mark.parametrize("policy", ["off"])
async def test_with_proofs_off_tokens_are_ignored(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Trusting club"))["did"]
    resp = await join(api, community, bob["did"], {"Authorization": "Bearer not-a-token"})
    assert resp.status == 201, resp.text


def test_the_replay_cache_forgets_expired_ids_and_stays_bounded() -> None:
    cache = ReplayCache(size=3)
    assert cache.first_use("a", expires=100, now=0)
    assert not cache.first_use("a", expires=100, now=50)  # a replay
    assert cache.first_use("a", expires=200, now=150)  # the first token expired: a new one
    for key in "bcd":
        assert cache.first_use(key, expires=1000, now=150)
    assert len(cache) <= 3


@pytest.mark.pds
async def test_the_openapi_document_names_each_routes_method_id(app: Any, client: Any) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    listed = (await client.get("/api/v1/method-ids")).json()["methods"]
    in_document = {(path, method.upper()): op["x-atproto-method-id"]
                   for path, ops in document["paths"].items() for method, op in ops.items()
                   if "x-atproto-method-id" in op}
    assert in_document[("/api/v1/communities/{did}/members/join", "POST")] == f"{NS}.membership.join"
    assert in_document[("/api/v1/communities/{did}/members/approve", "POST")] == f"{NS}.membership.approve"
    assert sorted(in_document.values()) == sorted(m["id"] for m in listed)
