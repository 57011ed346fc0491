"""XRPC methods at /xrpc/<nsid> (docs/xrpc.md), called with the user's service-auth token
from the devnet PDS (com.atproto.server.getServiceAuth), as the PDS sends it when it
forwards an `atproto-proxy` call (tests/test_xrpc_proxy.py does that for real)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from commonroom_testing.app import deep_merge
from daemon.atproto.lexicons import LexiconError, Lexicons
from daemon.atproto.xrpc import lexicons, methods
from daemon.base import FakeClock
from tests.conftest import REPO
from tests.fixtures_communities import Api, devnet_module_fixtures

_, extra_plugins = devnet_module_fixtures()
NS = "community.commonroom"
SERVICE_DID = "did:web:localhost%3A8080"  # config.yaml's base_url, http://127.0.0.1:8080


@pytest.fixture
def session_limit() -> int:
    return 100000


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], session_limit: int) -> dict[str, Any]:
    return deep_merge(communities_config, {"rate_limits": {"session": {"requests": session_limit,
                                                                       "window_seconds": 60}}})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())  # tokens carry the PDS's real time


def token(devnet: Any, person: dict[str, str], lxm: str, aud: str = SERVICE_DID) -> str:
    got = devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": aud, "lxm": lxm},
                      token=person["accessJwt"])
    return got["token"]


class Xrpc:
    """Calls /xrpc as one person, a fresh token for each call; checks every answer against
    the method's lexicon (the service checks it too: a mismatch would be a 500)."""

    def __init__(self, app: Any, client: Any, devnet: Any, person: dict[str, str]) -> None:
        self.app, self.client, self.devnet, self.person = app, client, devnet, person
        self.lex: Lexicons = lexicons(app)

    async def __call__(self, method_name: str, /, lxm: str | None = None, aud: str = SERVICE_DID,
                       **values: Any) -> Any:
        nsid = method_name if method_name.startswith(("com.", f"{NS}.reports.")) else f"{NS}.{method_name}"
        jwt = await asyncio.to_thread(token, self.devnet, self.person, lxm or nsid, aud)
        headers = {"Authorization": f"Bearer {jwt}"}
        method = methods(self.app).get(nsid)
        if method is not None and method.kind == "procedure":
            try:
                self.lex.validate_input(nsid, values)
            except LexiconError:
                pass  # the bad input tests send on purpose
            resp = await self.client.post(f"/xrpc/{nsid}", json=values, headers=headers)
        else:
            resp = await self.client.get(f"/xrpc/{nsid}", params=values, headers=headers)
        if resp.status == 200:
            self.lex.validate_output(nsid, resp.json())
        else:
            assert set(resp.json()) == {"error", "message"}, resp.text  # XRPC's error shape
        return resp


