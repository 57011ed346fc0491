"""Open communities against the devnet: create, join, check, leave; PDS records, events
and audit entries for each."""

from __future__ import annotations

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record, proofs_on_pds

pytestmark = pytest.mark.pds


config_overrides, extra_plugins = devnet_module_fixtures()


async def test_create_open_community_writes_profile_admins_and_creator_proof(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    community = await api.create(alice, "Garden club", description="Tomatoes and more")
    did = community["did"]
    assert community["type"] == "open" and community["memberCount"] == 1
    assert [a["did"] for a in community["admins"]] == [alice["did"]]
    profile = await pds_record(app, did, "profile")
    assert profile["displayName"] == "Garden club" and profile["type"] == "open"
    admins = await pds_record(app, did, "admins")
    assert [a["did"] for a in admins["admins"]] == [alice["did"]]
    assert alice["did"] in await proofs_on_pds(app, did)
    assert await api.check(did, alice["did"]) == {"isMember": True, "isAdmin": True, "isPending": False}


async def test_join_open_community_is_immediate_with_proof_event_and_audit(app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Book club"))["did"]

    resp = await api.join(did, bob["did"])
    assert resp.status == 201, resp.text
    assert resp.json()["status"] == "joined"
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert bob["did"] in await proofs_on_pds(app, did)
    joined = [e for e in recorder.of("member.joined", did) if e.data["memberDid"] == bob["did"]]
    assert len(joined) == 1 and joined[0].app_id == api.app_id
    assert joined[0].payload()["data"] == {"memberDid": bob["did"], "communityDid": did}
    entries = await api.audit(did, alice["did"])
    assert entries[0]["action"] == "member.joined" and entries[0]["targetDid"] == bob["did"]
    assert entries[0]["appId"] == api.app_id

    members = (await api.get(api.path(did, "/members"))).json()
    assert {m["did"] for m in members["members"]} == {alice["did"], bob["did"]}
    assert members["total"] == 2
    handles = {m["did"]: m["handle"] for m in members["members"]}
    assert handles[bob["did"]] == bob["handle"]  # from the profile cache filled at join

    found = (await api.get(api.path(did, "/members"), search=bob["handle"][:6].upper())).json()["members"]
    assert [m["did"] for m in found] == [bob["did"]]

    again = await api.join(did, bob["did"])
    assert again.status == 409 and again.json()["error"] == "already_member"

    left = await api.leave(did, bob["did"])
    assert left.status == 200, left.text
    assert await api.check(did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert bob["did"] not in await proofs_on_pds(app, did)
    assert [e.data for e in recorder.of("member.left", did)] == [{"memberDid": bob["did"]}]
