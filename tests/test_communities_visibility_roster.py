"""Roster visibility and unlisted communities against the devnet (issue 14, part 4):
`rosterVisibility` decides who may list the members (the membership check stays
available), `listed: false` keeps a community out of every list and search while its
DID and invites still reach it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.helpers import login_as

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


def dids(resp: Any) -> list[str]:
    assert resp.status == 200, resp.text
    return [c["did"] for c in resp.json()["communities"]]


async def settings(api: Api, did: str, admin: str, **fields: Any) -> Any:
    return await api.client.put(api.path(did, "/settings"), json={"adminDid": admin, **fields}, api_key=api.key)


async def test_an_admins_only_roster_is_403_to_a_member_and_200_to_an_admin(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Quiet council", rosterVisibility="admins"))["did"]
    assert (await api.join(did, bob["did"])).status == 201

    member = await api.get(api.path(did, "/members"), userDid=bob["did"])
    assert member.status == 403 and member.json()["error"] == "members_hidden"
    assert (await api.get(api.path(did, "/members"))).status == 403
    # an admin named as a mere viewer (userDid, which any app may assert) is not enough
    assert (await api.get(api.path(did, "/members"), userDid=alice["did"])).status == 403
    admin = await api.get(api.path(did, "/members"), adminDid=alice["did"])
    assert admin.status == 200, admin.text
    assert {m["did"] for m in admin.json()["members"]} == {alice["did"], bob["did"]}
    # the community's apps still check membership
    assert (await api.check(did, bob["did"]))["isMember"] is True
    # the browser: a member's session is refused, the admin's is not
    bob_session, alice_session = await login_as(app, bob["did"]), await login_as(app, alice["did"])
    assert (await client.get(f"/communities/{did}/members", session=bob_session)).status == 403
    assert (await client.get(f"/communities/{did}/members", session=alice_session)).status == 200
    page = await client.get(f"/c/{did}", session=bob_session)
    assert page.status == 200 and "you are not among them" in page.text
    assert "you are not among them" not in (await client.get(f"/c/{did}", session=alice_session)).text


async def test_a_members_only_roster_and_the_settings_that_change_it(app, client, people):
    api = await Api.make(app, client)
    alice, bob, eve = people("alice"), people("bob"), people("eve")
    did = (await api.create(alice, "Members see members"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert (await api.get(api.path(did, "/members"), userDid=eve["did"])).status == 200

    changed = await settings(api, did, alice["did"], rosterVisibility="members")
    assert changed.status == 200, changed.text
    assert changed.json() == {"communityDid": did, "requireUserProof": False, "rosterVisibility": "members",
                              "listed": True}
    assert (await api.get(api.path(did, "/members"), userDid=eve["did"])).status == 403
    assert (await api.get(api.path(did, "/members"), userDid=bob["did"])).status == 200
    shown = (await api.get(api.path(did), userDid=alice["did"])).json()["community"]
    assert shown["rosterVisibility"] == "members" and shown["listed"] is True
    assert "rosterVisibility" not in (await api.get(api.path(did), userDid=bob["did"])).json()["community"]
    [entry] = await api.audit(did, alice["did"], action="community.settings_changed")
    assert entry["metadata"] == {"rosterVisibility": "members"}

    refused = await settings(api, did, bob["did"], rosterVisibility="public")
    assert refused.status == 403 and refused.json()["error"] == "not_admin"
    for bad in ({"rosterVisibility": "everyone"}, {"listed": "no"}, {}):
        resp = await settings(api, did, alice["did"], **bad)
        assert resp.status == 400 and resp.json()["error"] == "invalid_request", (bad, resp.text)
    bad_create = await api.post("/api/v1/communities", {"creatorDid": alice["did"], "displayName": "Bad",
                                                        "rosterVisibility": "nobody"})
    assert bad_create.status == 400


async def test_an_unlisted_community_is_absent_from_search_and_lists_and_present_by_did_and_invite(
        app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    hidden = (await api.create(alice, "Moonlit potters", listed=False))["did"]
    shown = (await api.create(alice, "Sunlit potters"))["did"]

    assert dids(await api.get("/api/v1/communities", query="potters")) == [shown]
    assert hidden not in dids(await api.get("/api/v1/communities", limit=100))
    assert dids(await api.get("/api/v1/communities", query="moonlit", userDid=alice["did"])) == []
    discover = await client.get("/discover", params={"q": "potters"}, session=await login_as(app, alice["did"]))
    assert discover.status == 200 and "Sunlit potters" in discover.text and "Moonlit potters" not in discover.text

    by_did = await api.get(api.path(hidden), userDid=alice["did"])
    assert by_did.status == 200 and by_did.json()["community"]["listed"] is False
    code = (await api.post(api.path(hidden, "/invites"), {"adminDid": alice["did"]})).json()["code"]
    assert (await client.get(f"/api/v1/invites/{code}")).json()["community"]["did"] == hidden
    assert (await api.join(hidden, bob["did"], inviteCode=code)).status == 201

    # listed again through the settings
    assert (await settings(api, hidden, alice["did"], listed=True)).status == 200
    assert dids(await api.get("/api/v1/communities", query="potters")) == [shown, hidden]
