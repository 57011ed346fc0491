"""Roles and capabilities (docs/communities.md, "Roles and capabilities"), against the
devnet: a moderator approves, rejects and removes members, reads the audit log and the
pending list, but cannot touch admins or the community; custom roles are defined,
assigned and deleted by admins; the roles record in the community's repo follows every
change; membership/check and member lists show the roles.

Bans are not tested here: the ban routes arrive with the invites branch (issue 14 part 2),
which gates them with `require_capability(status, "members.ban")`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


def refused(resp: Any, status: int, code: str) -> None:
    assert (resp.status, resp.json()["error"]) == (status, code), resp.text


async def member(api: Api, did: str, admin: str, user: str) -> None:
    """Make `user` a member of the admin-approved community `did`."""
    assert (await api.join(did, user)).status == 202
    assert (await api.decide(did, "approve", admin, user)).status == 200


async def give(api: Api, did: str, admin: str, user: str, role: str) -> Any:
    return await api.post(api.path(did, f"/members/{user}/roles"), {"adminDid": admin, "role": role})


async def test_a_moderator_approves_rejects_and_removes_members_but_cannot_touch_admins(
        app, client, people, recorder):
    api = await Api.make(app, client)
    alice, bob, carol, dave, erin, gina = (people(n) for n in ("alice", "bob", "carol", "dave", "erin", "gina"))
    did = (await api.create(alice, "Moderated", type="admin-approved"))["did"]
    for user in (bob, carol, gina):
        await member(api, did, alice["did"], user["did"])
    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": carol["did"]})).status == 200

    # Without the role, bob is refused as before.
    assert (await api.join(did, dave["did"])).status == 202
    refused(await api.decide(did, "approve", bob["did"], dave["did"]), 403, "not_admin")

    given = await give(api, did, alice["did"], bob["did"], "moderator")
    assert given.status == 200, given.text
    assert given.json()["roles"] == ["moderator"]
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False,
                                                "roles": ["moderator"]}
    listed = {m["did"]: m["roles"] for m in (await api.get(api.path(did, "/members"), limit=100)).json()["members"]}
    assert listed[bob["did"]] == ["member", "moderator"]
    assert listed[alice["did"]] == ["admin", "member"] and listed[gina["did"]] == ["member"]

    # approve, reject, the pending list, the audit log
    assert (await api.join(did, erin["did"])).status == 202
    pending = await api.get(api.path(did, "/members/pending"), adminDid=bob["did"])
    assert pending.status == 200 and {p["userDid"] for p in pending.json()["pendingMembers"]} == \
        {dave["did"], erin["did"]}
    approved = await api.decide(did, "approve", bob["did"], dave["did"])
    assert approved.status == 200, approved.text
    assert (await api.check(did, dave["did"]))["isMember"] is True
    assert recorder.of("member.approved", did)[-1].data["approvedBy"] == bob["did"]
    rejected = await api.decide(did, "reject", bob["did"], erin["did"], reason="spam")
    assert rejected.status == 200, rejected.text
    assert (await api.check(did, erin["did"]))["isPending"] is False
    entries = await api.audit(did, bob["did"])
    assert [(e["action"], e["actorDid"]) for e in entries[:2]] == [
        ("member.rejected", bob["did"]), ("member.approved", bob["did"])]

    # remove a member who is not an admin
    removed = await api.delete(api.path(did, f"/members/{dave['did']}"), {"adminDid": bob["did"]})
    assert removed.status == 200, removed.text
    assert (await api.check(did, dave["did"]))["isMember"] is False

    # but not an admin, nor the primary admin; no demotion, promotion, deletion, profile or roles
    refused(await api.delete(api.path(did, f"/members/{carol['did']}"), {"adminDid": bob["did"]}), 403, "not_admin")
    refused(await api.delete(api.path(did, f"/members/{alice['did']}"), {"adminDid": bob["did"]}), 403, "not_admin")
    refused(await api.admins(did, "demote", {"adminDid": bob["did"], "memberDid": carol["did"]}), 403, "not_admin")
    refused(await api.admins(did, "promote", {"adminDid": bob["did"], "memberDid": gina["did"]}), 403, "not_admin")
    refused(await api.delete(api.path(did), {"adminDid": bob["did"]}), 403, "not_primary_admin")
    refused(await give(api, did, bob["did"], gina["did"], "moderator"), 403, "not_admin")
    refused(await api.post(api.path(did, "/roles"), {"adminDid": bob["did"], "name": "helper"}), 403, "not_admin")
    settings = await client.put(api.path(did, "/settings"), api_key=api.key,
                                json={"adminDid": bob["did"], "requireUserProof": True})
    refused(settings, 403, "not_admin")
    assert (await api.check(did, carol["did"]))["isAdmin"] is True
    assert (await api.check(did, alice["did"]))["isAdmin"] is True
    details = (await api.get(api.path(did))).json()["community"]
    assert details["memberCount"] == 4 and [a["did"] for a in details["admins"]] == [alice["did"], carol["did"]]

    # Taking the role away takes the capabilities with it.
    taken = await api.delete(api.path(did, f"/members/{bob['did']}/roles/moderator"), {"adminDid": alice["did"]})
    assert taken.status == 200 and taken.json()["roles"] == [], taken.text
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    refused(await api.delete(api.path(did, f"/members/{gina['did']}"), {"adminDid": bob["did"]}), 403, "not_admin")
    refused(await api.get(api.path(did, "/audit-log"), adminDid=bob["did"]), 403, "not_admin")
    assert [e["action"] for e in await api.audit(did, alice["did"], action="role.unassigned")] == ["role.unassigned"]


async def test_custom_roles_live_in_the_community_repo_and_follow_every_change(app, client, people, devnet):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Governed"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201
    assert await pds_record(app, did, "roles") is None

    created = await api.post(api.path(did, "/roles"), {
        "adminDid": alice["did"], "name": "gatekeeper", "description": "lets people in",
        "capabilities": ["members.approve", "audit.read"],
        "collections": [{"collection": "org.example.garden.note", "capabilities": ["records.create"]}]})
    assert created.status == 201, created.text
    assert created.json() == {"name": "gatekeeper", "builtin": False, "description": "lets people in",
                              "capabilities": ["audit.read", "members.approve"],
                              "collections": [{"collection": "org.example.garden.note",
                                               "capabilities": ["records.create"]}]}
    listed = (await api.get(api.path(did, "/roles"))).json()["roles"]
    assert [r["name"] for r in listed] == ["admin", "member", "moderator", "gatekeeper"]
    assert (await give(api, did, alice["did"], bob["did"], "gatekeeper")).status == 200
    assert (await give(api, did, alice["did"], carol["did"], "moderator")).status == 200
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False,
                                                "roles": ["gatekeeper"]}
    assert (await api.get(api.path(did, "/audit-log"), adminDid=bob["did"])).status == 200

    record = await pds_record(app, did, "roles")
    assert record["roles"] == [{"name": "gatekeeper", "description": "lets people in",
                                "capabilities": ["audit.read", "members.approve"],
                                "collections": [{"collection": "org.example.garden.note",
                                                 "capabilities": ["records.create"]}]}]
    assert record["members"] == [{"did": bob["did"], "roles": ["gatekeeper"]},
                                 {"did": carol["did"], "roles": ["moderator"]}]

    # Redefining the role changes what its holders may do at once.
    changed = await client.put(api.path(did, "/roles/gatekeeper"), api_key=api.key,
                               json={"adminDid": alice["did"], "capabilities": ["members.approve"]})
    assert changed.status == 200, changed.text
    refused(await api.get(api.path(did, "/audit-log"), adminDid=bob["did"]), 403, "not_admin")
    assert (await pds_record(app, did, "roles"))["roles"] == [
        {"name": "gatekeeper", "capabilities": ["members.approve"], "collections": []}]

    # Deleting it takes it from its holders.
    gone = await api.delete(api.path(did, "/roles/gatekeeper"), {"adminDid": alice["did"]})
    assert gone.status == 200, gone.text
    assert gone.json()["holders"] == [bob["did"]]
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    record = await pds_record(app, did, "roles")
    assert record["roles"] == [] and record["members"] == [{"did": carol["did"], "roles": ["moderator"]}]
    actions = [e["action"] for e in await api.audit(did, alice["did"]) if e["action"].startswith("role.")]
    assert actions == ["role.deleted", "role.updated", "role.assigned", "role.assigned", "role.created"]


async def test_role_refusals_change_nothing(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Strict"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    ok = await api.post(api.path(did, "/roles"), {"adminDid": alice["did"], "name": "helper",
                                                  "capabilities": ["members.remove"]})
    assert ok.status == 201, ok.text
    before = await pds_record(app, did, "roles")
    audit_before = await api.audit(did, alice["did"])

    async def post_role(body: dict[str, Any]) -> Any:
        return await api.post(api.path(did, "/roles"), {"adminDid": alice["did"], **body})

    refused(await post_role({"name": "helper"}), 409, "role_exists")
    refused(await post_role({"name": "moderator"}), 409, "role_builtin")
    refused(await post_role({"name": "Not OK"}), 400, "invalid_request")
    bad = await post_role({"name": "x1", "capabilities": ["members.fly"]})
    refused(bad, 400, "invalid_request")
    assert bad.json()["details"][0]["field"] == "capabilities[0]"
    per = await post_role({"name": "x2", "capabilities": ["records.create"]})
    refused(per, 400, "invalid_request")
    assert per.json()["details"][0]["field"] == "capabilities[0]"
    refused(await client.put(api.path(did, "/roles/nobody"), api_key=api.key, json={"adminDid": alice["did"]}),
            404, "role_not_found")
    refused(await client.put(api.path(did, "/roles/admin"), api_key=api.key, json={"adminDid": alice["did"]}),
            409, "role_builtin")
    refused(await give(api, did, alice["did"], carol["did"], "helper"), 404, "not_member")
    refused(await give(api, did, alice["did"], bob["did"], "nobody"), 404, "role_not_found")
    refused(await give(api, did, alice["did"], bob["did"], "admin"), 409, "role_builtin")
    refused(await api.delete(api.path(did, f"/members/{bob['did']}/roles/helper"), {"adminDid": alice["did"]}),
            409, "role_not_held")
    other = await Api.make(app, client, owner="did:plc:someoneelse")
    refused(await give(other, did, alice["did"], bob["did"], "helper"), 403, "app_not_trusted")
    assert (await give(api, did, alice["did"], bob["did"], "helper")).status == 200
    refused(await give(api, did, alice["did"], bob["did"], "helper"), 409, "role_already_held")

    after = await pds_record(app, did, "roles")
    assert after["roles"] == before["roles"] and after["members"] == [{"did": bob["did"], "roles": ["helper"]}]
    audit_after = await api.audit(did, alice["did"])
    done = [e for e in audit_after if e["outcome"] == "done"]
    assert len(done) == len(audit_before) + 1 and done[0]["action"] == "role.assigned"
    # the refused role changes are audited as denials (issue 14, part 5); they change nothing
    assert [e["metadata"]["code"] for e in audit_after if e["outcome"] == "denied"] == ["app_not_trusted"]


async def test_an_unfinished_role_change_is_rolled_back_from_the_index(app, client, people):
    """A role change whose PDS write happened but whose local commit did not (a crash): the
    reconciler puts the roles record back as the index has it, and audits it."""
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Crashy"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201
    assert (await give(api, did, alice["did"], bob["did"], "moderator")).status == 200
    committed = await pds_record(app, did, "roles")

    from daemon.atproto.accounts import community_repo
    from plugins.communities.roles import ROLES
    await app.writes.begin(kind=ROLES, key=f"roles:{did}", community_did=did, operation="role.assigned",
                           rkey="self", payload={"memberDid": carol["did"]})
    repo = await community_repo(app, did)
    await repo.put_record(f"{app.config.atproto.namespace}.roles", "self", {
        **committed, "members": committed["members"] + [{"did": carol["did"], "roles": ["moderator"]}]})

    counts = await app.writes.reconcile(kinds=[ROLES], any_age=True)
    assert counts["reconciled"] == 1
    assert (await pds_record(app, did, "roles"))["members"] == [{"did": bob["did"], "roles": ["moderator"]}]
    assert await api.check(did, carol["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    entry = (await api.audit(did, alice["did"], action="reconciled"))[0]
    assert entry["metadata"]["operation"] == "role.assigned" and entry["targetDid"] == carol["did"]
    assert await app.writes.get(f"roles:{did}") is None


def test_the_roles_record_is_validated_against_its_lexicon(app):
    from daemon.atproto.lexicons import LexiconError, lexicons_for
    from plugins.communities.roles import roles_record
    lex = lexicons_for(app)
    nsid = f"{app.config.atproto.namespace}.roles"
    good = roles_record({"helper": {"description": "", "capabilities": ["members.approve"],
                                    "collections": [{"collection": "org.example.note",
                                                     "capabilities": ["records.create"]}]}},
                        {"did:plc:bbbbbbbbbbbbbbbbbbbbbbbb": ["helper", "moderator"]}, "2026-11-23T00:00:00.000Z")
    lex.validate_record(nsid, good, rkey="self")
    # capability names are open (a plugin's own, such as reports.review, may be granted; the
    # API refuses undeclared ones first) but bounded
    lex.validate_record(nsid, {**good, "roles": [{**good["roles"][0], "capabilities": ["reports.review"]}]},
                        rkey="self")
    for caps in (["members." + "x" * 130], [f"p.c{i}" for i in range(101)]):
        bad = {**good, "roles": [{**good["roles"][0], "capabilities": caps}]}
        with pytest.raises(LexiconError, match="capabilities"):
            lex.validate_record(nsid, bad, rkey="self")
    with pytest.raises(LexiconError):
        lex.validate_record(nsid, good, rkey="other")


async def test_reindex_rebuilds_roles_from_the_community_repo(app, client, people):
    """The roles record is the truth: an index that lost its roles gets them back from the
    repo (portable governance), for current members only."""
    from plugins.communities.reindex import reindex
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Portable"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201
    assert (await api.post(api.path(did, "/roles"), {"adminDid": alice["did"], "name": "scribe",
                                                     "capabilities": ["audit.read"]})).status == 201
    assert (await give(api, did, alice["did"], bob["did"], "scribe")).status == 200
    assert (await give(api, did, alice["did"], carol["did"], "moderator")).status == 200
    assert (await api.leave(did, carol["did"])).status == 200   # the record still names carol

    async with app.db.transaction("tests.forget_roles") as tx:
        await tx.execute("DELETE FROM community_roles WHERE community_did = ?", (did,))
        await tx.execute("UPDATE members SET roles = NULL, grants = NULL WHERE community_did = ?", (did,))
    refused(await api.get(api.path(did, "/audit-log"), adminDid=bob["did"]), 403, "not_admin")

    summary = await reindex(app, did)
    assert (summary["roles"], summary["roleHolders"]) == (["scribe"], 1)
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False,
                                                "roles": ["scribe"]}
    assert (await api.get(api.path(did, "/audit-log"), adminDid=bob["did"])).status == 200
    assert [r["name"] for r in (await api.get(api.path(did, "/roles"))).json()["roles"]][-1] == "scribe"
    assert await api.check(did, carol["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}


async def test_a_moderator_signed_in_in_the_browser_approves_and_reads_the_audit_log(app, client, people):
    from commonroom_testing.http import login_as
    api = await Api.make(app, client)
    alice, bob, carol, dave = people("alice"), people("bob"), people("carol"), people("dave")
    did = (await api.create(alice, "Browser mods", type="admin-approved"))["did"]
    await member(api, did, alice["did"], bob["did"])
    await member(api, did, alice["did"], dave["did"])
    assert (await give(api, did, alice["did"], bob["did"], "moderator")).status == 200
    assert (await api.join(did, carol["did"])).status == 202
    bob_session, dave_session = await login_as(app, bob["did"]), await login_as(app, dave["did"])

    refused(await client.get(f"/communities/{did}/members/pending", session=dave_session), 403, "not_admin")
    pending = await client.get(f"/communities/{did}/members/pending", session=bob_session)
    assert pending.status == 200 and [p["userDid"] for p in pending.json()["pendingMembers"]] == [carol["did"]]
    approved = await client.post(f"/communities/{did}/members/{carol['did']}/approve", session=bob_session)
    assert approved.status == 200, approved.text
    log = await client.get(f"/communities/{did}/audit-log", session=bob_session)
    assert log.status == 200 and log.json()["entries"][0]["action"] == "member.approved"
    refused(await client.get(f"/communities/{did}/audit-log", session=dave_session), 403, "not_admin")