@pytest.mark.pds
async def test_a_person_joins_and_reads_as_themselves(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Open club"))["did"]
    as_bob = Xrpc(app, client, devnet, bob)

    joined = await as_bob("membership.join", community=community)
    assert joined.status == 200, joined.text
    assert joined.json() == {**joined.json(), "status": "joined", "communityDid": community, "memberDid": bob["did"]}
    # the same membership through /api/v1, and the audit names a proven actor
    assert (await api.check(community, bob["did"]))["isMember"] is True
    entries = await api.audit(community, alice["did"])
    joined_entry = next(e for e in entries if e["action"] == "member.joined" and e["targetDid"] == bob["did"])
    assert joined_entry["actorProven"] is True and joined_entry["appId"] is None

    check = await as_bob("membership.check", community=community)
    assert check.status == 200 and check.json()["isMember"] is True
    details = await as_bob("community.get", community=community)
    assert details.status == 200 and details.json()["membership"]["isMember"] is True
    mine = await as_bob("membership.listMine")
    assert [m["communityDid"] for m in mine.json()["memberships"]] == [community]
    listed = await as_bob("community.list", limit=5)
    assert any(c["did"] == community and c["isMember"] for c in listed.json()["communities"])
    members = await as_bob("membership.listMembers", community=community)
    assert {m["did"] for m in members.json()["members"]} == {alice["did"], bob["did"]}
    assert (await as_bob("community.getSettings", community=community)).json()["communityDid"] == community
    assert (await as_bob("role.list", community=community)).status == 200
    assert (await as_bob("record.getSettings", community=community)).status == 200

    left = await as_bob("membership.leave", community=community)
    assert left.status == 200 and left.json()["status"] == "left"
    assert (await api.check(community, bob["did"]))["isMember"] is False


@pytest.mark.pds
async def test_an_admin_acts_through_xrpc(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    community = (await api.create(alice, "Careful club", type="admin-approved"))["did"]
    as_alice, as_bob = Xrpc(app, client, devnet, alice), Xrpc(app, client, devnet, bob)

    assert (await as_bob("membership.join", community=community)).json()["status"] == "pending"
    pending = await as_alice("membership.listPending", community=community)
    assert [p["did"] for p in pending.json()["pendingMembers"]] == [bob["did"]]
    # bob is no admin: his own token does not make him one
    refused = await as_bob("membership.approve", community=community, memberDid=bob["did"])
    assert (refused.status, refused.json()["error"]) == (403, "not_admin"), refused.text
    approved = await as_alice("membership.approve", community=community, memberDid=bob["did"])
    assert approved.status == 200 and approved.json()["status"] == "joined"
    assert (await as_alice("admin.promote", community=community, memberDid=bob["did"])).status == 200
    assert (await as_alice("admin.demote", community=community, memberDid=bob["did"])).status == 200
    invite = await as_alice("invite.create", community=community, maxUses=2)
    assert invite.status == 200, invite.text
    listed = await as_alice("invite.list", community=community)
    assert [i["id"] for i in listed.json()["invites"]] == [invite.json()["id"]]
    assert (await as_alice("invite.revoke", community=community, code=invite.json()["id"])).status == 200
    banned = await as_alice("membership.ban", community=community, memberDid=carol["did"], reason="spam")
    assert banned.status == 200 and banned.json()["status"] == "banned"
    assert [b["memberDid"] for b in (await as_alice("membership.listBans", community=community)).json()["bans"]] \
        == [carol["did"]]
    assert (await as_alice("membership.unban", community=community, memberDid=carol["did"])).status == 200
    settings = await as_alice("community.updateSettings", community=community, requireUserProof=True)
    assert settings.status == 200 and settings.json()["requireUserProof"] is True
    audit = await as_alice("community.readAuditLog", community=community)
    assert audit.status == 200
    actions = {e["action"] for e in audit.json()["entries"]}
    assert {"member.requested", "member.approved", "admin.promoted", "member.banned"} <= actions
    assert (await as_alice("membership.remove", community=community, memberDid=bob["did"])).status == 200


@pytest.mark.pds
async def test_a_plugins_method_keeps_its_own_authority(app: Any, client: Any, devnet: Any, people: Any) -> None:
    # the example noticeboard plugin (installed for the tests): its lexicon names only
    # authorDid and text; the community (a path field) and the author (the token's issuer)
    # are taken all the same
    assert "com.example.noticeboard.post" in methods(app)
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Notice club"))["did"]
    assert (await api.join(community, bob["did"])).status == 201
    as_bob = Xrpc(app, client, devnet, bob)
    nsid = "com.example.noticeboard.post"
    jwt = await asyncio.to_thread(token, devnet, bob, nsid)
    posted = await client.post(f"/xrpc/{nsid}", json={"community": community, "text": "Bake sale on Sunday"},
                               headers={"Authorization": f"Bearer {jwt}"})
    assert posted.status == 200, posted.text
    assert posted.json()["notice"]["authorDid"] == bob["did"]
    listed = await api.get(api.path(community, "/notices"))
    assert [n["text"] for n in listed.json()["notices"]] == ["Bake sale on Sunday"]
    # the plugin's lexicon still checks what it declares
    jwt = await asyncio.to_thread(token, devnet, bob, nsid)
    too_long = await client.post(f"/xrpc/{nsid}", json={"community": community, "text": "x" * 5001},
                                 headers={"Authorization": f"Bearer {jwt}"})
    assert too_long.status == 400 and "text" in too_long.json()["message"]
    assert (await as_bob("membership.check", community=community)).json()["isMember"] is True


@pytest.mark.pds
async def test_bad_calls_get_xrpc_errors(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Picky club"))["did"]
    as_bob = Xrpc(app, client, devnet, bob)

    wrong_method = await as_bob("membership.join", lxm=f"{NS}.membership.leave", community=community)
    assert (wrong_method.status, wrong_method.json()["error"]) == (401, "proof_wrong_method")
    wrong_aud = await as_bob("membership.join", aud="did:web:elsewhere.example", community=community)
    assert (wrong_aud.status, wrong_aud.json()["error"]) == (401, "proof_wrong_audience")
    # the service entry as audience is this service too
    assert (await as_bob("membership.check", aud=f"{SERVICE_DID}#commonroom", community=community)).status == 200
    for_another = await as_bob("membership.join", community=community, userDid=alice["did"])
    assert (for_another.status, for_another.json()["error"]) == (401, "proof_wrong_user")
    assert (await api.check(community, bob["did"]))["isMember"] is False

    unknown = await client.post(f"/xrpc/{NS}.membership.teleport", json={})
    assert unknown.status == 501 and unknown.json() == {"error": "MethodNotImplemented",
                                                        "message": unknown.json()["message"]}
    no_token = await client.post(f"/xrpc/{NS}.membership.join", json={"community": community})
    assert (no_token.status, no_token.json()["error"]) == (401, "AuthRequired")

    bad_did = await as_bob("membership.join", community="not a did")
    assert (bad_did.status, bad_did.json()["error"]) == (400, "InvalidRequest")
    assert "community" in bad_did.json()["message"]
    extra = await as_bob("membership.join", community=community, shoeSize=42)
    assert extra.status == 400 and "shoeSize" in extra.json()["message"]
    missing = await as_bob("membership.leave")
    assert missing.status == 400 and "community: is required" in missing.json()["message"]
    bad_limit = await as_bob("community.list", limit=1000)
    assert bad_limit.status == 400 and "limit" in bad_limit.json()["message"]
    as_get = await client.get(f"/xrpc/{NS}.membership.join")
    assert (as_get.status, as_get.json()["error"]) == (400, "InvalidRequest")
    # a refusal of the route itself keeps its status and code
    unknown_community = await as_bob("membership.join", community="did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
    assert (unknown_community.status, unknown_community.json()["error"]) == (404, "community_not_found")


@pytest.mark.pds
async def test_every_method_answers_within_its_lexicon(app: Any, client: Any, devnet: Any, people: Any,
                                                     devnet_b: Any) -> None:
    """Each method once (the ones the tests above do not call), every input and output
    checked against the lexicon by `Xrpc`; then: no method was left out."""
    api = await Api.make(app, client)
    other = await Api.make(app, client, owner="did:plc:otherowner")
    alice, bob, carol, dave = people("alice"), people("bob"), people("carol"), people("dave")
    as_alice, as_bob, as_carol, as_dave = (Xrpc(app, client, devnet, p) for p in (alice, bob, carol, dave))
    ok: set[str] = set()

    async def call(who: Xrpc, method_name: str, /, **values: Any) -> Any:
        resp = await who(method_name, **values)
        assert resp.status == 200, f"{method_name}: {resp.text}"
        ok.add(method_name if method_name.startswith(("com.", f"{NS}.reports."))
               else f"{NS}.{method_name}")
        return resp.json()

    made = await call(as_alice, "community.create", displayName="Made over XRPC")
    c = made["community"]["did"]
    await call(as_alice, "community.get", community=c)
    await call(as_alice, "community.list")
    await call(as_alice, "community.getSettings", community=c)
    await call(as_alice, "community.updateSettings", community=c, listed=True)
    await call(as_alice, "community.grantApp", community=c, appId=other.app_id, manage=False)
    await call(as_alice, "community.revokeApp", community=c, appId=other.app_id)
    for person in (as_bob, as_carol, as_dave):
        await call(person, "membership.join", community=c)
    await call(as_dave, "membership.leave", community=c)
    await call(as_bob, "membership.check", community=c)
    await call(as_bob, "membership.listMine")
    await call(as_alice, "membership.listMembers", community=c)
    await call(as_alice, "community.readAuditLog", community=c)
    await call(as_alice, "role.list", community=c)
    await call(as_alice, "role.create", community=c, name="greeter", capabilities=["members.approve"])
    await call(as_alice, "role.update", community=c, name="greeter", description="Welcomes people")
    await call(as_alice, "role.assign", community=c, memberDid=bob["did"], role="greeter")
    await call(as_alice, "role.unassign", community=c, memberDid=bob["did"], name="greeter")
    await call(as_alice, "role.delete", community=c, name="greeter")
    await call(as_alice, "record.getSettings", community=c)
    await call(as_alice, "record.updateSettings", community=c, allowedCollections=["com.example.*"])
    created = await call(as_bob, "record.create", community=c, collection="com.example.xrpc",
                         record={"$type": "com.example.xrpc", "text": "hello"})
    rkey = created["uri"].rsplit("/", 1)[1]
    await call(as_bob, "record.read", community=c, collection="com.example.xrpc")
    await call(as_bob, "record.read", community=c, collection="com.example.xrpc", rkey=rkey)
    await call(as_bob, "record.update", community=c, collection="com.example.xrpc", rkey=rkey,
               record={"$type": "com.example.xrpc", "text": "hello again"})
    await call(as_bob, "record.delete", community=c, collection="com.example.xrpc", rkey=rkey)
    report = await call(as_carol, f"{NS}.reports.create", community=c, subject=bob["did"], reason="spam")
    await call(as_carol, f"{NS}.reports.list", community=c)
    await call(as_alice, f"{NS}.reports.review", community=c)
    await call(as_alice, f"{NS}.reports.resolve", community=c, reportId=report["report"]["id"], action="dismiss")
    notice = await as_bob.client.post(f"/api/v1/communities/{c}/notices", api_key=api.key,
                                      json={"authorDid": bob["did"], "text": "Lost: one cat"},
                                      headers={"Authorization": "Bearer " + await asyncio.to_thread(
                                          token, devnet, bob, "com.example.noticeboard.post")})
    assert notice.status == 201, notice.text
    ok.add("com.example.noticeboard.post")  # called over XRPC in test_a_plugins_method_keeps_its_own_authority
    await call(as_alice, "com.example.noticeboard.remove", community=c, noticeId=str(notice.json()["notice"]["id"]))
    await call(as_alice, "invite.create", community=c)
    await call(as_alice, "invite.list", community=c)
    invite = (await as_alice("invite.list", community=c)).json()["invites"][0]
    await call(as_alice, "invite.revoke", community=c, code=invite["id"])
    await call(as_alice, "membership.ban", community=c, memberDid=dave["did"])
    await call(as_alice, "membership.listBans", community=c)
    await call(as_alice, "membership.unban", community=c, memberDid=dave["did"])
    await call(as_alice, "admin.promote", community=c, memberDid=bob["did"])
    await call(as_alice, "admin.demote", community=c, memberDid=bob["did"])
    await call(as_alice, "membership.remove", community=c, memberDid=carol["did"])
    await call(as_alice, "community.updateSettings", community=c, requireUserProof=False)
    careful = (await api.create(alice, "Careful club", type="admin-approved"))["did"]
    await call(as_dave, "membership.join", community=careful)
    await call(as_alice, "membership.listPending", community=careful)
    await call(as_alice, "membership.reject", community=careful, memberDid=dave["did"])
    await call(as_bob, "membership.join", community=careful)
    await call(as_alice, "membership.approve", community=careful, memberDid=bob["did"])
    await call(as_alice, "admin.transfer", community=careful, newOwnerDid=bob["did"])
    await call(as_carol, "instance.report", communityDid=c, reason="spam")   # the instance plugin's
    await call(as_carol, "instance.myReports")
    await call(as_alice, "community.delete", community=c)
    await call(as_bob, "community.move", community=careful, pdsUrl=devnet_b.pds_url)
    for _ in range(600):  # the move finishes in the background
        if (await api.get(f"/api/v1/communities/{careful}/move")).json()["state"] == "none":
            break
        await asyncio.sleep(0.1)
    await call(as_bob, "community.handover", community=careful)  # then gone from here
    assert set(methods(app)) - ok == set()


@pytest.mark.pds
@pytest.mark.parametrize("session_limit", [3])
async def test_calls_are_rate_limited_per_user(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Busy club"))["did"]
    as_alice, as_bob = Xrpc(app, client, devnet, alice), Xrpc(app, client, devnet, bob)
    for _ in range(3):
        assert (await as_bob("membership.check", community=community)).status == 200
    limited = await as_bob("membership.check", community=community)
    assert (limited.status, limited.json()["error"]) == (429, "rate_limited")
    assert limited.headers["RateLimit-Limit"] == "3" and int(limited.headers["Retry-After"]) > 0
    # another user's budget is their own
    assert (await as_alice("membership.check", community=community)).status == 200


@pytest.mark.pds
async def test_an_expired_token_is_refused(app: Any, client: Any, clock: FakeClock, devnet: Any,
                                           people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Punctual club"))["did"]
    jwt = token(devnet, bob, f"{NS}.membership.join")   # the PDS's default: 60 s
    clock.advance(120)
    late = await client.post(f"/xrpc/{NS}.membership.join", json={"community": community},
                             headers={"Authorization": f"Bearer {jwt}"})
    assert (late.status, late.json()["error"]) == (401, "proof_expired")
    assert set(late.json()) == {"error", "message"}
    assert (await api.check(community, bob["did"]))["isMember"] is False


@pytest.mark.pds
async def test_a_token_proves_one_call(app: Any, client: Any, devnet: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = (await api.create(alice, "Once club"))["did"]
    jwt = token(devnet, bob, f"{NS}.membership.check")
    headers = {"Authorization": f"Bearer {jwt}"}
    first = await client.get(f"/xrpc/{NS}.membership.check", params={"community": community}, headers=headers)
    assert first.status == 200
    again = await client.get(f"/xrpc/{NS}.membership.check", params={"community": community}, headers=headers)
    assert (again.status, again.json()["error"]) == (401, "proof_replayed")


async def test_every_method_has_a_current_lexicon_the_sdk_parses(app: Any) -> None:
    from atproto_lexicon.parser import lexicon_parse_file

    import importlib.util
    spec = importlib.util.spec_from_file_location("xrpc_lexicons_script", REPO / "scripts" / "xrpc_lexicons.py")
    script = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(script)  # type: ignore[union-attr]
    stale = [str(p.relative_to(REPO)) for p, text in script.wanted(app).items()
             if not p.exists() or p.read_text() != text]
    assert stale == [], "run scripts/xrpc_lexicons.py"
    files = [*(REPO / "lexicons").glob("*.json"), *(REPO / "plugins").glob("*/lexicons/*.json"),
             *(REPO / "examples").glob("*/*/lexicons/*.json")]
    for path in files:
        parsed = lexicon_parse_file(path)
        assert parsed.id == json.loads(path.read_text())["id"] == path.stem
    lex = lexicons(app)
    for mid, method in methods(app).items():
        main = lex.method(mid)
        assert main is not None and main["type"] == method.kind, mid
    # the service's methods: its reads and the method ids of docs/identity.md
    assert {f"{NS}.community.get", f"{NS}.membership.join", f"{NS}.membership.listMine",
            f"{NS}.reports.create"} <= set(methods(app))
