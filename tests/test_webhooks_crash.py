"""Durability: a real daemon process is killed with SIGKILL while 1,000 events are
pending, twice (once with the receiver down, once in the middle of sending); after each
restart every event reaches the receiver at least once."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tornado.httpclient import AsyncHTTPClient

from daemon.runtime.app import create_app, load_config
from tests.conftest import TEST_SECRET_KEY, deep_merge
from tests.fixtures_webhooks import make_community, start_receiver, wait_until
from tests.helpers import Client, login_as, register_app

REPO = Path(__file__).resolve().parent.parent
COMMUNITY = "did:plc:crashtest"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, config_path: Path, port: int, log_path: Path,
                 plugins: str = "tests.fixtures_webhooks:event_source", env: dict[str, str] | None = None) -> None:
        self.config_path, self.port, self.log_path = config_path, port, log_path
        self.plugins, self.env = plugins, dict(env or {})
        self.proc: subprocess.Popen | None = None

    async def start(self) -> None:
        env = {**os.environ, "COMMONROOM_EXTRA_PLUGINS": self.plugins, "PYTHONPATH": str(REPO), **self.env}
        exe = Path(sys.executable).parent / "commonroom"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(exe), "-c", str(self.config_path), "serve"], cwd=REPO,
                                     env=env, stdout=log, stderr=subprocess.STDOUT)
        client = AsyncHTTPClient(force_instance=True)
        deadline = time.monotonic() + 30
        try:
            while True:
                if self.proc.poll() is not None:
                    raise AssertionError(f"daemon exited: {self.log_path.read_text()[-3000:]}")
                try:
                    resp = await client.fetch(f"http://127.0.0.1:{self.port}/health", raise_error=False)
                    if resp.code == 200:
                        return
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"daemon did not come up: {self.log_path.read_text()[-3000:]}")
                await asyncio.sleep(0.1)
        finally:
            client.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.mark.slow
async def test_sigkill_with_1000_pending_events_loses_none(tmp_path):
    port, receiver_port = free_port(), free_port()
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw = deep_merge(raw, {
        "server": {"port": port, "base_url": f"http://127.0.0.1:{port}"},
        "storage": {"state_dir": str(tmp_path / "state")}, "secret_key": TEST_SECRET_KEY,
        "log_level": "warning",
        "webhooks": {"allow_http": True, "allowed_targets": ["127.0.0.0/8"],
                     "retry_schedule_seconds": [1, 1, 1, 1, 1, 1, 1, 1]},
    })
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))

    # A session to register the app with, and a community, written before the daemon runs.
    os.environ["COMMONROOM_EXTRA_PLUGINS"] = ""
    config, pm = load_config(config_path)
    setup_app = await create_app(config, pm, start=False)
    session = await login_as(setup_app, "did:plc:owner")
    await make_community(setup_app, COMMUNITY)
    await setup_app.shutdown()
    del os.environ["COMMONROOM_EXTRA_PLUGINS"]

    daemon = Daemon(config_path, port, tmp_path / "daemon.log")
    client = Client(f"http://127.0.0.1:{port}")
    receiver = None
    try:
        await daemon.start()
        key = (await register_app(client, session))["apiKey"]
        resp = await client.post("/api/v1/webhooks", api_key=key, json={
            "url": f"http://127.0.0.1:{receiver_port}/hook", "events": ["member.joined"]})
        assert resp.status == 201, resp.text

        # 1. The receiver is down: 1,000 events pile up; the daemon dies.
        made = await client.post("/test/events", json={"type": "member.joined",
                                                       "communityDid": COMMUNITY, "count": 1000})
        assert made.status == 201
        event_ids = set(made.json()["eventIds"])
        assert len(event_ids) == 1000
        await asyncio.sleep(0.5)
        daemon.kill()

        # 2. Receiver up, daemon restarted: killed again in the middle of sending.
        receiver = start_receiver(port=receiver_port)
        await daemon.start()
        await wait_until(lambda: len(receiver.requests) >= 100, timeout=30, what="100 deliveries")
        daemon.kill()
        assert len(set(receiver.ids())) < 1000, "everything was sent before the kill; test is moot"

        # 3. Restarted once more: every event arrives at least once.
        await daemon.start()
        await wait_until(lambda: set(receiver.ids()) >= event_ids, timeout=60,
                         what="all 1,000 events")
        assert set(receiver.ids()) == event_ids
    finally:
        client.close()
        daemon.stop()
        if receiver is not None:
            receiver.stop()
