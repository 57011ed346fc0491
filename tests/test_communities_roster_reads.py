"""`rosterVisibility` on the reads that name members (issue 22, hole 4), against the
devnet: where the roster is hidden (`members`, `admins`), an app the community does not
trust to act for its admins sees records without `authorDid`/`updatedBy`, cannot filter
records by author, and gets `membership/check` answered only for a user whose own
service-auth token it sends (else 403 `roster_hidden`). The community's creator app, and
any app where the roster is public, see all of it as before."""

from __future__ import annotations

import time
from typing import Any

import pytest

from daemon.base import FakeClock
from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.test_identity_proofs import bearer, token
from tests.test_records_api import note, path

pytestmark = pytest.mark.pds

_, extra_plugins = devnet_module_fixtures()

NOTE = "org.example.garden.note"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())  # service-auth tokens carry the PDS's real time


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return {**communities_config, "identity": {"user_proof": "optional"}}


def refused(resp: Any, status: int, code: str) -> None:
    assert (resp.status, resp.json()["error"]) == (status, code), resp.text


async def hidden_community(app: Any, client: Any, people: Any, visibility: str) -> tuple[Api, Api, str, dict, dict]:
    creator, stranger = await Api.make(app, client), await Api.make(app, client, owner="did:plc:stranger")
    alice, bob = people("alice"), people("bob")
    did = (await creator.create(alice, "Quiet club"))["did"]
    assert (await creator.join(did, bob["did"])).status == 201
    made = await creator.post(path(did), {"userDid": bob["did"], "collection": NOTE, "rkey": "b1",
                                          "record": note("bob's note", NOTE)})
    assert made.status == 201, made.text
    changed = await client.put(creator.path(did, "/settings"), api_key=creator.key,
                               json={"adminDid": alice["did"], "rosterVisibility": visibility})
    assert changed.status == 200, changed.text
    return creator, stranger, did, alice, bob


async def check(api: Api, did: str, user: str, jwt: str | None = None) -> Any:
    return await api.client.post(api.path(did, "/membership/check"), api_key=api.key, json={"userDid": user},
                                 headers=bearer(jwt) if jwt else {})


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_hidden_roster_hides_record_authors_from_untrusted_apps(app, client, people, visibility):
    creator, stranger, did, alice, bob = await hidden_community(app, client, people, visibility)
    seen = (await stranger.get(path(did, f"/{NOTE}"))).json()["records"]
    assert [(r["rkey"], r["authorDid"], r["updatedBy"]) for r in seen] == [("b1", None, None)]
    assert seen[0]["value"]["text"] == "bob's note"
    one = (await stranger.get(path(did, f"/{NOTE}/b1"))).json()
    assert one["authorDid"] is None
    refused(await stranger.get(path(did, f"/{NOTE}"), authorDid=bob["did"]), 403, "roster_hidden")
    assert (await creator.get(path(did, f"/{NOTE}"))).json()["records"][0]["authorDid"] == bob["did"]
    assert len((await creator.get(path(did, f"/{NOTE}"), authorDid=bob["did"])).json()["records"]) == 1


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_hidden_roster_answers_membership_check_only_for_the_proven_user(
        app, client, people, devnet, visibility):
    creator, stranger, did, alice, bob = await hidden_community(app, client, people, visibility)
    carol = people("carol")
    for user in (bob, carol, alice):
        refused(await check(stranger, did, user["did"]), 403, "roster_hidden")
    refused(await stranger.get(stranger.path(did, "/membership/check"), userDid=bob["did"]), 403, "roster_hidden")

    own = await check(stranger, did, bob["did"], token(devnet, bob, "membership.check"))
    assert own.status == 200, own.text
    assert own.json() == {"isMember": True, "isAdmin": False, "isPending": False}
    outsider = await check(stranger, did, carol["did"], token(devnet, carol, "membership.check"))
    assert outsider.json() == {"isMember": False, "isAdmin": False, "isPending": False}
    refused(await check(stranger, did, bob["did"], token(devnet, alice, "membership.check")), 401, "proof_wrong_user")
    refused(await check(stranger, did, bob["did"], token(devnet, bob, "membership.join")), 401, "proof_wrong_method")

    assert (await creator.check(did, bob["did"]))["isMember"] is True  # the creator app is trusted


