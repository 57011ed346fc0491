"""Invite links against the devnet (issue 14, part 1): codes admit at once whatever the
community's type, count their uses atomically, expire on the clock, can be revoked, and
preview the community publicly without its roster."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from daemon.base import iso
from tests.fixtures_communities import Api, devnet_module_fixtures, proofs_on_pds

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


async def invite(api: Api, community: str, admin: str, **fields: Any) -> dict[str, Any]:
    resp = await api.post(api.path(community, "/invites"), {"adminDid": admin, **fields})
    assert resp.status == 201, resp.text
    return resp.json()


async def test_invite_with_two_uses_admits_two_to_an_admin_approved_community_and_refuses_the_third(
        app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob, carol, dave = people("alice"), people("bob"), people("carol"), people("dave")
    did = (await api.create(alice, "Quiet readers", type="admin-approved"))["did"]
    created = await invite(api, did, alice["did"], maxUses=2, note="for the book fair")
    assert created["maxUses"] == 2 and created["uses"] == 0 and created["createdBy"] == alice["did"]
    assert len(created["code"]) >= 22 and created["url"] == app.config.server.base_url.rstrip("/") + "/invite/" + created["code"]

    for person in (bob, carol):
        resp = await api.join(did, person["did"], inviteCode=created["code"])
        assert resp.status == 201, resp.text
        assert resp.json()["status"] == "joined"
        assert (await api.check(did, person["did"]))["isMember"] is True
    third = await api.join(did, dave["did"], inviteCode=created["code"])
    assert third.status == 410 and third.json()["error"] == "invite_exhausted"
    assert (await api.check(did, dave["did"])) == {"isMember": False, "isAdmin": False, "isPending": False}

    joined = [e.data for e in recorder.of("member.joined", did) if e.data["memberDid"] != alice["did"]]
    assert [(e["memberDid"], e["via"]) for e in joined] == [(bob["did"], "invite"), (carol["did"], "invite")]
    assert set(await proofs_on_pds(app, did)) == {alice["did"], bob["did"], carol["did"]}
    listed = (await api.get(api.path(did, "/invites"), adminDid=alice["did"])).json()["invites"]
    assert [(i["id"], i["uses"], i["note"]) for i in listed] == [(created["id"], 2, "for the book fair")]
    assert "code" not in listed[0]
    entries = await api.audit(did, alice["did"])
    assert "invite.created" in [e["action"] for e in entries]
    assert [e["metadata"].get("via") for e in entries if e["action"] == "member.joined"] == ["invite", "invite"]


async def test_only_the_hash_of_a_code_is_stored(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Hash club"))["did"]
    code = (await invite(api, did, alice["did"]))["code"]
    rows = await app.db.fetchall("SELECT * FROM community_invites WHERE community_did = ?", (did,))
    assert len(rows) == 1
    assert rows[0]["code_hash"] == hashlib.sha256(code.encode()).hexdigest()
    assert not any(code in str(value) for value in tuple(rows[0]))


async def test_two_racing_joins_on_a_last_use_admit_exactly_one(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "One seat left", type="private"))["did"]
    code = (await invite(api, did, alice["did"], maxUses=1))["code"]
    answers = await asyncio.gather(api.join(did, bob["did"], inviteCode=code),
                                   api.join(did, carol["did"], inviteCode=code))
    assert sorted(a.status for a in answers) == [201, 410], [a.text for a in answers]
    winner = bob if answers[0].status == 201 else carol
    assert set(await proofs_on_pds(app, did)) == {alice["did"], winner["did"]}
    details = (await api.get(api.path(did), userDid=alice["did"])).json()["community"]
    assert details["memberCount"] == 2


async def test_an_expired_invite_is_410(app, client, people, clock):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Night owls", type="admin-approved"))["did"]
    code = (await invite(api, did, alice["did"], expiresAt=iso(clock.time() + 3600)))["code"]
    assert (await client.get(f"/api/v1/invites/{code}")).status == 200
    clock.advance(3601)
    resp = await api.join(did, bob["did"], inviteCode=code)
    assert resp.status == 410 and resp.json()["error"] == "invite_expired"
    assert (await client.get(f"/api/v1/invites/{code}")).json()["error"] == "invite_expired"
    assert (await api.check(did, bob["did"]))["isMember"] is False


async def test_a_revoked_invite_is_410_and_unknown_codes_are_404(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Revokers", type="admin-approved"))["did"]
    first = await invite(api, did, alice["did"])
    second = await invite(api, did, alice["did"])
    revoked = await api.delete(api.path(did, f"/invites/{first['code']}"), {"adminDid": alice["did"]})
    assert revoked.status == 200, revoked.text
    assert revoked.json()["revokedBy"] == alice["did"]
    by_id = await api.delete(api.path(did, f"/invites/{second['id']}"), {"adminDid": alice["did"]})
    assert by_id.status == 200, by_id.text
    again = await api.delete(api.path(did, f"/invites/{first['code']}"), {"adminDid": alice["did"]})
    assert again.status == 410 and again.json()["error"] == "invite_revoked"
    for code in (first["code"], second["code"]):
        resp = await api.join(did, bob["did"], inviteCode=code)
        assert resp.status == 410 and resp.json()["error"] == "invite_revoked"
    unknown = await api.join(did, bob["did"], inviteCode="nosuchcode0123456789abcd")
    assert unknown.status == 404 and unknown.json()["error"] == "invite_not_found"
    assert (await client.get("/api/v1/invites/nosuchcode0123456789abcd")).status == 404
    assert [e["action"] for e in await api.audit(did, alice["did"], action="invite.revoked")] == \
        ["invite.revoked", "invite.revoked"]


async def test_an_invite_of_another_community_is_404(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    one = (await api.create(alice, "First club", type="admin-approved"))["did"]
    other = (await api.create(alice, "Second club", type="admin-approved"))["did"]
    code = (await invite(api, one, alice["did"]))["code"]
    resp = await api.join(other, bob["did"], inviteCode=code)
    assert resp.status == 404 and resp.json()["error"] == "invite_not_found"
    assert (await api.delete(api.path(other, f"/invites/{code}"), {"adminDid": alice["did"]})).status == 404


async def test_the_public_preview_shows_the_community_and_no_member(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Secret garden", type="private", description="Roses only"))["did"]
    code = (await invite(api, did, alice["did"]))["code"]
    assert (await api.join(did, bob["did"], inviteCode=code)).status == 201
    resp = await client.get(f"/api/v1/invites/{code}")  # no API key
    assert resp.status == 200, resp.text
    body = resp.json()
    assert body["community"] == {"did": did, "handle": body["community"]["handle"],
                                 "displayName": "Secret garden", "description": "Roses only", "avatar": None,
                                 "type": "private", "memberCount": 2}
    assert body["invite"]["uses"] == 1
    assert alice["did"] not in resp.text and bob["did"] not in resp.text


async def test_an_invite_admits_a_pending_user_at_once(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Waiting room", type="admin-approved"))["did"]
    assert (await api.join(did, bob["did"])).status == 202
    code = (await invite(api, did, alice["did"]))["code"]
    assert (await api.join(did, bob["did"], inviteCode=code)).status == 201
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    pending = (await api.get(api.path(did, "/members/pending"), adminDid=alice["did"])).json()
    assert pending["pendingMembers"] == []


async def test_a_member_joining_again_with_an_invite_is_409_and_uses_nothing(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Regulars"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    code = (await invite(api, did, alice["did"], maxUses=1))["code"]
    again = await api.join(did, bob["did"], inviteCode=code)
    assert again.status == 409 and again.json()["error"] == "already_member"
    listed = (await api.get(api.path(did, "/invites"), adminDid=alice["did"])).json()["invites"]
    assert listed[0]["uses"] == 0


async def test_only_admins_manage_invites_and_bodies_are_checked(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Strict club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    refused = await api.post(api.path(did, "/invites"), {"adminDid": bob["did"]})
    assert refused.status == 403 and refused.json()["error"] == "not_admin"
    assert (await api.get(api.path(did, "/invites"), adminDid=bob["did"])).status == 403
    for bad in ({"maxUses": 0}, {"maxUses": "2"}, {"note": "x" * 201}, {"expiresAt": "tomorrow"},
                {"expiresAt": "2020-01-01T00:00:00Z"}, {"expiresAt": "2099-01-01T00:00:00"},
                {"expiresAt": "0999-01-01T00:00:00Z"}):
        resp = await api.post(api.path(did, "/invites"), {"adminDid": alice["did"], **bad})
        assert resp.status == 400 and resp.json()["error"] == "invalid_request", (bad, resp.text)
    assert (await api.get(api.path(did, "/invites"), adminDid=alice["did"])).json()["invites"] == []
    bad_code = await api.join(did, bob["did"], inviteCode=7)
    assert bad_code.status == 400
