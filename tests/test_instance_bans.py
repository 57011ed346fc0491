"""Instance-wide bans and suspensions on the devnet (issue 38, items 3, 4 and 7): an
operator works the console (their session proves who acts); the refusals reach the API,
the site's pages and the network sync through the platform's `cr_check_action`."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

import pytest

from commonroom_testing.app import deep_merge
from commonroom_testing.http import login_as
from commonroom_testing.webhooks import LOOPBACK_TARGETS, subscribe
from plugins.instance import audit
from tests.fixtures_communities import Api
from tests.helpers import eventually
from tests.test_sync_network import live, pds_call

pytestmark = pytest.mark.pds

OPERATOR = "did:plc:operatorbans"


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], devnet: Any) -> dict[str, Any]:
    return deep_merge(communities_config, {
        **LOOPBACK_TARGETS, "instance": {"operators": [OPERATOR], "appeal_contact": "appeals@instance.test"},
        "sync": {"source": "firehose", "url": devnet.pds_url}})


@pytest.fixture
def extra_plugins(recorder: Any) -> tuple:
    return (recorder,)


def form(session: Any, fields: dict[str, str]) -> dict[str, Any]:
    return {"body": urlencode({**fields, "_csrf": session.csrf}), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


async def console(client: Any, session: Any, path: str, fields: dict[str, str]) -> Any:
    resp = await client.post(path, **form(session, fields))
    assert resp.status == 303, resp.text
    return resp


def refused(resp: Any, code: str) -> None:
    assert resp.status == 403, resp.text
    assert resp.json()["error"] == code, resp.text


async def test_an_instance_ban_ends_memberships_and_refuses_everything_until_lifted(
        app, client, devnet, people, webhook_receiver):
    api = await Api.make(app, client)
    alice, bob, mallory, carol = people("alice"), people("bob"), people("mallory"), people("carol")
    one = (await api.create(alice, "Knitting circle"))["did"]
    two = (await api.create(bob, "Chess club"))["did"]
    open_door = (await api.create(alice, "Open door"))["did"]
    approving = (await api.create(bob, "Quiet room", type="admin-approved"))["did"]
    for did in (one, two):
        assert (await api.join(did, mallory["did"])).status == 201
    waiting = (await api.create(bob, "Waiting room", type="admin-approved"))["did"]
    assert (await api.join(waiting, mallory["did"])).status == 202
    rec = webhook_receiver()
    await subscribe(client, api.key, rec, ["member.removed", "member.rejected"])

    operator = await login_as(app, OPERATOR, "op.test")
    signed_in = [await login_as(app, mallory["did"], mallory["handle"]) for _ in range(2)]  # two browsers
    carols = await login_as(app, carol["did"], carol["handle"])
    for session in signed_in:
        assert (await client.get("/api/v1/apps", session=session)).status == 200
    await console(client, operator, "/admin/people/ban", {
        "subject": mallory["did"], "reason": "spam in every community", "expires": "", "endMemberships": "yes"})
    # signed out everywhere at once; nobody else is
    for session in signed_in:
        gone = await client.get("/api/v1/apps", session=session)
        assert gone.status == 401 and gone.json()["error"] == "session_invalid"
    assert (await client.get("/api/v1/apps", session=carols)).status == 200

    assert "1 instance ban in force" in (await client.get("/admin", session=operator)).text
    # removed from both, each removal a signed member.removed delivery; their waiting
    # request declined, a signed member.rejected delivery
    for did in (one, two, waiting):
        status = await api.check(did, mallory["did"])
        assert not status["isMember"] and not status["isPending"]
    got = await rec.wait_for(3)
    assert all(r.verified is not None for r in got)
    delivered = sorted((r.verified["type"], r.verified["data"]["communityDid"], r.verified["data"]["memberDid"])
                       for r in got)
    assert delivered == sorted([("member.removed", one, mallory["did"]), ("member.removed", two, mallory["did"]),
                                ("member.rejected", waiting, mallory["did"])])
    assert all(r.verified["data"]["byInstance"] is True
               and r.verified["data"].get("removedBy", r.verified["data"].get("rejectedBy")) == OPERATOR
               and "spam in every community" in r.verified["data"]["reason"] for r in got)
    # the waiting room's admin finds nothing left to decide
    assert (await api.decide(waiting, "approve", bob["did"], mallory["did"])).status == 404

    # refused everywhere: join, request, creation, report, records; an app's join too
    refused(await api.join(open_door, mallory["did"]), "banned_on_instance")
    refused(await api.join(approving, mallory["did"]), "banned_on_instance")
    refused(await api.post("/api/v1/communities", {"creatorDid": mallory["did"], "displayName": "Spam",
                                                   "type": "open"}), "banned_on_instance")
    service = (await client.get("/api/v1/method-ids")).json()["serviceDid"]
    token = devnet.xrpc("com.atproto.server.getServiceAuth", token=mallory["accessJwt"],
                        params={"aud": service, "lxm": "community.commonroom.reports.create"})["token"]
    refused(await client.post(api.path(one, "/reports"), api_key=api.key, headers={"Authorization": f"Bearer {token}"},
                              json={"reporterDid": mallory["did"], "reason": "spam", "subject": alice["did"]}),
            "banned_on_instance")
    message = (await api.join(open_door, mallory["did"])).json()["message"]
    assert "banned on this instance" in message and "appeals@instance.test" in message
    # the site's own join form, for a session of theirs made behind the login's back
    theirs = await login_as(app, mallory["did"], mallory["handle"])
    page = await client.post(f"/c/{open_door}/join", **form(theirs, {}))
    assert page.status == 403 and "banned on this instance" in page.text

    # the membership record they write to their own PDS is ignored by the sync: carol's,
    # written after it, is applied, and theirs is not
    await live(app, people)
    collection = f"{app.config.atproto.namespace}.membership"
    for person in (mallory, carol):
        await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.createRecord", {
            "repo": person["did"], "collection": collection, "validate": False,
            "record": {"$type": collection, "community": open_door, "joinedAt": "2026-11-29T00:00:00.000Z"}},
            token=person["accessJwt"])

    async def carol_joined() -> bool:
        return (await api.check(open_door, carol["did"]))["isMember"]
    await eventually(carol_joined, "carol's membership record applied")
    assert not (await api.check(open_door, mallory["did"]))["isMember"]

    # lifting the ban lets them ask again
    await console(client, operator, "/admin/people/unban", {"subject": mallory["did"]})
    answer = await api.join(approving, mallory["did"])
    assert answer.status == 202 and answer.json()["status"] == "pending"

    sentences = [e["sentence"] for e in await audit.entries(app.db)]
    assert sentences == [f"{OPERATOR} lifted the instance ban of {mallory['did']}.",
                         f"{OPERATOR} banned on the instance {mallory['did']} (reason: spam in every community)."]


async def test_a_ban_that_ends_nothing_keeps_memberships_and_requests_but_no_approval(app, client, devnet, people):
    api = await Api.make(app, client)
    alice, erin, frank = people("alice"), people("erin"), people("frank")
    club = (await api.create(alice, "Book club"))["did"]
    waiting = (await api.create(alice, "Reading room", type="admin-approved"))["did"]
    den = (await api.create(erin, "Erin's den", type="admin-approved"))["did"]
    assert (await api.join(club, erin["did"])).status == 201
    assert (await api.join(waiting, erin["did"])).status == 202
    assert (await api.join(den, frank["did"])).status == 202
    operator = await login_as(app, OPERATOR, "op.test")
    await console(client, operator, "/admin/people/ban", {"subject": erin["did"], "reason": "cooling off",
                                                           "expires": "7d"})
    assert (await api.check(club, erin["did"]))["isMember"]
    assert (await api.check(waiting, erin["did"]))["isPending"]
    refused(await api.decide(waiting, "approve", alice["did"], erin["did"]), "banned_on_instance")
    assert (await api.check(waiting, erin["did"]))["isPending"]
    # nor may they moderate their own community: approve, decline, remove, ban
    for decision in ("approve", "reject"):
        refused(await api.decide(den, decision, erin["did"], frank["did"]), "banned_on_instance")
    refused(await api.delete(api.path(den, f"/members/{alice['did']}"), {"adminDid": erin["did"]}),
            "banned_on_instance")
    refused(await api.post(api.path(den, "/bans"), {"adminDid": erin["did"], "memberDid": frank["did"]}),
            "banned_on_instance")
    assert (await api.check(den, frank["did"]))["isPending"]
    await console(client, operator, "/admin/people/unban", {"subject": erin["did"]})
    assert (await api.decide(waiting, "approve", alice["did"], erin["did"])).status == 200
    assert (await api.check(waiting, erin["did"]))["isMember"]
    assert (await api.decide(den, "approve", erin["did"], frank["did"])).status == 200
    removed = await api.delete(api.path(den, f"/members/{frank['did']}"), {"adminDid": erin["did"]})
    assert removed.status == 200, removed.text


async def test_a_handle_domain_ban_refuses_everyone_under_it(app, client, devnet, people):
    api = await Api.make(app, client)
    alice, dan = people("alice"), people("dan")
    did = (await api.create(alice, "Garden"))["did"]
    operator = await login_as(app, OPERATOR, "op.test")
    domain = "*." + dan["handle"].split(".", 1)[1]
    # everyone on the devnet shares the domain: the operator (alice too) is only refused
    # as a person acting, so ban and check dan alone, then lift it
    await console(client, operator, "/admin/people/ban", {"subject": domain, "reason": "a spam host",
                                                           "expires": "30d"})
    refused(await api.join(did, dan["did"]), "banned_on_instance")
    assert "under " + domain[2:] in (await api.join(did, dan["did"])).json()["message"]
    await console(client, operator, "/admin/people/unban", {"subject": domain})
    assert (await api.join(did, dan["did"])).status == 201


async def test_a_suspended_community_is_hidden_read_only_and_told_then_lifting_restores_it(
        app, client, devnet, people):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    created = await api.create(alice, "Pill emporium")
    did, handle = created["did"], created["handle"]
    assert (await api.join(did, bob["did"])).status == 201

    async def discoverable() -> tuple[bool, bool, bool]:
        listed = (await api.get("/api/v1/communities", query="emporium")).json()["communities"]
        everything = (await api.get("/api/v1/communities")).json()["communities"]
        page = (await client.get("/discover?q=emporium")).text
        return (any(c["did"] == did for c in listed), any(c["did"] == did for c in everything),
                "Pill emporium" in page)

    assert await discoverable() == (True, True, True)
    operator = await login_as(app, OPERATOR, "op.test")
    await console(client, operator, "/admin/communities/suspend", {"community": did,
                                                                   "reason": "Selling counterfeit medicine"})
    assert await discoverable() == (False, False, False)
    assert "1 suspended community" in (await client.get("/admin", session=operator)).text

    refused(await api.join(did, carol["did"]), "community_suspended")
    assert "Selling counterfeit medicine" in (await api.join(did, carol["did"])).json()["message"]
    refused(await api.post(api.path(did, "/records"), {
        "userDid": bob["did"], "collection": "org.example.garden.note",
        "record": {"$type": "org.example.garden.note", "text": "buy", "createdAt": "2026-11-29T00:00:00.000Z"}}),
        "community_suspended")
    refused(await client.put(api.path(did, "/settings"), json={"adminDid": alice["did"], "requireUserProof": True},
                             api_key=api.key), "community_suspended")

    # the notice: the public reason to a visitor; to an admin also how to appeal
    visitor = (await client.get(f"/c/{handle}")).text
    assert "Selling counterfeit medicine" in visitor and "appeals@instance.test" not in visitor
    carols = await login_as(app, carol["did"], carol["handle"])
    page = (await client.get(f"/c/{handle}", headers={"Cookie": f"sid={carols.sid}"})).text
    assert "not taking new members now" in page and ">Join</button>" not in page
    admin = await login_as(app, alice["did"], alice["handle"])
    theirs = (await client.get(f"/c/{handle}", headers={"Cookie": f"sid={admin.sid}"})).text
    assert "Selling counterfeit medicine" in theirs and "appeals@instance.test" in theirs
    settings = (await client.get(f"/c/{handle}/settings", headers={"Cookie": f"sid={admin.sid}"})).text
    assert "appeals@instance.test" in settings
    # members may still leave
    assert (await api.leave(did, bob["did"])).status == 200

    await console(client, operator, "/admin/communities/lift", {"community": did})
    assert await discoverable() == (True, True, True)
    page = (await client.get(f"/c/{handle}", headers={"Cookie": f"sid={carols.sid}"})).text
    assert "not taking new members now" not in page and ">Join</button>" in page
    assert (await api.join(did, carol["did"])).status == 201
    assert "Selling counterfeit medicine" not in (await client.get(f"/c/{handle}")).text


async def test_console_forms_refuse_a_wrong_or_missing_token_and_hide_from_others(app, client, devnet, people):
    api = await Api.make(app, client)
    did = (await api.create(people("alice"), "Token club"))["did"]
    operator = await login_as(app, OPERATOR, "op.test")
    someone = await login_as(app, "did:plc:notanoperatorbans", "someone.test")
    forms = [("/admin/communities/suspend", {"community": did, "reason": "x"}),
             ("/admin/communities/lift", {"community": did}),
             ("/admin/communities/remove", {"community": did, "reason": "x", "confirm": "yes"}),
             ("/admin/people/ban", {"subject": "did:plc:someoneelse", "reason": "x"}),
             ("/admin/people/unban", {"subject": "did:plc:someoneelse"})]
    for path, fields in forms:
        cookie = {"Cookie": f"sid={operator.sid}; csrf-token={operator.csrf}",
                  "Content-Type": "application/x-www-form-urlencoded"}
        missing = await client.post(path, body=urlencode(fields), headers=cookie)
        wrong = await client.post(path, body=urlencode({**fields, "_csrf": "not-the-token"}), headers=cookie)
        assert missing.status == 403 and wrong.status == 403, (path, missing.status, wrong.status)
        other = await client.post(path, **form(someone, fields))
        assert other.status == 404, (path, other.status)
    for path in ("/admin", "/admin/communities", "/admin/people", "/admin/people?q=did:plc:x", "/admin/audit",
                 "/admin/anything"):
        assert (await client.get(path, headers={"Cookie": f"sid={someone.sid}"})).status == 404, path
        assert (await client.get(path)).status == 404, path
    # bad input: the page again, saying what is wrong (nothing done)
    for path, fields, words in [
            ("/admin/communities/suspend", {"community": did, "reason": " "}, "reason: say why"),
            ("/admin/communities/suspend", {"community": "not-a-did", "reason": "x"}, "a community"),
            ("/admin/people/ban", {"subject": "spam.example", "reason": "x"}, "*.domain"),
            ("/admin/people/ban", {"subject": "did:plc:x", "reason": "x", "expires": "date", "until": "2001-01-01"},
             "must be in the future"),
            ("/admin/people/ban", {"subject": "did:plc:x", "reason": "x" * 501}, "at most 500"),
            ("/admin/people/unban", {"subject": "did:plc:nobodybanned"}, "is not banned")]:
        answer = await client.post(path, **form(operator, fields))
        assert answer.status in (400, 404) and words in answer.text, (path, answer.status, answer.text[-600:])
        assert "There is a problem" in answer.text
    assert await audit.entries(app.db) == []   # nothing was done
    assert (await api.get(api.path(did))).status == 200


async def test_removing_from_the_index_forgets_the_community_but_not_its_account(app, client, devnet, people):
    api = await Api.make(app, client)
    did = (await api.create(people("alice"), "Forgotten club"))["did"]
    operator = await login_as(app, OPERATOR, "op.test")
    unconfirmed = await client.post("/admin/communities/remove", **form(operator, {"community": did,
                                                                                   "reason": "abandoned"}))
    assert unconfirmed.status == 400 and "confirm" in unconfirmed.text
    await console(client, operator, "/admin/communities/remove", {"community": did, "reason": "abandoned",
                                                                  "confirm": "yes"})
    assert (await api.get(api.path(did))).status == 404
    resolved = await asyncio.to_thread(pds_call, devnet, f"com.atproto.repo.describeRepo?repo={did}")
    assert resolved["did"] == did   # the account is still on its PDS
    assert (await audit.entries(app.db))[0]["action"] == "community.remove"


async def test_an_account_the_network_deactivated_cannot_act_until_it_is_active_again(app, client, devnet, people):
    from daemon.plugin.atproto import account_status
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Takedown club"))["did"]
    other = (await api.create(alice, "Second club", type="admin-approved"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    await live(app, people)
    await asyncio.to_thread(pds_call, devnet, "com.atproto.server.deactivateAccount", {}, token=bob["accessJwt"])

    async def recorded() -> bool:
        return await account_status(app.db, bob["did"]) == "deactivated"
    await eventually(recorded, "the sync records the deactivation")
    answer = await api.join(other, bob["did"])
    refused(answer, "account_not_active")
    assert "deactivated" in answer.json()["message"]
    refused(await api.post(api.path(did, "/records"), {
        "userDid": bob["did"], "collection": "org.example.garden.note",
        "record": {"$type": "org.example.garden.note", "text": "hi", "createdAt": "2026-11-29T00:00:00.000Z"}}),
        "account_not_active")
    # the member list leaves them out (and keeps them a member); the console says why
    listed = (await api.get(api.path(did, "/members"))).json()["members"]
    assert bob["did"] not in {m["did"] for m in listed} and (await api.check(did, bob["did"]))["isMember"]
    operator = await login_as(app, OPERATOR, "op.test")
    page = await client.get(f"/admin/people?q={bob['did']}", session=operator)
    assert "The network marks the account deactivated" in page.text and "Takedown club" in page.text
    by_handle = await client.get(f"/admin/people?q=@{bob['handle'].upper()}", session=operator)
    assert bob["did"] in by_handle.text and "Takedown club" in by_handle.text
    unseen = await client.get("/admin/people?q=nobody.example", session=operator)
    assert "Nobody this instance has seen" in unseen.text

    session = await asyncio.to_thread(devnet.create_session, bob["did"], bob["password"])
    await asyncio.to_thread(pds_call, devnet, "com.atproto.server.activateAccount", data=b"",
                            token=session["accessJwt"])

    async def active() -> bool:
        return await account_status(app.db, bob["did"]) is None
    await eventually(active, "the sync records the reactivation")
    assert (await api.join(other, bob["did"])).status == 202
