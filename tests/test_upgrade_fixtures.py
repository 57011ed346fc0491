"""Upgrades from every release (docs/operations.md, "Upgrading"): each database in
tests/upgrade/ was written by that release's own code (0.1.0: the last commit before the first
numbered release, f988bea, which every install before 0.2.0 ran; its upgrade applies 0.2.0's
migrations: core 0007 and 0008, communities 0012, instance 0001) (tests/upgrade/make_fixture.py, run on
the release's commit, against the devnet of that day). The app starts on a copy of it, which
migrates it to today's schema, and every kind of row is read back through the API: the
community, its members and admins, a custom role and who holds it, a ban with its reason and
expiry, an invite, records, the audit log, a report, a signed-in session, and a webhook delivery
left pending, which is then delivered. From 0.2.0 on, also an OAuth grant (its session still
signed in, its tokens still open with the instance's key) and a write intent no request
finished (that person's browser join, cut short), which the reconciler finishes once they have
signed out (the record, if written, is theirs to keep: the grant to delete it is gone).
Nothing here calls the PDS of that day (the index answers), so the fixture's DIDs need not
exist on today's devnet."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from commonroom_testing.webhooks import LOOPBACK_TARGETS

FIXTURES = sorted((Path(__file__).parent / "upgrade").glob("*.sqlite3"))
RELEASES = [p.stem for p in FIXTURES]


def test_every_release_has_a_fixture() -> None:
    from daemon import __version__
    assert "0.2.0" in RELEASES
    assert __version__ in RELEASES or __version__ > max(RELEASES, key=lambda v: tuple(map(int, v.split("."))))


@pytest.fixture(params=RELEASES)
def release(request: Any) -> dict[str, Any]:
    return {"name": request.param, **json.loads((Path(__file__).parent / "upgrade" / f"{request.param}.json").read_text())}


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return LOOPBACK_TARGETS


@pytest.fixture
def state_dir(tmp_path: Path, template_db: Path, release: dict[str, Any]) -> Path:
    """The release's database where the app expects its own (the app migrates it at start)."""
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(Path(__file__).parent / "upgrade" / f"{release['name']}.sqlite3", state / template_db.name)
    return state


async def test_a_release_database_is_migrated_and_every_kind_of_row_reads_back(
        app: Any, client: Any, clock: Any, release: dict[str, Any], webhook_receiver: Any) -> None:
    key, did, who = release["apiKey"], release["community"], release["people"]

    def get(path: str, **params: Any) -> Any:
        return client.get(path, api_key=key, params=params)

    from store.migrate import writer_version
    from daemon import __version__
    assert await writer_version(app.db) == __version__  # migrated, and recorded

    details = (await get(f"/api/v1/communities/{did}")).json()["community"]
    assert details["displayName"] == "Upgrade club" and details["memberCount"] == 4
    members = (await get(f"/api/v1/communities/{did}/members")).json()["members"]
    assert {m["did"] for m in members} == {who["alice"], who["bob"], who["carol"], who["dave"]}
    check = (await client.post(f"/api/v1/communities/{did}/membership/check", api_key=key,
                               json={"userDid": who["bob"]})).json()
    assert check == {"isMember": True, "isAdmin": True, "isPending": False}
    roles = (await get(f"/api/v1/communities/{did}/roles")).json()["roles"]
    assert any(r["name"] == "greeter" and r["description"] == "welcomes people" for r in roles)
    carol = next(m for m in members if m["did"] == who["carol"])
    assert "greeter" in carol["roles"], carol
    bans = (await get(f"/api/v1/communities/{did}/bans", adminDid=who["alice"])).json()["bans"]
    assert [(b["memberDid"], b["reason"], b["expiresAt"][:10]) for b in bans] == [(who["erin"], "spam links", "2099-01-01")]
    invites = (await get(f"/api/v1/communities/{did}/invites", adminDid=who["alice"])).json()["invites"]
    assert [i["note"] for i in invites] == ["for the newsletter"]
    records = (await get(f"/api/v1/communities/{did}/records/{release['collection']}")).json()
    assert len(records["records"]) == 4
    audit = (await get(f"/api/v1/communities/{did}/audit-log", adminDid=who["alice"])).json()
    entries = next(v for v in audit.values() if isinstance(v, list))
    assert "community.created" in {e["action"] for e in entries}
    reports = await app.db.fetchval("SELECT COUNT(*) FROM reports WHERE community_did = ? AND status = 'open'", (did,))
    assert reports == 1

    # the session signed in before the upgrade still is
    me = await client.get("/users/me", headers={"Cookie": f"sid={release['session']['sid']}"})
    assert me.status == 200 and me.json()["did"] == who["alice"]
    if "oauth" in release:  # signed in through OAuth: the session and its grant's tokens
        me = await client.get("/users/me", headers={"Cookie": f"sid={release['oauth']['sid']}"})
        assert me.status == 200 and me.json()["did"] == release["oauth"]["did"]
        from daemon.security.sessions import hash_sid
        from plugins.oauth.grants import oauth_state
        grant = await oauth_state(app).grants.load(hash_sid(release["oauth"]["sid"]))
        assert grant is not None and grant.did == release["oauth"]["did"]
        assert grant.access_token and grant.refresh_token  # unsealed with the instance's key
        # The join cut short before the upgrade is settled by the reconciler: signed out (the
        # PDS of that day is gone, so its tokens are not revoked there), the grant that could
        # delete its record is gone, and the intent is finished with an audit entry.
        cookie = f"sid={release['oauth']['sid']}; csrf-token={release['oauth']['csrf']}"
        out = await client.post("/logout", headers={"Cookie": cookie, "x-csrf-token": release["oauth"]["csrf"]})
        assert out.status == 200 and out.json()["loggedOut"] is True, out.text
        assert (await app.writes.reconcile(any_age=True)).get("reconciled") == 1
        assert await app.db.fetchval("SELECT COUNT(*) FROM write_intents") == 0
        audit = (await get(f"/api/v1/communities/{did}/audit-log", adminDid=who["alice"])).json()
        entries = next(v for v in audit.values() if isinstance(v, list))
        settled = [e for e in entries if e["action"] == "reconciled"]
        assert len(settled) == 1 and settled[0]["metadata"]["undone"] == ["left the user's membership record"]

    # the delivery left pending is delivered once its receiver is up
    deliveries = (await get(f"/api/v1/webhooks/{release['webhookId']}/deliveries")).json()["deliveries"]
    assert [d["status"] for d in deliveries] == ["pending"]
    receiver = webhook_receiver()
    moved = await client.put(f"/api/v1/webhooks/{release['webhookId']}", api_key=key, json={"url": receiver.url})
    assert moved.status == 200, moved.text
    clock.advance(900)  # past the retry's back-off (the old receiver was down)
    got = await receiver.wait_for(1, timeout=20)
    assert got[0].json()["type"] == "record.created"


