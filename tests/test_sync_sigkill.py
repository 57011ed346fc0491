"""Durability of the network sync: a real daemon process that follows the devnet PDS's
firehose is killed with SIGKILL while changes made directly on the PDS stream in (profile
edits, membership records, a deactivation), more changes happen while it is down, and it
is restarted. Nothing is lost: the cursor and the applied changes commit together, and the
work recorded with them (write intents) is finished after the restart."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.runtime.app import create_app, load_config
from tests.conftest import TEST_SECRET_KEY, deep_merge
from tests.fixtures_communities import Api
from tests.helpers import Client, eventually, login_as, register_app
from tests.test_sync_network import pds_call
from tests.test_webhooks_crash import Daemon, free_port

pytestmark = [pytest.mark.pds, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
DEADLINE = 60.0


def saved_cursor(db_path: Path) -> int | None:
    with sqlite3.connect(db_path) as conn:
        row = conn.execute("SELECT cursor FROM sync_cursors").fetchone()
    return row[0] if row else None


def sync_intents(db_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute("SELECT operation, key FROM write_intents WHERE kind = 'communities.sync'").fetchall()


async def wait_for(check: Any, what: str, log: Path) -> Any:
    return await eventually(check, what, within=DEADLINE, every=0.2, context=lambda: log.read_text()[-3000:])


def set_name(devnet: Any, user: dict[str, str], name: str) -> None:
    pds_call(devnet, "com.atproto.repo.putRecord", {
        "repo": user["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
        "record": {"$type": "app.bsky.actor.profile", "displayName": name}}, token=user["accessJwt"])


async def test_sigkill_while_changes_stream_in_then_restart_loses_nothing(
        tmp_path, devnet, people, communities_config):
    port = free_port()
    raw = deep_merge(yaml.safe_load((REPO / "config.yaml").read_text()), communities_config)
    raw = deep_merge(raw, {
        "server": {"port": port, "base_url": f"http://127.0.0.1:{port}"},
        "storage": {"state_dir": str(tmp_path / "state")}, "secret_key": TEST_SECRET_KEY,
        "log_level": "info", "sync": {"source": "firehose", "url": devnet.pds_url, "batch_size": 5},
    })
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    os.environ["COMMONROOM_EXTRA_PLUGINS"] = ""
    try:
        config, pm = load_config(config_path)
        setup_app = await create_app(config, pm, start=False)
        session = await login_as(setup_app, "did:plc:appowner")
        await setup_app.shutdown()
    finally:
        del os.environ["COMMONROOM_EXTRA_PLUGINS"]
    db_path = config.database_path
    namespace = config.atproto.namespace

    owner = people("owner")
    users = [people("member") for _ in range(6)]
    newcomers = [people("newcomer") for _ in range(3)]
    sleeper = users[0]
    daemon = Daemon(config_path, port, tmp_path / "daemon.log")
    client = Client(f"http://127.0.0.1:{port}")
    try:
        await daemon.start()
        registered = await register_app(client, session)
        api = Api(client, registered["apiKey"], registered["appId"])
        did = (await api.create(owner, "Crash club"))["did"]
        for user in users:
            assert (await api.join(did, user["did"])).status == 201

        async def cursor_saved() -> int | None:
            return saved_cursor(db_path)
        start = await wait_for(cursor_saved, "a first cursor saved", daemon.log_path)

        final: dict[str, str] = {}
        done = threading.Event()

        def stream_changes() -> None:
            for round_ in range(8):
                for user in users[1:]:
                    name = f"{user['handle'].split('.')[0]} round {round_}"
                    set_name(devnet, user, name)
                    final[user["did"]] = name
            done.set()

        writer = threading.Thread(target=stream_changes)
        writer.start()

        async def moved() -> bool:
            return (saved_cursor(db_path) or 0) > start
        await wait_for(moved, "the cursor moved while changes stream in", daemon.log_path)
        assert not done.is_set(), "the changes were all applied before the kill; the test proved nothing"
        daemon.kill()
        killed_at = saved_cursor(db_path)
        writer.join(120)

        # while the daemon is down: new members by their own records, and a deactivation
        collection = f"{namespace}.membership"
        for user in newcomers:
            await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.createRecord", {
                "repo": user["did"], "collection": collection, "validate": False,
                "record": {"$type": collection, "community": did, "joinedAt": "2026-11-23T00:00:00.000Z"}},
                token=user["accessJwt"])
        await asyncio.to_thread(pds_call, devnet, "com.atproto.server.deactivateAccount", {},
                                token=sleeper["accessJwt"])

        await daemon.start()

        async def caught_up() -> bool:
            resp = await api.get(api.path(did, "/members"), limit=100)
            members = {m["did"]: m for m in resp.json()["members"]}
            return (all(members.get(u) and members[u]["displayName"] == name for u, name in final.items())
                    and all(n["did"] in members for n in newcomers) and sleeper["did"] not in members
                    and resp.json()["total"] == 1 + len(users) - 1 + len(newcomers))
        await wait_for(caught_up, "every change made before, during and after the kill", daemon.log_path)

        async def settled() -> bool:
            return not sync_intents(db_path)
        await wait_for(settled, "no sync work left", daemon.log_path)
        assert (saved_cursor(db_path) or 0) > (killed_at or 0)
        assert (await api.check(did, sleeper["did"]))["isMember"]  # hidden, kept
        for user in newcomers:
            assert (await api.check(did, user["did"]))["isMember"]
    finally:
        client.close()
        daemon.stop()
