"""Security review fixes, against the devnet: which apps may act for a community's admins,
no orphan proof when joins race, leaving with a dead user PDS, and delete ordering."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.http.base import ApiError
from tests.fixtures_communities import Api, devnet_module_fixtures, proofs_on_pds
from tests.helpers import login_as

pytestmark = pytest.mark.pds


config_overrides, extra_plugins = devnet_module_fixtures()


async def test_an_untrusted_app_cannot_act_as_a_communitys_admin(app, client, people, recorder):
    creator = await Api.make(app, client)
    rogue = await Api.make(app, client, owner="did:plc:rogueowner")
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await creator.create(alice, "Trusted garden", type="admin-approved"))["did"]
    a = alice["did"]
    # non-admin actions stay open to any app that can see the community
    assert (await rogue.join(did, bob["did"])).status == 202
    assert (await creator.join(did, carol["did"])).status == 202
    assert (await creator.decide(did, "approve", a, carol["did"])).status == 200
    before_audit = await creator.audit(did, a)
    before_events = len(recorder.events)

    refused = [
        await rogue.decide(did, "approve", a, bob["did"]),
        await rogue.decide(did, "reject", a, bob["did"]),
        await rogue.delete(rogue.path(did, f"/members/{carol['did']}"), {"adminDid": a}),
        await rogue.admins(did, "promote", {"adminDid": a, "memberDid": carol["did"]}),
        await rogue.admins(did, "demote", {"adminDid": a, "memberDid": a}),
        await rogue.admins(did, "transfer", {"currentOwnerDid": a, "newOwnerDid": carol["did"]}),
        await rogue.get(rogue.path(did, "/audit-log"), adminDid=a),
        await rogue.post(rogue.path(did, f"/apps/{rogue.app_id}"), {"adminDid": a, "manage": True}),
        await rogue.delete(rogue.path(did), {"adminDid": a}),
    ]
    for resp in refused:
        assert resp.status == 403, resp.text
        assert resp.json()["error"] == "app_not_trusted"
    # nothing changed
    assert await creator.check(did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": True}
    assert await creator.check(did, carol["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert (await creator.get(creator.path(did))).status == 200
    # only the refusals themselves are audited (outcome denied, docs/communities.md)
    after_audit = await creator.audit(did, a)
    assert [e for e in after_audit if e["outcome"] == "done"] == before_audit
    assert {e["metadata"]["code"] for e in after_audit if e["outcome"] == "denied"} == {"app_not_trusted"}
    assert len(recorder.events) == before_events

    # an admin grants the rogue app visibility only (browser, CSRF): still not trusted
    session = await login_as(app, a, alice["handle"])
    grant = f"/communities/{did}/apps/{rogue.app_id}"
    assert (await client.post(grant, json={"manage": True}, session=session, csrf=False)).status == 403
    resp = await client.post(grant, json={"manage": False}, session=session)
    assert resp.status == 200 and resp.json()["manage"] is False, resp.text
    assert (await rogue.decide(did, "approve", a, bob["did"])).json()["error"] == "app_not_trusted"

    # ... then management: now it may act for the admins
    resp = await client.post(grant, json={"manage": True}, session=session)
    assert resp.status == 200 and resp.json()["manage"] is True, resp.text
    assert (await rogue.decide(did, "approve", a, bob["did"])).status == 200
    assert await creator.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    # a managing app may grant management to another app
    third = await Api.make(app, client, owner="did:plc:thirdowner")
    assert (await rogue.post(rogue.path(did, f"/apps/{third.app_id}"), {"adminDid": a, "manage": True})).status == 200
    assert (await third.admins(did, "promote", {"adminDid": a, "memberDid": bob["did"]})).status == 200
    # revoked (browser DELETE): refused again
    resp = await client.delete(grant, session=session)
    assert resp.status == 200, resp.text
    resp = await rogue.admins(did, "demote", {"adminDid": a, "memberDid": bob["did"]})
    assert resp.status == 403 and resp.json()["error"] == "app_not_trusted"
    actions = [e["action"] for e in await creator.audit(did, a)]
    assert actions.count("community.app_allowed") == 3 and "community.app_disallowed" in actions


async def test_private_visibility_grants_need_a_managing_app(app, client, people):
    creator = await Api.make(app, client)
    viewer = await Api.make(app, client, owner="did:plc:viewerowner")
    outsider = await Api.make(app, client, owner="did:plc:outsider")
    alice = people("alice")
    did = (await creator.create(alice, "Quiet room", type="private"))["did"]
    resp = await creator.post(creator.path(did, f"/apps/{viewer.app_id}"), {"adminDid": alice["did"]})
    assert resp.status == 200, resp.text
    # the viewer app sees the community but may not widen or narrow its visibility
    assert (await viewer.get(viewer.path(did))).status == 200
    for resp in (await viewer.post(viewer.path(did, f"/apps/{outsider.app_id}"), {"adminDid": alice["did"]}),
                 await viewer.delete(viewer.path(did, f"/apps/{viewer.app_id}"), {"adminDid": alice["did"]})):
        assert resp.status == 403 and resp.json()["error"] == "app_not_trusted", resp.text
    assert (await outsider.get(outsider.path(did))).status == 404
    assert (await viewer.get(viewer.path(did))).status == 200
    assert resp.json()["message"].startswith(f"App {viewer.app_id} may not act for the admins")


async def test_a_join_that_loses_a_race_leaves_no_second_proof(app, client, people):
    from plugins.communities.steps import nsid
    from plugins.communities import membership
    from plugins.communities.steps import Actor
    from plugins.communities import store as communities_store

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Racing club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    row = await communities_store.get_community(app.db, did)
    # A second join that passed its first check before the first one committed, and
    # began its pending write after it finished (so it chose a new record key).
    with pytest.raises(ApiError) as caught:
        await membership._confirm(app, row, bob["did"], Actor(bob["did"], api.app_id),
                                   "member.joined", None, None, None)
    assert caught.value.status == 409
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, did)
    records, _ = await repo.list_records(nsid(app, "membershipProof"), limit=100)
    bobs = [r for r in records if r["value"]["memberDid"] == bob["did"]]
    assert len(bobs) == 1, bobs
    member = await app.db.fetchone("SELECT proof_rkey FROM members WHERE community_did = ? AND member_did = ?",
                                   (did, bob["did"]))
    assert bobs[0]["uri"].endswith("/" + member["proof_rkey"])
    assert await app.writes.pending(community_did=did) == []


async def test_leaving_works_when_the_users_own_pds_fails(app, client, people, monkeypatch, recorder):
    import plugins.oauth.userrepo as userrepo

    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    ns = app.config.atproto.namespace
    open_did = (await api.create(alice, "Open door"))["did"]
    gated_did = (await api.create(alice, "Gated door", type="admin-approved"))["did"]
    uri = f"at://{bob['did']}/{ns}.membership/3kabcdefghij2"
    assert (await api.join(open_did, bob["did"], membershipUri=uri)).status == 201
    assert (await api.join(gated_did, carol["did"], membershipUri=uri.replace(bob["did"], carol["did"]))).status == 202
    calls: list[str] = []

    async def dead_pds(app_: Any, principal: Any) -> Any:
        calls.append(principal.did)
        raise ApiError(502, "pds_error", "The user's PDS is down.")

    monkeypatch.setattr(userrepo, "user_repo", dead_pds)
    bob_session = await login_as(app, bob["did"], bob["handle"])
    resp = await client.post(f"/communities/{open_did}/leave", session=bob_session)
    assert resp.status == 200, resp.text
    assert await api.check(open_did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert bob["did"] not in await proofs_on_pds(app, open_did)
    assert [e.data for e in recorder.of("member.left", open_did)] == [{"memberDid": bob["did"]}]
    carol_session = await login_as(app, carol["did"], carol["handle"])
    resp = await client.post(f"/communities/{gated_did}/leave", session=carol_session)
    assert resp.status == 200 and resp.json()["status"] == "withdrawn", resp.text
    assert await api.check(gated_did, carol["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert calls == [bob["did"], carol["did"]]  # the user's record deletion was attempted


async def test_delete_removes_credentials_and_never_502s_once_gone(app, client, people, monkeypatch):
    import daemon.atproto.accounts as accounts
    from daemon.atproto.accounts import account_row

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Short-lived"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert await account_row(app.db, did) is not None
    # only the primary admin
    resp = await api.delete(api.path(did), {"adminDid": bob["did"]})
    assert resp.status == 403 and resp.json()["error"] == "not_primary_admin"

    async def broken_forget(app_: Any, did_: str) -> None:
        raise RuntimeError("session cache exploded")

    monkeypatch.setattr(accounts, "forget_account", broken_forget)
    resp = await api.delete(api.path(did), {"adminDid": alice["did"]})
    assert resp.status == 200, resp.text
    answer = resp.json()
    assert (answer["status"], answer["did"]) == ("deleted", did)
    # The answer says what became of the account: left as is, not deactivated, and who controls it.
    account = answer["account"]
    assert (account["kind"], account["status"], account["deactivated"], account["recordsDeleted"]) == \
        ("provisioned", "left_as_is", False, True)
    assert "recovery key" in account["detail"] and "not deactivated" in account["detail"]
    assert await account_row(app.db, did) is None
    assert (await api.get(api.path(did))).status == 404
    # a retry says the community is gone, not a PDS error
    assert (await api.delete(api.path(did), {"adminDid": alice["did"]})).status == 404
