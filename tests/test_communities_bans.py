"""Bans against the devnet (issue 14, part 2): a ban ends the membership (the proof is
deleted from the community's repo) or the request, blocks joining, asking and invites
with 403 `banned` until it expires (fake clock) or is lifted, respects the admins'
order, and reaches webhooks as `member.banned`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from daemon.base import FakeClock, iso
from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record, proofs_on_pds

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


async def ban(api: Api, community: str, admin: str, member: str, **fields: Any) -> Any:
    return await api.post(api.path(community, "/bans"), {"adminDid": admin, "memberDid": member, **fields})


def refused_as_banned(resp: Any, expires_at: str | None = None) -> None:
    assert resp.status == 403, resp.text
    assert resp.json()["error"] == "banned" and resp.json()["expiresAt"] == expires_at


async def test_a_banned_member_is_removed_and_cannot_rejoin_ask_or_use_an_invite(app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Tidy forum"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert bob["did"] in await proofs_on_pds(app, did)

    resp = await ban(api, did, alice["did"], bob["did"], reason="spam")
    assert resp.status == 201, resp.text
    assert resp.json()["wasMember"] is True and resp.json()["expiresAt"] is None
    assert await api.check(did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert bob["did"] not in await proofs_on_pds(app, did)
    assert (await api.get(api.path(did), userDid=alice["did"])).json()["community"]["memberCount"] == 1
    [event] = recorder.of("member.banned", did)
    assert event.data == {"memberDid": bob["did"], "bannedBy": alice["did"], "reason": "spam", "expiresAt": None,
                          "wasMember": True, "wasPending": False}

    refused_as_banned(await api.join(did, bob["did"]))
    code = (await api.post(api.path(did, "/invites"), {"adminDid": alice["did"]})).json()["code"]
    refused_as_banned(await api.join(did, bob["did"], inviteCode=code))
    listed = (await api.get(api.path(did, "/invites"), adminDid=alice["did"])).json()["invites"]
    assert listed[0]["uses"] == 0  # a refused join does not use the invite
    entries = await api.audit(did, alice["did"], action="member.banned")
    assert [(e["targetDid"], e["reason"], e["metadata"]["wasMember"]) for e in entries] == [(bob["did"], "spam", True)]


async def test_a_ban_drops_a_pending_request_and_blocks_asking_again(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Careful club", type="admin-approved"))["did"]
    assert (await api.join(did, bob["did"])).status == 202
    resp = await ban(api, did, alice["did"], bob["did"])
    assert resp.status == 201, resp.text
    assert resp.json()["wasPending"] is True and resp.json()["wasMember"] is False
    pending = (await api.get(api.path(did, "/members/pending"), adminDid=alice["did"])).json()
    assert pending["pendingMembers"] == []
    refused_as_banned(await api.join(did, bob["did"]))
    assert (await api.check(did, bob["did"]))["isPending"] is False


async def test_a_ban_ends_at_its_expiry(app, client, people, clock):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Cooling off"))["did"]
    until = iso(clock.time() + 86400)
    resp = await ban(api, did, alice["did"], bob["did"], expiresAt=until)  # a ban in advance
    assert resp.status == 201, resp.text
    assert resp.json()["wasMember"] is False and resp.json()["expiresAt"] == until
    refused_as_banned(await api.join(did, bob["did"]), until)
    listed = (await api.get(api.path(did, "/bans"), adminDid=alice["did"])).json()["bans"]
    assert [(b["memberDid"], b["expiresAt"]) for b in listed] == [(bob["did"], until)]
    clock.advance(86401)
    assert (await api.get(api.path(did, "/bans"), adminDid=alice["did"])).json()["bans"] == []
    joined = await api.join(did, bob["did"])
    assert joined.status == 201, joined.text


async def test_unban_lets_them_back_and_is_evented(app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Second chances"))["did"]
    assert (await ban(api, did, alice["did"], bob["did"])).status == 201
    again = await ban(api, did, alice["did"], bob["did"])
    assert again.status == 409 and again.json()["error"] == "already_banned"
    lifted = await api.delete(api.path(did, f"/bans/{bob['did']}"), {"adminDid": alice["did"]})
    assert lifted.status == 200, lifted.text
    assert [e.data["memberDid"] for e in recorder.of("member.unbanned", did)] == [bob["did"]]
    gone = await api.delete(api.path(did, f"/bans/{bob['did']}"), {"adminDid": alice["did"]})
    assert gone.status == 404 and gone.json()["error"] == "not_banned"
    assert (await api.join(did, bob["did"])).status == 201
    assert "member.unbanned" in [e["action"] for e in await api.audit(did, alice["did"])]


async def test_admins_are_banned_only_by_the_primary_admin_who_cannot_be_banned(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol, dave = people("alice"), people("bob"), people("carol"), people("dave")
    did = (await api.create(alice, "Ranked club"))["did"]
    for person in (bob, carol, dave):
        assert (await api.join(did, person["did"])).status == 201
    for person in (bob, carol):
        assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": person["did"]})).status == 200

    primary = await ban(api, did, bob["did"], alice["did"])
    assert primary.status == 409 and primary.json()["error"] == "cannot_ban_primary_admin"
    by_admin = await ban(api, did, bob["did"], carol["did"])
    assert by_admin.status == 403 and by_admin.json()["error"] == "not_primary_admin"
    by_member = await ban(api, did, dave["did"], bob["did"])
    assert by_member.status == 403 and by_member.json()["error"] == "not_admin"
    assert (await api.check(did, carol["did"]))["isAdmin"] is True

    by_primary = await ban(api, did, alice["did"], carol["did"])
    assert by_primary.status == 201, by_primary.text
    assert [a["did"] for a in (await pds_record(app, did, "admins"))["admins"]] == [alice["did"], bob["did"]]
    assert carol["did"] not in await proofs_on_pds(app, did)
    # an admin bans a plain member
    assert (await ban(api, did, bob["did"], dave["did"])).status == 201


async def test_ban_lists_are_for_admins_and_bodies_are_checked(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Private lists"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert (await ban(api, did, alice["did"], carol["did"], reason="trolling")).status == 201
    hidden = await api.get(api.path(did, "/bans"), adminDid=bob["did"])
    assert hidden.status == 403 and hidden.json()["error"] == "not_admin"
    assert (await api.delete(api.path(did, f"/bans/{carol['did']}"), {"adminDid": bob["did"]})).status == 403
    for bad in ({"reason": "x" * 1001}, {"expiresAt": "2020-01-01T00:00:00Z"}, {"expiresAt": 5},
                {"memberDid": "bob"}):
        resp = await api.post(api.path(did, "/bans"), {"adminDid": alice["did"], "memberDid": bob["did"], **bad})
        assert resp.status == 400, (bad, resp.text)
    assert (await api.check(did, bob["did"]))["isMember"] is True
    other = await Api.make(app, client, owner="did:plc:otherowner")
    untrusted = await ban(other, did, alice["did"], bob["did"])
    assert untrusted.status == 403 and untrusted.json()["error"] == "app_not_trusted"
    first = (await api.get(api.path(did, "/bans"), adminDid=alice["did"], limit=1)).json()
    assert [b["reason"] for b in first["bans"]] == ["trolling"] and "cursor" not in first


class TestBanWebhooks:
    @pytest.fixture
    def config_overrides(self, communities_config):
        from tests.conftest import deep_merge
        from tests.fixtures_webhooks import LOOPBACK_TARGETS
        return deep_merge(communities_config, LOOPBACK_TARGETS)

    @pytest.fixture
    def clock(self):
        return FakeClock(start=time.time())  # webhook signatures carry the real time

    async def test_member_banned_reaches_a_subscribed_webhook_with_a_valid_signature(
            self, app, client, people, receiver):
        from tests.fixtures_webhooks import settle
        api = await Api.make(app, client)
        alice, bob = people("alice"), people("bob")
        did = (await api.create(alice, "Hooked club"))["did"]
        assert (await api.join(did, bob["did"])).status == 201
        rec = receiver()
        hook = await client.post("/api/v1/webhooks", api_key=api.key, json={
            "url": rec.url, "events": ["member.banned", "member.unbanned"], "communityDid": did})
        assert hook.status == 201, hook.text
        rec.secrets = [hook.json()["secret"]]
        assert (await ban(api, did, alice["did"], bob["did"], reason="spam")).status == 201
        assert (await api.delete(api.path(did, f"/bans/{bob['did']}"), {"adminDid": alice["did"]})).status == 200
        await settle(app)
        assert [r.verify_error for r in rec.requests] == [None, None]
        assert [r.verified["type"] for r in rec.requests] == ["member.banned", "member.unbanned"]
        assert rec.requests[0].verified["data"] == {
            "memberDid": bob["did"], "bannedBy": alice["did"], "reason": "spam", "expiresAt": None,
            "wasMember": True, "wasPending": False, "communityDid": did}


class TestBanConsistency:
    @pytest.fixture
    def extra_plugins(self, recorder, failer):
        return (recorder, failer)

    async def test_a_ban_whose_local_commit_fails_is_undone_by_the_reconciler_or_a_retry(
            self, app, client, people, failer, clock):
        """The real PDS cannot fail between its write and the index commit, so the local
        transaction is made to fail (FailIndexOnce): the proof is already deleted."""
        from plugins.communities.reconcile import reconcile

        api = await Api.make(app, client)
        alice, bob, carol = people("alice"), people("bob"), people("carol")
        did = (await api.create(alice, "Crashy bans"))["did"]
        for person in (bob, carol):
            assert (await api.join(did, person["did"])).status == 201
        failer.armed = "member.banned"
        assert (await ban(api, did, alice["did"], bob["did"])).status == 500
        assert bob["did"] not in await proofs_on_pds(app, did)  # the PDS side happened
        assert (await api.check(did, bob["did"]))["isMember"] is True  # the index did not
        assert (await api.get(api.path(did, "/bans"), adminDid=alice["did"])).json()["bans"] == []

        clock.advance(301)  # communities.reconcile_after_seconds
        assert (await reconcile(app))["reconciled"] == 1
        assert bob["did"] in await proofs_on_pds(app, did)  # put back from the index: still a member

        failer.armed = "member.banned"
        assert (await ban(api, did, alice["did"], carol["did"])).status == 500
        retried = await ban(api, did, alice["did"], carol["did"])  # the same request again finishes it
        assert retried.status == 201, retried.text
        assert carol["did"] not in await proofs_on_pds(app, did)
        assert (await api.check(did, carol["did"]))["isMember"] is False
        refused_as_banned(await api.join(did, carol["did"]))
