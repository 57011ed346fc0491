"""The membership state machine of docs/communities.md, path by path, against the devnet:
every transition's result, event and audit entry, and every refusal's status with the
state left unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record, proofs_on_pds

pytestmark = pytest.mark.pds


config_overrides, extra_plugins = devnet_module_fixtures()


async def snapshot(app: Any, api: Api, did: str, *users: str) -> dict[str, Any]:
    """Everything a refusal must leave alone: statuses, admins (local and on the PDS),
    proofs on the PDS, counts, the audit log and the events table."""
    details = (await api.get(api.path(did))).json()["community"]
    return {
        "status": {u: await api.check(did, u) for u in users},
        "admins": [a["did"] for a in details["admins"]],
        "pds_admins": [a["did"] for a in (await pds_record(app, did, "admins"))["admins"]],
        "proofs": sorted(await proofs_on_pds(app, did)),
        "memberCount": details["memberCount"],
        # changes only: a refused admin action is itself audited (outcome denied)
        "audit": await app.db.fetchval("SELECT count(*) FROM audit_log WHERE community_did = ? "
                                       "AND json_extract(metadata, '$.outcome') IS NOT 'denied'", (did,)),
        "events": await app.db.fetchval("SELECT count(*) FROM events WHERE community_did = ?", (did,)),
    }


async def refused(resp: Any, status: int, code: str) -> None:
    assert resp.status == status, resp.text
    assert resp.json()["error"] == code, resp.text


async def test_admin_approved_join_is_pending_then_approved_or_rejected(app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Quiet readers", type="admin-approved"))["did"]

    resp = await api.join(did, bob["did"])
    assert resp.status == 202 and resp.json()["status"] == "pending"
    assert await api.check(did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": True}
    assert bob["did"] not in await proofs_on_pds(app, did)
    assert (await api.join(did, carol["did"])).status == 202
    await refused(await api.join(did, bob["did"]), 409, "already_pending")

    pending = await api.get(api.path(did, "/members/pending"), adminDid=alice["did"])
    assert [p["userDid"] for p in pending.json()["pendingMembers"]] == [bob["did"], carol["did"]]
    assert pending.json()["pendingMembers"][0]["handle"] == bob["handle"]
    await refused(await api.get(api.path(did, "/members/pending"), adminDid=bob["did"]), 403, "not_admin")

    resp = await api.decide(did, "approve", alice["did"], bob["did"])
    assert resp.status == 200, resp.text
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert bob["did"] in await proofs_on_pds(app, did)
    approved = recorder.of("member.approved", did)
    assert [e.data for e in approved] == [{"memberDid": bob["did"], "approvedBy": alice["did"]}]

    resp = await api.decide(did, "reject", alice["did"], carol["did"], reason="not a reader")
    assert resp.status == 200, resp.text
    assert await api.check(did, carol["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert carol["did"] not in await proofs_on_pds(app, did)
    rejected = recorder.of("member.rejected", did)
    assert [e.data for e in rejected] == [{"memberDid": carol["did"], "rejectedBy": alice["did"],
                                           "reason": "not a reader"}]
    assert rejected[0].app_id == api.app_id

    entries = [e for e in await api.audit(did, alice["did"]) if e["outcome"] == "done"]
    actions = [(e["action"], e["targetDid"]) for e in entries]
    assert actions[:4] == [("member.rejected", carol["did"]), ("member.approved", bob["did"]),
                           ("member.requested", carol["did"]), ("member.requested", bob["did"])]
    assert entries[0]["reason"] == "not a reader" and entries[0]["actorDid"] == alice["did"]
    await refused(await api.get(api.path(did, "/audit-log"), adminDid=bob["did"]), 403, "not_admin")

    details = (await api.get(api.path(did), userDid=alice["did"])).json()
    assert details["community"]["memberCount"] == 2 and details["community"]["pendingCount"] == 0


async def test_refusals_return_their_status_and_change_nothing(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol, dave = people("alice"), people("bob"), people("carol"), people("dave")
    did = (await api.create(alice, "Strict club", type="admin-approved"))["did"]
    assert (await api.join(did, bob["did"])).status == 202
    assert (await api.decide(did, "approve", alice["did"], bob["did"])).status == 200
    assert (await api.join(did, carol["did"])).status == 202   # carol stays pending
    users = (alice["did"], bob["did"], carol["did"], dave["did"])
    before = await snapshot(app, api, did, *users)

    cases = [
        (api.join(did, bob["did"]), 409, "already_member"),
        (api.join(did, carol["did"]), 409, "already_pending"),
        (api.decide(did, "approve", bob["did"], carol["did"]), 403, "not_admin"),
        (api.decide(did, "reject", bob["did"], carol["did"]), 403, "not_admin"),
        (api.decide(did, "approve", alice["did"], dave["did"]), 404, "no_pending_request"),
        (api.decide(did, "reject", alice["did"], dave["did"]), 404, "no_pending_request"),
        (api.leave(did, alice["did"]), 409, "primary_admin_must_transfer"),
        (api.leave(did, dave["did"]), 404, "not_member"),
        (api.delete(api.path(did, f"/members/{bob['did']}"), {"adminDid": carol["did"]}), 403, "not_admin"),
        (api.delete(api.path(did, f"/members/{alice['did']}"), {"adminDid": alice["did"]}), 409,
         "cannot_remove_primary_admin"),
        (api.delete(api.path(did, f"/members/{dave['did']}"), {"adminDid": alice["did"]}), 404, "not_member"),
        (api.admins(did, "promote", {"adminDid": bob["did"], "memberDid": bob["did"]}), 403, "not_admin"),
        (api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": carol["did"]}), 404, "not_member"),
        (api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": alice["did"]}), 409, "already_admin"),
        (api.admins(did, "demote", {"adminDid": alice["did"], "memberDid": alice["did"]}), 409,
         "cannot_demote_primary_admin"),
        (api.admins(did, "demote", {"adminDid": alice["did"], "memberDid": bob["did"]}), 409, "not_admin_target"),
        (api.admins(did, "demote", {"adminDid": bob["did"], "memberDid": alice["did"]}), 403, "not_admin"),
        (api.admins(did, "transfer", {"currentOwnerDid": bob["did"], "newOwnerDid": bob["did"]}), 403,
         "not_primary_admin"),
        (api.admins(did, "transfer", {"currentOwnerDid": alice["did"], "newOwnerDid": dave["did"]}), 404,
         "not_member"),
        (api.delete(api.path(did), {"adminDid": bob["did"]}), 403, "not_primary_admin"),
        (api.join("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", dave["did"]), 404, "community_not_found"),
        (api.post(api.path(did, "/members/join"), {"userDid": "bob"}), 400, "invalid_request"),
    ]
    for call, status, code in cases:
        await refused(await call, status, code)
    assert await snapshot(app, api, did, *users) == before


async def test_admin_transitions_keep_pds_and_index_in_step(app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Rotating chairs"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201

    async def admins_both() -> tuple[list[str], list[str]]:
        local = [a["did"] for a in (await api.get(api.path(did))).json()["community"]["admins"]]
        remote = [a["did"] for a in (await pds_record(app, did, "admins"))["admins"]]
        return local, remote

    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    assert await admins_both() == ([alice["did"], bob["did"]],) * 2
    assert (await api.check(did, bob["did"]))["isAdmin"] is True

    # transfer: the new primary goes first, the old primary stays admin
    resp = await api.admins(did, "transfer", {"currentOwnerDid": alice["did"], "newOwnerDid": carol["did"]})
    assert resp.status == 200, resp.text
    assert await admins_both() == ([carol["did"], alice["did"], bob["did"]],) * 2
    await refused(await api.leave(did, carol["did"]), 409, "primary_admin_must_transfer")

    # an admin who leaves stops being an admin
    assert (await api.leave(did, alice["did"])).status == 200
    assert await admins_both() == ([carol["did"], bob["did"]],) * 2
    assert await api.check(did, alice["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}

    # removing an admin demotes them too
    resp = await api.delete(api.path(did, f"/members/{bob['did']}"), {"adminDid": carol["did"], "reason": "spam"})
    assert resp.status == 200, resp.text
    assert await admins_both() == ([carol["did"]],) * 2
    assert [e.data for e in recorder.of("member.removed", did)] == [
        {"memberDid": bob["did"], "removedBy": carol["did"], "reason": "spam"}]

    # demote
    assert (await api.join(did, alice["did"])).status == 201
    assert (await api.admins(did, "promote", {"adminDid": carol["did"], "memberDid": alice["did"]})).status == 200
    assert (await api.admins(did, "demote", {"adminDid": carol["did"], "memberDid": alice["did"]})).status == 200
    assert await admins_both() == ([carol["did"]],) * 2

    # the audit log pages newest first, without repeats
    everything = await api.audit(did, carol["did"], limit=100)
    paged, cursor = [], None
    while True:
        resp = await api.get(api.path(did, "/audit-log"), adminDid=carol["did"], limit=3, cursor=cursor)
        paged += resp.json()["entries"]
        cursor = resp.json().get("cursor")
        if not cursor:
            break
    assert [e["id"] for e in paged] == [e["id"] for e in everything]
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    actions = [e["action"] for e in everything]
    assert actions[:8] == ["admin.demoted", "admin.promoted", "member.joined", "member.removed",
                           "member.left", "admin.transferred", "admin.promoted", "member.joined"]


async def test_primary_admin_deletes_the_community(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Short lived"))["did"]
    resp = await api.delete(api.path(did), {"adminDid": alice["did"]})
    assert resp.status == 200, resp.text
    await refused(await api.get(api.path(did)), 404, "community_not_found")
    await refused(await api.join(did, alice["did"]), 404, "community_not_found")
    listed = (await api.get("/api/v1/communities", query="Short lived")).json()["communities"]
    assert did not in [c["did"] for c in listed]
    from daemon.atproto.pds import get_record
    gone = await get_record(app, app.config.atproto.pds_url, did, "community.commonroom.profile", "self")
    assert gone is None  # the account no longer presents itself as a community
    assert await app.db.fetchval("SELECT count(*) FROM audit_log WHERE community_did = ? AND "
                                 "action = 'community.deleted'", (did,)) == 1
