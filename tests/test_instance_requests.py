"""Who may create (issue 38, item 2), on the devnet: under `instance.creation: approval` a
creation, from the API or the site's form, becomes a creation request; an operator approves
it in the console and the community is created for the person (primary admin, on their home
page), or declines it with a reason the person reads; the audit log says who decided; the
command line does the same. `instance.max_communities_per_person` counts the communities a
person is primary admin of; the allowlist's refusal has a page that says why."""

from __future__ import annotations

import json
from html import unescape
from argparse import Namespace
from typing import Any
from urllib.parse import urlencode

import pytest

from commonroom_testing.app import deep_merge
from commonroom_testing.communities import Api
from commonroom_testing.http import login_as
from plugins.instance import audit

pytestmark = pytest.mark.pds
OPERATOR = "did:plc:operatorone"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def policy() -> dict[str, Any]:
    return {"creation": "approval"}


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(communities_config, {"instance": {"operators": [OPERATOR], **policy}})


def form(session: Any, **fields: str) -> dict[str, Any]:
    return {"body": urlencode({"_csrf": session.csrf, **fields}),
            "headers": {"Content-Type": FORM, "Cookie": f"sid={session.sid}; csrf-token={session.csrf}"}}


async def test_an_approved_request_is_created_for_the_person_and_audited(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    ann = people("ann")
    asked = await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Bakers of Leeds",
                                                   "description": "Bread, mostly.", "type": "admin-approved"})
    assert asked.status == 202, asked.text
    request = asked.json()["request"]
    assert request["state"] == "pending" and "'approval'" in request["message"]
    assert await app.db.fetchval("SELECT COUNT(*) FROM communities") == 0   # nothing made yet

    person = await login_as(app, ann["did"], ann["handle"])
    home = await client.get("/", session=person)
    assert "“Bakers of Leeds” is waiting for the instance's operators to approve it" in unescape(home.text)

    operator = await login_as(app, OPERATOR, "op.test")
    console = await client.get("/admin/requests", session=operator)
    assert console.status == 200 and "Bakers of Leeds" in unescape(console.text) and ann["did"] in unescape(console.text)
    overview = await client.get("/admin", session=operator)
    assert "Creation requests waiting" in unescape(overview.text)

    approved = await client.post(f"/admin/requests/{request['id']}/approve", **form(operator))
    assert approved.status == 303, approved.text
    assert approved.headers["Location"] == "/admin/requests?done=approved"

    row = await app.db.fetchone("SELECT * FROM communities WHERE display_name = 'Bakers of Leeds'")
    assert row is not None and row["state"] == "active" and row["type"] == "admin-approved"
    assert row["description"] == "Bread, mostly."
    status = await app.communities.membership(row["did"], ann["did"])
    assert status.is_primary and status.is_admin
    # the app the person asked through manages it, as it would without approval
    assert await app.communities.acts_for_admins(row["did"], api.app_id)
    details = await api.get(f"/api/v1/communities/{row['did']}")
    assert details.status == 200 and details.json()["community"]["displayName"] == "Bakers of Leeds"
    home = await client.get("/", session=person)
    assert "Bakers of Leeds" in unescape(home.text) and "waiting for the instance's operators" not in unescape(home.text)
    [entry] = await audit.entries(app.db)
    assert entry["sentence"] == f"{OPERATOR} approved the creation request of {ann['did']}."
    assert entry["detail"]["request"] == request["id"]

    again = await client.post(f"/admin/requests/{request['id']}/approve", **form(operator))
    assert again.status == 409 and "already created" in unescape(again.text)


async def test_a_request_from_the_form_is_declined_with_a_reason_the_person_reads(app, client, devnet,
                                                                                   people) -> None:
    bob = people("bob")
    person = await login_as(app, bob["did"], bob["handle"])
    page = await client.get("/new", session=person)
    assert page.status == 200   # under approval the form is there, and says what happens to it
    assert "operators approve each new community" in unescape(page.text)
    sent = await client.post("/new", **form(person, displayName="Spam palace", description="", type="open",
                                            account="new"))
    assert sent.status == 303 and sent.headers["Location"] == "/?done=creation_requested"
    home = await client.get("/?done=creation_requested", session=person)
    assert "waiting for the instance's operators to approve it" in unescape(home.text)
    request_id = await app.db.fetchval("SELECT id FROM creation_requests WHERE requester_did = ?", (bob["did"],))

    operator = await login_as(app, OPERATOR, "op.test")
    empty = await client.post(f"/admin/requests/{request_id}/decline", **form(operator, reason=" "))
    assert empty.status == 400 and "say why" in unescape(empty.text)
    declined = await client.post(f"/admin/requests/{request_id}/decline",
                                 **form(operator, reason="This looks like advertising."))
    assert declined.status == 303
    home = await client.get("/", session=person)
    assert "Your request to create “Spam palace” was declined: This looks like advertising." in unescape(home.text)
    assert OPERATOR not in unescape(home.text) and "op.test" not in unescape(home.text)
    assert await app.db.fetchval("SELECT COUNT(*) FROM communities") == 0
    [entry] = await audit.entries(app.db)
    assert entry["action"] == "creation.refuse" and entry["operator"] == OPERATOR


