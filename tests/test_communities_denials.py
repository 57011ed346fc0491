"""Refused admin actions in the audit log (issue 14, part 5): a 403 given to a named
actor is audited with `outcome: "denied"` and the code, rate limited so a flood cannot
fill the log. (Moderators come with roles; a plain member's refused admin actions are
the denials here.)"""

from __future__ import annotations

import pytest

from plugins.communities import denials
from tests.fixtures_communities import Api, devnet_module_fixtures, seed_community
from tests.helpers import login_as

config_overrides, extra_plugins = devnet_module_fixtures()


@pytest.mark.pds
async def test_a_refused_ban_and_approval_appear_in_the_audit_log_as_denied(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Watched club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert (await api.join(did, carol["did"])).status == 201

    refused = await api.post(api.path(did, "/bans"), {"adminDid": bob["did"], "memberDid": carol["did"]})
    assert refused.status == 403 and refused.json()["error"] == "not_admin"
    assert (await api.decide(did, "approve", bob["did"], carol["did"])).status == 403
    assert (await api.check(did, carol["did"]))["isMember"] is True  # nothing changed

    entries = await api.audit(did, alice["did"])
    denied = [e for e in entries if e["outcome"] == "denied"]
    assert [(e["action"], e["actorDid"], e["targetDid"], e["metadata"]) for e in denied] == [
        ("membership.approve", bob["did"], None, {"code": "not_admin"}),  # newest first
        ("membership.ban", bob["did"], carol["did"], {"code": "not_admin"}),
    ]
    assert all(e["outcome"] == "done" for e in entries if e not in denied)
    assert "member.banned" not in [e["action"] for e in entries]


async def test_a_refused_browser_admin_action_is_audited_too(app, client):
    api = await Api.make(app, client)
    admin, member, other = "did:plc:admin0000000000000000000a", "did:plc:member000000000000000000b", \
        "did:plc:other0000000000000000000c"
    did = await seed_community(app, admin, creator_app_id=api.app_id, members=(member, other))
    session = await login_as(app, member)
    assert (await client.delete(f"/communities/{did}/members/{other}", session=session)).status == 403
    assert (await client.post(f"/communities/{did}/members/{other}/reject", session=session)).status == 403
    denied = [e for e in await api.audit(did, admin) if e["outcome"] == "denied"]
    assert [(e["action"], e["actorDid"], e["targetDid"], e["actorProven"], e["metadata"]) for e in denied] == [
        ("membership.reject", member, other, True, {"code": "not_admin"}),
        ("membership.remove", member, other, True, {"code": "not_admin"})]
    assert (await api.check(did, other))["isMember"] is True


async def test_denials_are_rate_limited_per_actor_and_action(app, client, clock):
    api = await Api.make(app, client)
    admin, member, other = "did:plc:admin0000000000000000000a", "did:plc:member000000000000000000b", \
        "did:plc:other0000000000000000000c"
    did = await seed_community(app, admin, creator_app_id=api.app_id, members=(member, other))

    async def denied_entries() -> list[dict]:
        return [e for e in await api.audit(did, admin, limit=100) if e["outcome"] == "denied"]

    for _ in range(denials.PER_ACTOR + 15):
        resp = await api.post(api.path(did, "/bans"), {"adminDid": member, "memberDid": other})
        assert resp.status == 403
    assert len(await denied_entries()) == denials.PER_ACTOR
    # another action of the same actor has its own allowance; the flood stays capped
    assert (await api.get(api.path(did, "/bans"), adminDid=member)).status == 403
    assert len(await denied_entries()) == denials.PER_ACTOR + 1
    clock.advance(denials.WINDOW_SECONDS)
    assert (await api.post(api.path(did, "/bans"), {"adminDid": member, "memberDid": other})).status == 403
    assert len(await denied_entries()) == denials.PER_ACTOR + 2


async def test_a_flood_from_many_actors_is_capped_per_community(app, client):
    api = await Api.make(app, client)
    admin = "did:plc:admin0000000000000000000a"
    actors = tuple(f"did:plc:flood{i:019d}" for i in range(denials.PER_COMMUNITY // 2 + 10))
    did = await seed_community(app, admin, creator_app_id=api.app_id, members=actors)
    for actor in actors:
        for _ in range(3):
            await api.post(api.path(did, "/invites"), {"adminDid": actor})
    entries = [e for e in await api.audit(did, admin, limit=100) if e["outcome"] == "denied"]
    rows = await app.db.fetchval("SELECT count(*) FROM audit_log WHERE community_did = ?", (did,))
    assert rows == denials.PER_COMMUNITY and len(entries) == 100