async def test_the_instance_plugins_new_tables_work_on_an_upgraded_database(
        app: Any, client: Any, release: dict[str, Any]) -> None:
    """The migrations since the release (instance 0002 bans and suspensions, 0003 creation
    requests, 0005 reports about communities; 0.1.0 also the instance audit log, the moves
    and the handovers) work on the old data: an operator suspends the old community, which
    then refuses a join and a record and leaves discovery, and lifts it; bans a member of it,
    whose check still answers; nothing waits in the new queues."""
    from plugins.instance import actions, audit, reports_store, requests_store
    key, did, who = release["apiKey"], release["community"], release["people"]
    operator = "did:plc:upgradeoperator"

    await actions.suspend(app, operator, did, reason="Checking the upgrade")
    join = await client.post(f"/api/v1/communities/{did}/members/join", api_key=key,
                             json={"userDid": who["erin"]})
    assert join.status == 403 and join.json()["error"] == "community_suspended", join.text
    record = await client.post(f"/api/v1/communities/{did}/records", api_key=key, json={
        "userDid": who["carol"], "collection": release["collection"],
        "record": {"$type": release["collection"], "text": "after", "createdAt": "2026-11-29T00:00:00.000Z"}})
    assert record.status == 403 and record.json()["error"] == "community_suspended", record.text
    listed = (await client.get("/api/v1/communities", api_key=key)).json()["communities"]
    assert did not in {c["did"] for c in listed}
    await actions.lift(app, operator, did)
    listed = (await client.get("/api/v1/communities", api_key=key)).json()["communities"]
    assert did in {c["did"] for c in listed}

    banned = await actions.ban(app, operator, who["dave"], reason="spam", expires=None, end_memberships=False)
    assert banned["subject"] == who["dave"]
    assert await actions.ban_in_force(app, who["dave"]) is not None
    check = await client.post(f"/api/v1/communities/{did}/membership/check", api_key=key,
                              json={"userDid": who["dave"]})
    assert check.status == 200 and check.json()["isMember"] is True
    assert [e["action"] for e in await audit.entries(app.db, limit=10)][:3] == \
        ["person.ban", "community.lift", "community.suspend"]
    assert await requests_store.listing(app.db, states=requests_store.WAITING, limit=10) == []
    assert await reports_store.open_reports(app.db, limit=10) == []
