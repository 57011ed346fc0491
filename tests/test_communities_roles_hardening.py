"""Roles after the second security probe (issue 22, holes 1 and 2): role names are checked
with a full match, so no name with a line break gets in, and the stored ones are dropped
by migration 0009; a role holder who leaves, is removed, is banned or whose account is
deleted is taken out of the community's roles record at once, and reindex gives no role
to anyone whose membership began after the record's last write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()

MIGRATION = Path(__file__).parent.parent / "plugins/communities/migrations/0009_strict_role_names.sql"


def refused(resp: Any, status: int, code: str) -> None:
    assert (resp.status, resp.json()["error"]) == (status, code), resp.text


async def give(api: Api, did: str, admin: str, user: str, role: str) -> Any:
    return await api.post(api.path(did, f"/members/{user}/roles"), {"adminDid": admin, "role": role})


def holders(record: dict[str, Any] | None) -> dict[str, list[str]]:
    return {m["did"]: m["roles"] for m in (record or {}).get("members", [])}


# ------------------------------------------------------------------ hole 1: role names


async def test_a_role_name_with_a_line_break_is_refused_everywhere(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Newlines"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    for name in ("moderator\n", "admin\n", "helper\n", "help\ner", " helper", "helper\t"):
        resp = await api.post(api.path(did, "/roles"), {"adminDid": alice["did"], "name": name, "capabilities": []})
        refused(resp, 400, "invalid_request")
        assert resp.json()["details"][0]["field"] == "name"
    refused(await give(api, did, alice["did"], bob["did"], "moderator\n"), 400, "invalid_request")
    assert (await api.get(api.path(did, "/roles"))).json()["roles"][-1]["name"] == "moderator"  # built-ins only
    assert await pds_record(app, did, "roles") is None
    gone = await api.delete(api.path(did, "/roles/moderator%0A"), {"adminDid": alice["did"]})
    assert gone.status == 404 and gone.headers["Content-Type"].startswith("application/json")


async def test_the_migration_drops_role_names_that_are_not_valid_and_what_they_granted(app, client, people):
    """A database from before the fix, where `moderator\\n` (no capabilities) was defined and
    held, and a later role change had read it as the built-in moderator: migration 0009
    drops the name and recomputes the holder's roles, grants and member-list JSON."""
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Old names"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert (await api.post(api.path(did, "/roles"), {
        "adminDid": alice["did"], "name": "scribe", "capabilities": ["audit.read"],
        "collections": [{"collection": "org.example.note", "capabilities": ["records.create"]}]})).status == 201
    assert (await give(api, did, alice["did"], bob["did"], "scribe")).status == 200
    want_grants = (await app.db.fetchone("SELECT grants FROM members WHERE community_did = ? AND member_did = ?",
                                         (did, bob["did"])))["grants"]
    async with app.db.transaction("tests.old_names") as tx:
        await tx.execute("INSERT INTO community_roles (community_did, name, capabilities, collections, created_at, "
                         "updated_at) VALUES (?, 'moderator\n', '[]', '[]', 'x', 'x')", (did,))
        await tx.execute("UPDATE members SET roles = 'moderator\n scribe', grants = 'audit.read invites.manage "
                         "members.approve members.ban members.remove records.create:org.example.note' "
                         "WHERE community_did = ? AND member_did = ?", (did, bob["did"]))
    assert (await api.get(api.path(did, "/audit-log"), adminDid=bob["did"])).status == 200
    assert "moderator" in (await api.check(did, bob["did"]))["roles"]

    await app.db.executescript("BEGIN IMMEDIATE;\n" + MIGRATION.read_text() + "\nCOMMIT;")

    assert [r["name"] for r in (await api.get(api.path(did, "/roles"))).json()["roles"]] == \
        ["admin", "member", "moderator", "scribe"]
    row = await app.db.fetchone("SELECT roles, grants, page_json FROM members WHERE community_did = ? "
                                "AND member_did = ?", (did, bob["did"]))
    assert (row["roles"], row["grants"]) == ("scribe", want_grants)
    assert json.loads(row["page_json"])["roles"] == ["member", "scribe"]
    assert (await api.check(did, bob["did"]))["roles"] == ["scribe"]
    refused(await api.delete(api.path(did, f"/members/{alice['did']}"), {"adminDid": bob["did"]}), 403, "not_admin")
    listed = {m["did"]: m["roles"] for m in (await api.get(api.path(did, "/members"))).json()["members"]}
    assert listed[bob["did"]] == ["member", "scribe"]


