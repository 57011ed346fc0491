"""Durability of the one write path: a real daemon process is killed with SIGKILL in the
middle of a burst of mixed writes (joins, leaves, promotions, demotions, records) against
the devnet, and restarted. After the start-up reconciliation pass the database is sound,
no write intent is left, and for every community the index equals the records on its
PDS: members and their proofs, the admins list, the profile, the community records."""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from daemon.runtime.app import create_app, load_config
from tests.conftest import TEST_SECRET_KEY, deep_merge
from tests.fixtures_communities import Api
from tests.helpers import Client, login_as
from tests.test_webhooks_crash import Daemon, free_port

pytestmark = [pytest.mark.pds, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
COLLECTION = "org.example.garden.note"
ROUNDS = 4


def intents(db_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute("SELECT kind, key FROM write_intents ORDER BY id").fetchall()


async def list_records(devnet: Any, repo: str, collection: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    async with httpx.AsyncClient() as http:
        while True:
            params = {"repo": repo, "collection": collection, "limit": 100, **({"cursor": cursor} if cursor else {})}
            resp = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.listRecords", params=params)
            assert resp.status_code == 200, resp.text
            page = resp.json()
            out += page["records"]
            cursor = page.get("cursor")
            if not cursor or not page["records"]:
                return out


async def get_record(devnet: Any, repo: str, collection: str, rkey: str) -> dict[str, Any] | None:
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord",
                              params={"repo": repo, "collection": collection, "rkey": rkey})
    return resp.json()["value"] if resp.status_code == 200 else None


def one_write(api: Api, rng: random.Random, community: str, owner: Any, user: str) -> Any:
    """A random write: most are accepted, some refused (already a member, not an admin...).
    `owner` is the primary admin's browser session (profile changes are browser-only)."""
    choice = rng.choice(["join", "join", "leave", "promote", "demote", "record", "record", "profile"])
    if choice == "profile":
        return api.client.put(f"/communities/{community}/profile", session=owner,
                              json={"displayName": f"Burst club {rng.randrange(10**6)}"})
    if choice == "join":
        return api.join(community, user)
    if choice == "leave":
        return api.leave(community, user)
    if choice in ("promote", "demote"):
        return api.admins(community, choice, {"adminDid": owner.did, "memberDid": user})
    return api.post(f"/api/v1/communities/{community}/records", {
        "userDid": user, "collection": COLLECTION,
        "record": {"$type": COLLECTION, "text": f"note {rng.random()}", "createdAt": "2026-11-23T00:00:00.000Z"}})


async def burst_then_kill(daemon: Daemon, api: Api, rng: random.Random, db_path: Path,
                          communities: list[tuple[str, Any]], users: list[str]) -> None:
    """Fire a burst of writes at once and SIGKILL the daemon as soon as one of them is
    between its intent and its commit (watching the database, as an operator could)."""
    tasks = [asyncio.ensure_future(one_write(api, rng, c, owner, u))
             for _ in range(2) for c, owner in communities for u in users]
    for _ in range(3000):
        if intents(db_path) or all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(rng.random() * 0.05)  # anywhere in the PDS call or just after
    daemon.kill()
    await asyncio.gather(*tasks, return_exceptions=True)


async def index_matches_pds(db_path: Path, devnet: Any, namespace: str) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.row_factory = sqlite3.Row
        communities = conn.execute("SELECT did, display_name FROM communities WHERE state = 'active'").fetchall()
        assert communities
        for c in communities:
            did = c["did"]
            members = sorted((r["member_did"], r["proof_rkey"]) for r in conn.execute(
                "SELECT member_did, proof_rkey FROM members WHERE community_did = ?", (did,)))
            proofs = sorted((r["value"]["memberDid"], r["uri"].rsplit("/", 1)[-1])
                            for r in await list_records(devnet, did, f"{namespace}.membershipProof"))
            assert proofs == members, did
            admins = [r["member_did"] for r in conn.execute(
                "SELECT member_did FROM members WHERE community_did = ? AND admin_rank IS NOT NULL "
                "ORDER BY admin_rank", (did,))]
            record = await get_record(devnet, did, f"{namespace}.admins", "self")
            assert record is not None and [a["did"] for a in record["admins"]] == admins, did
            profile = await get_record(devnet, did, f"{namespace}.profile", "self")
            assert profile is not None and profile["displayName"] == c["display_name"]
            indexed = sorted((r["rkey"], r["cid"]) for r in conn.execute(
                "SELECT rkey, cid FROM records WHERE community_did = ? AND collection = ?", (did, COLLECTION)))
            on_pds = sorted((r["uri"].rsplit("/", 1)[-1], r["cid"])
                            for r in await list_records(devnet, did, COLLECTION))
            assert on_pds == indexed, did


async def test_sigkill_during_a_burst_of_writes_is_reconciled_at_restart(
        tmp_path, devnet, people, communities_config):
    port = free_port()
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw = deep_merge(raw, communities_config)
    raw = deep_merge(raw, {
        "server": {"port": port, "base_url": f"http://127.0.0.1:{port}"},
        "storage": {"state_dir": str(tmp_path / "state")}, "secret_key": TEST_SECRET_KEY,
        "log_level": "warning",
    })
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    owners = [people("owner"), people("owner")]
    os.environ["COMMONROOM_EXTRA_PLUGINS"] = ""
    try:
        config, pm = load_config(config_path)
        setup_app = await create_app(config, pm, start=False)
        session = await login_as(setup_app, "did:plc:appowner")
        owner_sessions = [await login_as(setup_app, o["did"], o["handle"]) for o in owners]
        await setup_app.shutdown()
    finally:
        del os.environ["COMMONROOM_EXTRA_PLUGINS"]
    db_path = config.database_path
    namespace = config.atproto.namespace

    daemon = Daemon(config_path, port, tmp_path / "daemon.log")
    client = Client(f"http://127.0.0.1:{port}")
    rng = random.Random(12)
    try:
        await daemon.start()
        from tests.helpers import register_app
        registered = await register_app(client, session)
        api = Api(client, registered["apiKey"], registered["appId"])
        users = [people("user")["did"] for _ in range(5)]
        communities = [((await api.create(o, f"Burst club {i}"))["did"], s)
                       for i, (o, s) in enumerate(zip(owners, owner_sessions))]
        for did, _ in communities:
            for user in users[:3]:
                assert (await api.join(did, user)).status == 201

        left_behind = 0
        for _ in range(ROUNDS):
            await burst_then_kill(daemon, api, rng, db_path, communities, users)
            left_behind += len(intents(db_path))
            await daemon.start()  # the start-up pass settles what the kill left
            for _ in range(300):
                if not intents(db_path):
                    break
                await asyncio.sleep(0.1)
            assert intents(db_path) == [], (daemon.log_path.read_text()[-3000:])
        assert left_behind, "no kill landed while a write was in progress; the test proved nothing"

        daemon.kill()
        with sqlite3.connect(db_path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert intents(db_path) == []
        await index_matches_pds(db_path, devnet, namespace)
    finally:
        client.close()
        daemon.stop()
