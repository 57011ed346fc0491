"""A community move killed with SIGKILL after each of its steps in turn (a real daemon process
against two real PDSes on one PLC directory): the next start takes the move up and finishes it,
and the community answers and accepts writes again, on PDS B, with its records."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from daemon.atproto.moves import STEPS
from daemon.runtime.app import create_app, load_config
from tests.conftest import TEST_SECRET_KEY, deep_merge
from tests.fixtures_communities import Api
from tests.test_communities_move import move
from tests.helpers import Client, login_as, register_app
from tests.test_webhooks_crash import Daemon, free_port

pytestmark = [pytest.mark.pds, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
COLLECTION = "org.example.garden.note"


def plc_pds(devnet: Any, did: str) -> str:
    with urllib.request.urlopen(f"{devnet.plc_url}/{did}/data", timeout=10) as resp:
        return json.loads(resp.read())["services"]["atproto_pds"]["endpoint"]


@pytest.mark.parametrize("killed_after", STEPS[:-1])
async def test_a_move_killed_after_each_step_finishes_at_the_next_start(
        tmp_path, devnet, devnet_b, people, communities_config, monkeypatch, killed_after):
    port = free_port()
    raw = deep_merge(yaml.safe_load((REPO / "config.yaml").read_text()), communities_config)
    raw = deep_merge(raw, {"server": {"port": port, "base_url": f"http://127.0.0.1:{port}"},
                           "storage": {"state_dir": str(tmp_path / "state")}, "secret_key": TEST_SECRET_KEY,
                           "log_level": "warning"})
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    owner, member = people("owner"), people("member")
    monkeypatch.setenv("COMMONROOM_EXTRA_PLUGINS", "")
    config, pm = load_config(config_path)
    setup_app = await create_app(config, pm, start=False)
    session = await login_as(setup_app, "did:plc:appowner")
    await setup_app.shutdown()

    client = Client(f"http://127.0.0.1:{port}")
    daemon = Daemon(config_path, port, tmp_path / "daemon.log", plugins="tests.plugin_move_killer:plugin",
                    env={"COMMONROOM_KILL_AFTER_MOVE_STEP": killed_after})
    try:
        await daemon.start()
        registered = await register_app(client, session)
        api = Api(client, registered["apiKey"], registered["appId"])
        did = (await api.create(owner, "Movers"))["did"]
        assert (await api.join(did, member["did"])).status == 201
        for i in range(3):
            made = await api.post(api.path(did, "/records"), {
                "userDid": member["did"], "collection": COLLECTION,
                "record": {"$type": COLLECTION, "text": f"note {i}", "createdAt": "2026-11-29T00:00:00.000Z"}})
            assert made.status == 201, made.text
        try:
            await move(api, devnet, did, owner, devnet_b.pds_url)
        except Exception:  # noqa: BLE001 (killed while answering, after the account step)
            pass
        assert daemon.proc is not None
        daemon.proc.wait(60)  # it killed itself after the step
        with sqlite3.connect(config.database_path) as conn:
            left = conn.execute("SELECT step FROM account_moves WHERE did = ?", (did,)).fetchone()
        assert left == (STEPS[STEPS.index(killed_after) + 1],), (left, daemon.log_path.read_text()[-2000:])

        daemon.env = {}
        await daemon.start()  # the start-up resumes the move
        for _ in range(600):
            state = (await api.get(api.path(did, "/move"))).json()["state"]
            if state == "none":
                break
            await asyncio.sleep(0.1)
        assert state == "none", daemon.log_path.read_text()[-3000:]
        assert plc_pds(devnet, did) == devnet_b.pds_url
        async with httpx.AsyncClient() as http:
            listed = await http.get(f"{devnet_b.pds_url}/xrpc/com.atproto.repo.listRecords",
                                    params={"repo": did, "collection": COLLECTION})
        assert len(listed.json()["records"]) == 3
        check = await client.post(api.path(did, "/membership/check"), api_key=api.key, json={"userDid": member["did"]})
        assert check.json()["isMember"] is True
        assert (await api.join(did, people("late")["did"])).status == 201
    finally:
        daemon.stop()
        client.close()