def test_the_migration_recomputes_grants_as_grants_of_does(app):
    """The SQL of 0009 and capabilities.grants_of agree on roles with several capabilities
    and collections (the member-page test style: the two ways held equal)."""
    import sqlite3

    from plugins.communities.capabilities import grants_of
    defs = {"a": {"capabilities": ["members.ban", "audit.read"], "collections": [
                {"collection": "org.example.b", "capabilities": ["records.delete", "records.create"]},
                {"collection": "org.example.a", "capabilities": ["records.update"]}]},
            "b-2": {"capabilities": ["invites.manage"], "collections": []}}
    db = sqlite3.connect(":memory:")
    db.executescript("CREATE TABLE members (id INTEGER PRIMARY KEY, community_did TEXT, roles TEXT, grants TEXT);"
                     "CREATE TABLE community_roles (community_did TEXT, name TEXT, capabilities TEXT, "
                     "collections TEXT);")
    for name, role in {**defs, "bad\n": {"capabilities": ["members.remove"], "collections": []}}.items():
        db.execute("INSERT INTO community_roles VALUES ('c', ?, ?, ?)",
                   (name, json.dumps(role["capabilities"]), json.dumps(role["collections"])))
    held = {1: "a", 2: "b-2 moderator", 3: "bad\n a", 4: "bad\n", 5: "gone a b-2", 6: None}
    for member, roles in held.items():
        db.execute("INSERT INTO members VALUES (?, 'c', ?, 'stale')", (member, roles))
    db.executescript(MIGRATION.read_text())
    got = dict(db.execute("SELECT id, roles || '|' || ifnull(grants, '') FROM members WHERE roles IS NOT NULL"))
    want = {}
    for member, roles in held.items():
        kept = [r for r in (roles or "").split(" ") if r == "moderator" or r in defs]
        if kept:
            want[member] = " ".join(kept) + "|" + (grants_of(kept, defs) or "")
    assert got == want
    assert db.execute("SELECT grants FROM members WHERE id = 4").fetchone() == (None,)


# ------------------------------------------------------------------ hole 2: roles after leaving


async def test_a_role_holder_who_goes_is_taken_out_of_the_roles_record(app, client, people):
    """Leave, removal, ban (and the sync's account deletion, which is a leave): the record
    in the repo follows at once, so reindex (or the sync after a gap) gives nothing back."""
    from plugins.communities.reindex import reindex
    api = await Api.make(app, client)
    alice, bob, carol, dave, erin = (people(n) for n in ("alice", "bob", "carol", "dave", "erin"))
    did = (await api.create(alice, "Turnover"))["did"]
    for user in (bob, carol, dave, erin):
        assert (await api.join(did, user["did"])).status == 201
        assert (await give(api, did, alice["did"], user["did"], "moderator")).status == 200
    assert set(holders(await pds_record(app, did, "roles"))) == {bob["did"], carol["did"], dave["did"], erin["did"]}

    assert (await api.leave(did, bob["did"])).status == 200
    assert (await api.delete(api.path(did, f"/members/{carol['did']}"), {"adminDid": alice["did"]})).status == 200
    banned = await api.post(api.path(did, "/bans"), {"adminDid": alice["did"], "memberDid": dave["did"]})
    assert banned.status == 201, banned.text
    assert holders(await pds_record(app, did, "roles")) == {erin["did"]: ["moderator"]}
    assert (await api.delete(api.path(did, f"/bans/{dave['did']}"), {"adminDid": alice["did"]})).status == 200

    for user in (bob, carol, dave):
        assert (await api.join(did, user["did"])).status == 201
    await reindex(app, did)
    for user in (bob, carol, dave):
        assert await api.check(did, user["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
        refused(await api.get(api.path(did, "/audit-log"), adminDid=user["did"]), 403, "not_admin")
    assert (await api.check(did, erin["did"]))["roles"] == ["moderator"]
    entries = [e for e in await api.audit(did, alice["did"]) if e["action"] == "community.reindexed"]
    assert entries[0]["metadata"]["roleHolders"] == 1


async def test_reindex_ignores_grants_to_members_who_joined_after_the_record_was_written(app, client, people, clock):
    """A roles record written before this fix may still name someone who left; if they
    joined again after its last write, that grant is not theirs any more."""
    from daemon.atproto.accounts import community_repo
    from plugins.communities.reindex import reindex
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Stale record"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201
        assert (await give(api, did, alice["did"], user["did"], "moderator")).status == 200
    stale = await pds_record(app, did, "roles")
    assert (await api.leave(did, bob["did"])).status == 200
    repo = await community_repo(app, did)
    await repo.put_record(f"{app.config.atproto.namespace}.roles", "self", stale)  # as an older daemon left it
    clock.advance(5)
    assert (await api.join(did, bob["did"])).status == 201

    summary = await reindex(app, did)
    assert summary["roleHolders"] == 1
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert (await api.check(did, carol["did"]))["roles"] == ["moderator"]