async def test_a_public_roster_answers_every_app_as_before(app, client, people):
    creator, stranger, did, alice, bob = await hidden_community(app, client, people, "public")
    assert (await stranger.check(did, bob["did"]))["isMember"] is True
    assert (await stranger.get(path(did, f"/{NOTE}"))).json()["records"][0]["authorDid"] == bob["did"]


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_hidden_roster_keeps_a_users_membership_out_of_details_and_lists(app, client, people, visibility):
    """The same question as membership/check, asked through details or the community list."""
    creator, stranger, did, alice, bob = await hidden_community(app, client, people, visibility)
    details = (await stranger.get(f"/api/v1/communities/{did}", userDid=bob["did"])).json()
    assert "membership" not in details and "isAdmin" not in details
    assert details["community"]["did"] == did
    listed = (await stranger.get("/api/v1/communities", userDid=bob["did"], limit=100)).json()["communities"]
    entry = next(c for c in listed if c["did"] == did)
    assert "isMember" not in entry and "isAdmin" not in entry

    assert (await creator.get(f"/api/v1/communities/{did}", userDid=bob["did"])).json()["membership"]["isMember"]
    listed = (await creator.get("/api/v1/communities", userDid=bob["did"], limit=100)).json()["communities"]
    assert next(c for c in listed if c["did"] == did)["isMember"] is True


