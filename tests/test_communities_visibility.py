"""Private communities and search, against the devnet."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_communities import Api

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return communities_config


def dids(resp: Any) -> list[str]:
    assert resp.status == 200, resp.text
    return [c["did"] for c in resp.json()["communities"]]


async def test_private_community_is_hidden_from_non_members_and_shown_to_members(app, client, people):
    api = await Api.make(app, client)
    alice, bob, eve = people("alice"), people("bob"), people("eve")
    secret = (await api.create(alice, "Secret bakers", type="private",
                               description="Sourdough starters"))["did"]
    public = (await api.create(alice, "Public bakers"))["did"]

    assert dids(await api.get("/api/v1/communities", query="bakers", userDid=eve["did"])) == [public]
    assert dids(await api.get("/api/v1/communities", query="bakers")) == [public]
    listed = dids(await api.get("/api/v1/communities", query="bakers", userDid=alice["did"]))
    assert listed == [public, secret]
    found = (await api.get("/api/v1/communities", query="sourdough", userDid=alice["did"])).json()["communities"]
    assert found[0]["type"] == "private" and found[0]["isAdmin"] is True and found[0]["memberCount"] == 1

    # details are hidden from non-members; joins need approval
    hidden = (await api.get(api.path(secret), userDid=eve["did"])).json()
    assert hidden["community"]["restricted"] is True and "admins" not in hidden["community"]
    assert (await api.get(api.path(secret, "/members"), userDid=eve["did"])).status == 403
    assert (await api.join(secret, bob["did"])).status == 202
    assert (await api.decide(secret, "approve", alice["did"], bob["did"])).status == 200
    assert dids(await api.get("/api/v1/communities", query="secret", userDid=bob["did"])) == [secret]
    shown = (await api.get(api.path(secret), userDid=bob["did"])).json()
    assert shown["community"]["description"] == "Sourdough starters"
    assert (await api.get(api.path(secret, "/members"), userDid=bob["did"])).status == 200


async def test_private_community_is_invisible_to_other_apps_until_an_admin_allows_them(app, client, people):
    creator_app = await Api.make(app, client)
    other_app = await Api.make(app, client, owner="did:plc:otherowner")
    alice = people("alice")
    secret = (await creator_app.create(alice, "Hidden garden", type="private"))["did"]

    assert (await other_app.get(other_app.path(secret))).status == 404
    assert (await other_app.join(secret, alice["did"])).status == 404
    assert dids(await other_app.get("/api/v1/communities", query="hidden", userDid=alice["did"])) == []

    resp = await creator_app.post(creator_app.path(secret, f"/apps/{other_app.app_id}"), {"adminDid": "did:plc:nobody"})
    assert resp.status == 403
    resp = await creator_app.post(creator_app.path(secret, f"/apps/{other_app.app_id}"), {"adminDid": alice["did"]})
    assert resp.status == 200, resp.text
    assert (await other_app.get(other_app.path(secret))).status == 200
    assert dids(await other_app.get("/api/v1/communities", query="hidden", userDid=alice["did"])) == [secret]

    resp = await creator_app.delete(creator_app.path(secret, f"/apps/{other_app.app_id}"), {"adminDid": alice["did"]})
    assert resp.status == 200
    assert (await other_app.get(other_app.path(secret))).status == 404


async def test_search_matches_name_handle_and_description_case_insensitively(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    created = await api.create(alice, "Chess Lovers", description="Openings and ENDGAMES",
                               handle="chessfans" + alice["handle"][5:11])
    did = created["did"]
    assert did in dids(await api.get("/api/v1/communities", query="chess lov"))
    assert did in dids(await api.get("/api/v1/communities", query="endgame"))
    assert did in dids(await api.get("/api/v1/communities", query=created["handle"].split(".")[0].upper()))
    assert did not in dids(await api.get("/api/v1/communities", query="checkers"))
    item = [c for c in (await api.get("/api/v1/communities", query="chess", userDid=alice["did"])).json()["communities"]
            if c["did"] == did][0]
    assert set(item) >= {"did", "handle", "displayName", "type", "memberCount", "isAdmin"}
    assert item["isAdmin"] is True and item["memberCount"] == 1