async def test_an_existing_account_cannot_be_brought_in_a_request(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    ann = people("ann")
    resp = await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Mine",
                                                  "identifier": "someone.test", "appPassword": "xxxx-xxxx"})
    assert resp.status == 403 and resp.json()["error"] == "creation_not_allowed"
    assert await app.db.fetchval("SELECT COUNT(*) FROM creation_requests") == 0


async def test_the_command_line_lists_approves_and_declines(app, client, devnet, people, capsys) -> None:
    from plugins.instance.operator import _instance
    api = await Api.make(app, client)
    ann, bob = people("ann"), people("bob")
    first = (await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Chess"})).json()
    second = (await api.post("/api/v1/communities", {"creatorDid": bob["did"], "displayName": "Go"})).json()
    capsys.readouterr()
    assert await _instance(app, Namespace(action="requests", all=False, limit=100, json=True)) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["displayName"] for r in listed] == ["Chess", "Go"] and listed[0]["requesterDid"] == ann["did"]

    refused = await _instance(app, Namespace(action="approve", id=int(first["request"]["id"]),
                                             operator="did:plc:notanoperator", json=True))
    assert refused == 2 and "is not one of instance.operators" in capsys.readouterr().err
    assert await _instance(app, Namespace(action="approve", id=int(first["request"]["id"]), operator=OPERATOR,
                                          json=True)) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["state"] == "created" and done["communityDid"].startswith("did:")
    assert await _instance(app, Namespace(action="decline", id=int(second["request"]["id"]), operator=OPERATOR,
                                          reason="Not here.", json=True)) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "declined"
    sentences = [e["sentence"] for e in await audit.entries(app.db)]
    assert sentences == [f"{OPERATOR} refused the creation request of {bob['did']} (reason: Not here.), from the "
                         "command line.",
                         f"{OPERATOR} approved the creation request of {ann['did']}, from the command line."]


@pytest.mark.parametrize("policy", [{"creation": "anyone", "max_communities_per_person": 1}])
async def test_the_limit_counts_communities_the_person_is_primary_admin_of(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    ann = people("ann")
    await api.create(ann, "First")
    second = await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Second"})
    assert second.status == 403, second.text
    body = second.json()
    assert body["error"] == "creation_not_allowed" and body["details"] == [{"policy": "anyone", "limit": 1}]
    assert "at most 1 community per person" in body["message"] and "primary admin of 1" in body["message"]
    page = await client.get("/new", session=await login_as(app, ann["did"], ann["handle"]))
    assert page.status == 403 and "at most 1 community per person" in unescape(page.text)
    # an operator is not limited; another person is not either
    await api.create(people("bob"), "Bob's")


@pytest.mark.parametrize("policy", [{"creation": "approval", "max_communities_per_person": 1}])
async def test_a_waiting_request_counts_towards_the_limit(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    ann = people("ann")
    assert (await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "One"})).status == 202
    over = await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Two"})
    assert over.status == 403 and "have 1 waiting for approval" in over.json()["message"]


@pytest.mark.parametrize("policy", [{"creation": "allowlist", "creation_allowlist": ["did:plc:someoneelse"]}])
async def test_outside_the_allowlist_the_page_says_why_before_the_form(app, client, devnet, people) -> None:
    ann = people("ann")
    page = await client.get("/new", session=await login_as(app, ann["did"], ann["handle"]))
    assert page.status == 403
    assert "creation policy is 'allowlist'" in unescape(page.text)
    assert "Ask the instance's operators" in unescape(page.text)
    assert 'name="displayName"' not in unescape(page.text)


async def test_a_creation_that_fails_on_approval_stays_approved_with_its_error(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    ann, taken = people("ann"), people("taken")
    asked = await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Taken name",
                                                   "handle": taken["handle"]})
    assert asked.status == 202, asked.text
    request_id = asked.json()["request"]["id"]
    operator = await login_as(app, OPERATOR, "op.test")
    failed = await client.post(f"/admin/requests/{request_id}/approve", **form(operator))
    assert failed.status >= 400 and "There is a problem" in unescape(failed.text)
    row = await app.db.fetchone("SELECT * FROM creation_requests WHERE id = ?", (int(request_id),))
    assert row["state"] == "approved" and row["error"] and row["community_did"] is None
    console = unescape((await client.get("/admin/requests", session=operator)).text)
    assert "the creation failed" in console and "Retry the creation" in console
    home = unescape((await client.get("/", session=await login_as(app, ann["did"], ann["handle"]))).text)
    assert "“Taken name” is approved and being created" in home
    # approving again tries again (and is audited once); the operator may still decline it
    again = await client.post(f"/admin/requests/{request_id}/approve", **form(operator))
    assert again.status >= 400
    assert [e["action"] for e in await audit.entries(app.db)] == ["creation.approve"]
    declined = await client.post(f"/admin/requests/{request_id}/decline", **form(operator, reason="Pick a handle."))
    assert declined.status == 303
