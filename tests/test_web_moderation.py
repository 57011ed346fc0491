"""The roles pages and a moderator's work through pages, against the devnet (issue 24;
no browser: the forms are posted as a browser posts them). The admin makes a custom role
with capabilities and per-collection rights (after the form's mistakes), makes a member a
moderator from the members page; the moderator approves a request, bans a member with a
reason and an expiry and reads the history; every role change is a `member.roles_changed`
event; deleting a role is confirmed on its own page. The roles record on the PDS follows."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from plugins.communities import store as members_store
from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record
from tests.helpers import login_as

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


def form(session, fields: dict[str, Any]) -> dict:
    return {"body": urlencode({**fields, "_csrf": session.csrf}, doseq=True), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


def cookie(session) -> dict:
    return {"headers": {"Cookie": f"sid={session.sid}"}}


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


async def test_roles_pages_and_a_moderators_work_through_pages(app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob, carol, dave = (people(n) for n in ("alice", "bob", "carol", "dave"))
    did = (await api.create(alice, "Garden", type="admin-approved"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 202
        assert (await api.decide(did, "approve", alice["did"], user["did"])).status == 200
    admin = await login_as(app, alice["did"], alice["handle"])
    mod = await login_as(app, bob["did"], bob["handle"])
    base = f"/c/{quote(did, safe='')}"

    # the roles page: built-in roles in words, with their holders
    page = (await client.get(f"{base}/settings/roles", **cookie(admin))).text
    assert "Approve and reject join requests" in page and "Read the community&#x27;s audit log" in page
    assert f"Held by {alice['handle']}." in page and "Held by all 3 members." in page

    # a new role: mistakes next to their fields, what was typed kept, nothing written
    resp = await client.post(f"{base}/settings/roles/new", **form(admin, {
        "name": "Bad Name", "description": "greets", "capabilities": ["audit.read"],
        "collection-0": "", "rights-0": ["create"]}))
    assert resp.status == 400
    assert 'href="#collection-0"' in resp.text and 'value="Bad Name"' in resp.text
    assert 'id="cap-audit.read" name="capabilities" value="audit.read" checked' in resp.text
    resp = await client.post(f"{base}/settings/roles/new", **form(admin, {
        "name": "Bad Name", "capabilities": ["audit.read"]}))
    assert resp.status == 400 and 'href="#name"' in resp.text and "The name must be" in resp.text
    assert await pds_record(app, did, "roles") is None
    resp = await client.post(f"{base}/settings/roles/new", **form(admin, {
        "name": "gardener", "description": "looks after the notes", "capabilities": ["audit.read"],
        "collection-0": "org.example.garden.note", "rights-0": ["create", "delete"]}))
    assert resp.status == 303, resp.text
    page = (await client.get(resp.headers["Location"], **cookie(admin))).text
    assert "The role gardener was created." in page
    assert "Create, delete records in org.example.garden.note" in page
    record = await pds_record(app, did, "roles")
    assert record["roles"][0]["name"] == "gardener"
    assert recorder.of("member.roles_changed", did)[-1].data == {
        "change": "role_created", "role": "gardener", "changedBy": alice["did"], "holders": []}
    # the same name again is refused next to the name
    resp = await client.post(f"{base}/settings/roles/new", **form(admin, {"name": "gardener"}))
    assert resp.status == 400 and 'href="#name"' in resp.text

    # the admin makes bob a moderator from his row on the members page
    page = (await client.get(f"{base}/settings/members", **cookie(admin))).text
    assert f'<label for="role-{bob["did"]}">' in page and '<option value="moderator">' in page
    resp = await client.post(f"{base}/members/{bob['did']}/roles", **form(admin, {"role": "moderator"}))
    assert resp.status == 303
    page = (await client.get(resp.headers["Location"], **cookie(admin))).text
    assert f"{bob['handle']} now holds the role moderator." in page
    assert '<span class="badge badge-role badge-custom badge-moderator">Moderator</span>' in page
    event = recorder.of("member.roles_changed", did)[-1]
    assert event.data == {"change": "assigned", "role": "moderator", "changedBy": alice["did"],
                          "memberDid": bob["did"], "roles": ["moderator"]}
    # and carol a gardener, then not
    assert (await client.post(f"{base}/members/{carol['did']}/roles", **form(admin, {"role": "gardener"}))).status == 303
    resp = await client.post(f"{base}/members/{carol['did']}/roles/gardener/remove", **form(admin, {}))
    assert resp.status == 303 and "done=role_unassigned" in resp.headers["Location"]
    assert recorder.of("member.roles_changed", did)[-1].data["change"] == "unassigned"

    # the moderator: approves a request, bans a member for 7 days, reads the history
    assert (await api.join(did, dave["did"])).status == 202
    resp = await client.post(f"{base}/requests/{dave['did']}/approve", **form(mod, {}))
    assert resp.status == 303, resp.text
    assert (await api.check(did, dave["did"]))["isMember"] is True
    page = (await client.get(resp.headers["Location"], **cookie(mod))).text
    assert f"{dave['handle']} is a member now" in page
    resp = await client.post(f"{base}/settings/bans/new", **form(mod, {
        "memberDid": dave["did"], "reason": "Posting spam", "expires": "7"}))
    assert resp.status == 303, resp.text
    assert (await api.check(did, dave["did"]))["isMember"] is False
    assert (await members_store.active_ban(app.db, did, dave["did"], app.clock.iso_now()))["reason"] == "Posting spam"
    for path in ("roles", "pictures", "delete"):
        resp = await client.get(f"{base}/settings/{path}", **cookie(mod))
        assert resp.status == 403 and "You do not have permission for this" in resp.text
    page = (await client.get(f"{base}/settings/audit", **cookie(mod))).text
    assert dave["handle"] in page and "banned" in page

    # editing a role keeps its name; deleting asks first, on its own page
    page = (await client.get(f"{base}/settings/roles/gardener/edit", **cookie(admin))).text
    assert 'value="org.example.garden.note"' in page and 'id="rights-0-delete" name="rights-0" value="delete" checked' in page
    resp = await client.post(f"{base}/settings/roles/gardener/edit", **form(admin, {
        "description": "only creates", "collection-0": "org.example.garden.note", "rights-0": ["create"]}))
    assert resp.status == 303 and "done=role_updated" in resp.headers["Location"]
    assert recorder.of("member.roles_changed", did)[-1].data["change"] == "role_updated"
    page = (await client.get(f"{base}/settings/roles/gardener/delete", **cookie(admin))).text
    assert "<h1>Delete the role gardener?</h1>" in page and "they lose it" in page
    resp = await client.post(f"{base}/settings/roles/gardener/delete", **form(admin, {}))
    assert resp.status == 303
    assert "The role gardener was deleted" in (await client.get(resp.headers["Location"], **cookie(admin))).text
    assert [r["name"] for r in (await pds_record(app, did, "roles"))["roles"]] == []
    # a moderator cannot assign roles, even from a crafted form: refused, audited
    resp = await client.post(f"{base}/members/{carol['did']}/roles", **form(mod, {"role": "moderator"}))
    assert resp.status == 403


async def test_plugin_capabilities_join_the_catalogue_the_roles_and_the_role_form(app, client, people):
    """The reports plugin's `reports.review` (declared moderator=True) is in the built-in
    roles of GET …/roles, on the role form under its plugin's name, and saving the form of
    a role that holds it (granted through the API) keeps it."""
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Orchard"))["did"]
    listed = {r["name"]: r for r in (await api.get(api.path(did, "/roles"))).json()["roles"]}
    assert "reports.review" in listed["moderator"]["capabilities"]
    assert "reports.review" in listed["admin"]["capabilities"] and "members.ban" in listed["admin"]["capabilities"]
    made = await api.post(api.path(did, "/roles"), {"adminDid": alice["did"], "name": "triager",
                                                     "capabilities": ["reports.review", "audit.read"]})
    assert made.status == 201, made.text

    admin = await login_as(app, alice["did"], alice["handle"])
    base = f"/c/{quote(did, safe='')}"
    roles_page = text_of((await client.get(f"{base}/settings/roles", **cookie(admin))).text)
    assert "Read the reports queue and resolve reports" in roles_page
    page = (await client.get(f"{base}/settings/roles/triager/edit", **cookie(admin))).text
    assert "<legend>From the plugin reports</legend>" in page
    ticked = re.findall(r'name="capabilities" value="([^"]+)" checked', page)
    assert sorted(ticked) == ["audit.read", "reports.review"]
    saved = await client.post(f"{base}/settings/roles/triager/edit", **form(admin, {
        "description": "sorts reports", "capabilities": ticked}))
    assert saved.status == 303, saved.text
    listed = {r["name"]: r for r in (await api.get(api.path(did, "/roles"))).json()["roles"]}
    assert listed["triager"]["capabilities"] == ["audit.read", "reports.review"]
    assert listed["triager"]["description"] == "sorts reports"

    # a capability of a plugin no longer running: named on the form, which says saving removes it
    async with app.db.transaction("test.plugin_gone") as tx:
        await tx.execute("UPDATE community_roles SET capabilities = ? WHERE community_did = ? AND name = 'triager'",
                         ('["audit.read", "reports.review", "gone.thing"]', did))
    page = text_of((await client.get(f"{base}/settings/roles/triager/edit", **cookie(admin))).text)
    assert "This role also holds gone.thing , which no running plugin declares any more" in page \
        and "saving removes it" in page
