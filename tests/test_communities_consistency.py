"""PDS and index kept consistent: a PDS outage changes nothing locally and the same
request succeeds afterwards; keyset pages stay stable under concurrent joins; the index
can be rebuilt from the repo."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from plugins.communities.reindex import reindex
from tests.fixtures_communities import Api, devnet_module_fixtures, proofs_on_pds

pytestmark = pytest.mark.pds


config_overrides, extra_plugins = devnet_module_fixtures()


def fake_did() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    return "did:plc:" + "".join(alphabet[b % 32] for b in os.urandom(24))


async def known_to_the_cache(app: Any, dids: list[str]) -> list[str]:
    """Put `dids` in the identity cache as resolved documents, as if the PLC had answered:
    joins check that a DID resolves, and this test needs hundreds of members, not hundreds
    of devnet accounts."""
    import json

    from daemon.atproto import identity as identity_store
    now = app.clock.time()
    async with app.db.transaction("tests.known_dids") as tx:
        for did in dids:
            await identity_store.put_did_tx(tx, did, None, None, json.dumps({"id": did}), now, now + 3600)
    return dids


async def test_pds_down_during_join_is_502_without_trace_and_the_retry_succeeds(app, client, people, devnet, recorder):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Flaky club"))["did"]
    events_before = await app.db.fetchval("SELECT count(*) FROM events")

    devnet.pause()
    try:
        resp = await api.join(did, bob["did"])
    finally:
        devnet.resume()
    assert resp.status == 502, resp.text
    assert await app.db.fetchval("SELECT count(*) FROM members WHERE member_did = ?", (bob["did"],)) == 0
    assert await app.db.fetchval("SELECT count(*) FROM events") == events_before
    assert not recorder.of("member.joined", did)[1:]  # only the creator's
    assert await api.check(did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}

    resp = await api.join(did, bob["did"])
    assert resp.status == 201, resp.text
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    proofs = await proofs_on_pds(app, did)
    assert list(proofs).count(bob["did"]) == 1
    assert len([e for e in recorder.of("member.joined", did) if e.data["memberDid"] == bob["did"]]) == 1
    assert await app.db.fetchval("SELECT count(*) FROM write_intents") == 0


async def test_create_with_pds_down_creates_nothing_and_the_same_request_finishes(app, client, people, devnet):
    api = await Api.make(app, client)
    alice = people("alice")
    body = {"creatorDid": alice["did"], "displayName": "Second try", "handle": "second" + os.urandom(3).hex()}
    devnet.pause()
    try:
        resp = await api.post("/api/v1/communities", body)
    finally:
        devnet.resume()
    assert resp.status == 502, resp.text
    assert await app.db.fetchval("SELECT count(*) FROM communities WHERE state = 'active'") == 0
    assert (await api.get("/api/v1/communities", query="second try")).json()["communities"] == []

    resp = await api.post("/api/v1/communities", body)
    assert resp.status == 201, resp.text
    did = resp.json()["community"]["did"]
    assert await api.check(did, alice["did"]) == {"isMember": True, "isAdmin": True, "isPending": False}
    assert list(await proofs_on_pds(app, did)) == [alice["did"]]


async def test_member_pages_have_no_repeats_or_gaps_while_members_join(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Big hall"))["did"]
    first = await known_to_the_cache(app, [fake_did() for _ in range(249)])
    for i in range(0, len(first), 25):
        results = await asyncio.gather(*(api.join(did, d) for d in first[i:i + 25]))
        assert all(r.status == 201 for r in results), [r.text for r in results if r.status != 201]
    existing = {alice["did"], *first}

    latecomers = await known_to_the_cache(app, [fake_did() for _ in range(30)])
    seen: list[str] = []
    cursor = None
    pages = 0

    async def walk() -> None:
        nonlocal cursor, pages
        while True:
            resp = await api.get(api.path(did, "/members"), limit=100, cursor=cursor)
            assert resp.status == 200, resp.text
            body = resp.json()
            seen.extend(m["did"] for m in body["members"])
            pages += 1
            cursor = body.get("cursor")
            if not cursor:
                return
            await asyncio.sleep(0.05)

    async def join_more() -> None:
        for d in latecomers:
            assert (await api.join(did, d)).status == 201

    await asyncio.gather(walk(), join_more())
    assert len(seen) == len(set(seen)), "a member appeared twice"
    assert existing <= set(seen), "a member who was there all along was skipped"
    assert pages >= 3
    total = (await api.get(api.path(did, "/members"), limit=1)).json()["total"]
    assert total == 250 + len(latecomers)


async def test_reindex_rebuilds_the_index_from_the_repo(app, client, people):
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Drifting club"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201
    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    # the index drifts: a member row lost, a stranger added, counts wrong
    async with app.db.transaction("test.drift") as tx:
        await tx.execute("DELETE FROM members WHERE community_did = ? AND member_did = ?", (did, bob["did"]))
        await tx.execute("UPDATE communities SET member_count = 99, display_name = 'wrong' WHERE did = ?", (did,))
        await tx.execute("INSERT INTO members (community_did, member_did, confirmed_at, proof_rkey) "
                         "VALUES (?, 'did:plc:stranger', '2026-01-01T00:00:00.000Z', 'x')", (did,))

    summary = await reindex(app, did)
    assert summary["members"] == 3 and summary["added"] == 1 and summary["removed"] == 1
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": True, "isPending": False}
    assert await api.check(did, "did:plc:stranger") == {"isMember": False, "isAdmin": False, "isPending": False}
    details = (await api.get(api.path(did))).json()["community"]
    assert details["memberCount"] == 3 and details["displayName"] == "Drifting club"
    assert [a["did"] for a in details["admins"]] == [alice["did"], bob["did"]]


async def test_create_failing_half_way_rolls_back_and_the_same_request_finishes(app, client, people, monkeypatch):
    from daemon.atproto.pds import PdsError, RepoClient, get_record

    api = await Api.make(app, client)
    alice = people("alice")
    real_put = RepoClient.put_record
    failures = []

    async def flaky_put(self: Any, collection: str, rkey: str, record: dict, **kw: Any) -> dict:
        if collection.endswith(".admins") and not failures:
            failures.append(collection)
            raise PdsError("injected: the PDS went away")
        return await real_put(self, collection, rkey, record, **kw)

    monkeypatch.setattr(RepoClient, "put_record", flaky_put)
    body = {"creatorDid": alice["did"], "displayName": "Half made", "handle": "halfmade" + os.urandom(3).hex()}
    resp = await api.post("/api/v1/communities", body)
    assert resp.status == 502 and "same request" in resp.json()["message"]
    row = await app.db.fetchone("SELECT did, state FROM communities")
    assert row["state"] == "creating"
    assert (await api.get(api.path(row["did"]))).status == 404
    assert await get_record(app, app.config.atproto.pds_url, row["did"],
                            "community.commonroom.profile", "self") is None  # rolled back

    resp = await api.post("/api/v1/communities", body)
    assert resp.status == 201, resp.text
    assert resp.json()["community"]["did"] == row["did"]
    assert await api.check(row["did"], alice["did"]) == {"isMember": True, "isAdmin": True, "isPending": False}


async def test_reindex_command_is_offered_through_the_cli_hook(app, client, people, capsys):
    import argparse

    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Cli club"))["did"]
    commands = {}
    for result in app.pm.hook.cr_cli_commands():
        commands.update(result or {})
    help_text, add_arguments, run = commands["reindex"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert await run(app, parser.parse_args([did])) == 0
    assert "1 member(s)" in capsys.readouterr().out
    assert await run(app, parser.parse_args(["did:plc:unknownunknownunknown"])) == 1