async def test_a_members_only_roster_is_listed_to_an_untrusted_app_only_with_the_members_proof(
        app, client, people, devnet):
    """Under `members`, naming any member as userDid used to list the roster, and the
    admins' DIDs are public (details); an app the community does not trust must prove the
    member it names."""
    creator, stranger, did, alice, bob = await hidden_community(app, client, people, "members")
    members_path = stranger.path(did, "/members")
    refused(await stranger.get(members_path, userDid=alice["did"]), 403, "roster_hidden")
    proven = await client.get(members_path, api_key=stranger.key, params={"userDid": bob["did"]},
                              headers=bearer(token(devnet, bob, "membership.listMembers")))
    assert proven.status == 200, proven.text
    assert {m["did"] for m in proven.json()["members"]} == {alice["did"], bob["did"]}
    outsider = people("carol")
    refused(await client.get(members_path, api_key=stranger.key, params={"userDid": outsider["did"]},
                             headers=bearer(token(devnet, outsider, "membership.listMembers"))), 403, "members_hidden")
    assert (await creator.get(members_path, userDid=bob["did"])).status == 200


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_private_hidden_roster_does_not_answer_membership_through_record_reads(
        app, client, people, devnet, visibility):
    """A private community's records are read by naming a member as userDid: 200 for a
    member and 403 `not_member` for anyone else would answer `membership/check`'s question
    for any DID. An app from which the roster is hidden must prove the user it names."""
    from plugins.communities import store as communities_store
    from tests.fixtures_communities import seed_community

    creator, stranger = await Api.make(app, client), await Api.make(app, client, owner="did:plc:stranger")
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = await seed_community(app, alice["did"], type="private", creator_app_id=creator.app_id,
                               members=(bob["did"],))
    async with app.db.transaction("tests.hidden_private") as tx:
        await communities_store.set_visibility_tx(tx, did, None, roster_visibility=visibility)
        await communities_store.allow_app_tx(tx, did, stranger.app_id, alice["did"], app.clock.iso_now())
    for tail in (f"/{NOTE}", f"/{NOTE}/b1"):
        for user in (bob, carol, alice):
            refused(await stranger.get(path(did, tail), userDid=user["did"]), 403, "roster_hidden")

    def as_user(user: dict) -> dict:
        return {"api_key": stranger.key, "params": {"userDid": user["did"]},
                "headers": bearer(token(devnet, user, "record.read"))}

    own = await client.get(path(did, f"/{NOTE}"), **as_user(bob))
    assert own.status == 200 and own.json()["records"] == [], own.text
    refused(await client.get(path(did, f"/{NOTE}/b1"), **as_user(bob)), 404, "record_not_found")
    refused(await client.get(path(did, f"/{NOTE}"), **as_user(carol)), 403, "not_member")  # about herself
    refused(await client.get(path(did, f"/{NOTE}"), api_key=stranger.key, params={"userDid": bob["did"]},
                             headers=bearer(token(devnet, carol, "record.read"))), 401, "proof_wrong_user")
    # the creator app is trusted with the roster: as before
    assert (await creator.get(path(did, f"/{NOTE}"), userDid=bob["did"])).status == 200
    refused(await creator.get(path(did, f"/{NOTE}"), userDid=carol["did"]), 403, "not_member")


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_hidden_roster_does_not_answer_who_wrote_what_through_record_changes(
        app, client, people, devnet, visibility):
    """An unchanged PUT of a record answered 200 for its author, 403 `not_permitted` or
    `app_not_trusted` for another member and 403 `not_member` for anyone else, and a DELETE
    the same refusals: who wrote what and who the members are, which the reads hide. An app
    from which the roster is hidden must prove the user it changes or deletes records as."""
    creator, stranger, did, alice, bob = await hidden_community(app, client, people, visibility)
    carol = people("carol")
    same = {"collection": NOTE, "rkey": "b1", "record": note("bob's note", NOTE)}
    for user in (bob, alice, carol):
        refused(await client.put(path(did), api_key=stranger.key, json={"userDid": user["did"], **same}),
                403, "roster_hidden")
        refused(await client.delete(path(did, f"/{NOTE}/b1"), api_key=stranger.key, json={"userDid": user["did"]}),
                403, "roster_hidden")
    proven = await client.put(path(did), api_key=stranger.key, json={"userDid": bob["did"], **same},
                              headers=bearer(token(devnet, bob, "record.update")))
    assert proven.status == 200, proven.text
    refused(await client.put(path(did), api_key=stranger.key, json={"userDid": carol["did"], **same},
                             headers=bearer(token(devnet, carol, "record.update"))), 403, "not_member")
    # the creator app is trusted with the roster: as before, no proof needed
    assert (await client.put(path(did), api_key=creator.key, json={"userDid": bob["did"], **same})).status == 200


async def test_the_community_list_answers_alike_for_a_member_of_a_hidden_private_community(app, client, people):
    """A private community hidden from the app's roster view is left out of a user's list;
    left out after the page was cut, it left an empty page with a cursor for a member and
    a full one for anyone else."""
    from plugins.communities import store as communities_store
    from tests.fixtures_communities import seed_community

    creator, stranger = await Api.make(app, client), await Api.make(app, client, owner="did:plc:stranger")
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    await seed_community(app, alice["did"], type="open", creator_app_id=creator.app_id)
    hidden = await seed_community(app, alice["did"], type="private", creator_app_id=creator.app_id,
                                  members=(bob["did"],))
    async with app.db.transaction("tests.hidden_private") as tx:
        await communities_store.set_visibility_tx(tx, hidden, None, roster_visibility="members")
        await communities_store.allow_app_tx(tx, hidden, stranger.app_id, alice["did"], app.clock.iso_now())
    for limit in (1, 2, 100):
        seen = [(await stranger.get("/api/v1/communities", userDid=user["did"], limit=limit)).json()
                for user in (bob, carol)]
        assert seen[0] == seen[1], (limit, seen)
    # the creator app sees the roster: bob's private community is listed to it
    listed = (await creator.get("/api/v1/communities", userDid=bob["did"], limit=100)).json()["communities"]
    assert hidden in [c["did"] for c in listed]
