"""After the roles and invites branches merge: moderators ban, manage invites, and their
refused actions are audited as denied (issue 14, acceptance: roles and denials)."""

from __future__ import annotations

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


async def test_a_moderator_bans_members_and_manages_invites_but_cannot_ban_an_admin(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol, dave = people("alice"), people("bob"), people("carol"), people("dave")
    did = (await api.create(alice, "Moderated club"))["did"]
    for person in (bob, carol, dave):
        assert (await api.join(did, person["did"])).status == 201
    given = await api.post(api.path(did, f"/members/{bob['did']}/roles"), {"adminDid": alice["did"], "role": "moderator"})
    assert given.status == 200, given.text
    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": dave["did"]})).status == 200

    banned = await api.post(api.path(did, "/bans"), {"adminDid": bob["did"], "memberDid": carol["did"]})
    assert banned.status == 201, banned.text
    assert (await api.get(api.path(did, "/bans"), adminDid=bob["did"])).status == 200
    made = await api.post(api.path(did, "/invites"), {"adminDid": bob["did"], "maxUses": 1})
    assert made.status == 201, made.text
    assert (await api.get(api.path(did, "/invites"), adminDid=bob["did"])).status == 200

    refused = await api.post(api.path(did, "/bans"), {"adminDid": bob["did"], "memberDid": dave["did"]})
    assert refused.status == 403 and refused.json()["error"] == "not_primary_admin"
    assert (await api.check(did, dave["did"]))["isAdmin"] is True
    denied = [e for e in await api.audit(did, alice["did"]) if e["outcome"] == "denied"]
    assert [(e["action"], e["actorDid"], e["targetDid"], e["metadata"]["code"]) for e in denied] == [
        ("membership.ban", bob["did"], dave["did"], "not_primary_admin")]
    # and the moderator reads that entry too (audit.read)
    assert denied[0]["id"] in [e["id"] for e in await api.audit(did, bob["did"])]
