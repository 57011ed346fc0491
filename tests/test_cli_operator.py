"""Operator commands (docs/operations.md, "Command line"): listings as tables or JSON
lines, redelivery, help for every subcommand anywhere, errors on stderr with a non-zero
exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, TEST_SECRET_KEY
from tests.fixtures_webhooks import LOOPBACK_TARGETS, emit_events, make_app_key, make_community, settle


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return LOOPBACK_TARGETS


def cli(state_dir: Path | None, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "daemon.runtime.main"]
    if state_dir is not None:
        config = state_dir.parent / "cli.yaml"
        config.write_text(f"storage: {{state_dir: {state_dir}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
                          "webhooks: {allow_http: true, allowed_targets: [127.0.0.0/8]}\n")
        command += ["-c", str(config)]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd or REPO, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_every_subcommand_has_help_anywhere(tmp_path: Path) -> None:
    top = cli(None, "--help", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    for name in ("apps", "communities", "webhooks", "backup", "restore", "reindex"):
        assert name in top.stdout
    for args in (("apps", "--help"), ("apps", "list", "--help"), ("webhooks", "redeliver", "--help"),
                 ("communities", "list", "--help"), ("restore", "--help")):
        shown = cli(None, *args, cwd=tmp_path)
        assert shown.returncode == 0 and "usage: commonroom" in shown.stdout, (args, shown.stderr)


async def test_listings_and_redelivery(app: Any, client: Any, state_dir: Path, receiver: Any) -> None:
    created = await make_app_key(app, client, domain="listed.example.com")
    await make_community(app, "did:plc:listedcommunity", creator_app_id=created["appId"])
    rec = receiver([200])
    hook = await client.post("/api/v1/webhooks", api_key=created["apiKey"],
                             json={"url": rec.url, "events": ["member.joined"]})
    assert hook.status == 201, hook.text
    webhook_id = hook.json()["webhookId"]
    await emit_events(app, "member.joined", "did:plc:listedcommunity")
    await settle(app)
    delivered = (await client.get(f"/api/v1/webhooks/{webhook_id}/deliveries",
                                  api_key=created["apiKey"])).json()["deliveries"]
    assert [d["status"] for d in delivered] == ["delivered"]

    apps = cli(state_dir, "apps", "list")
    assert apps.returncode == 0, apps.stderr
    assert created["appId"] in apps.stdout and "listed.example.com" in apps.stdout
    assert apps.stdout.splitlines()[0].split()[:3] == ["appId", "name", "domain"]
    as_json = [json.loads(line) for line in cli(state_dir, "apps", "list", "--json").stdout.splitlines()]
    assert [a["appId"] for a in as_json] == [created["appId"]] and as_json[0]["active"] is True

    communities = cli(state_dir, "communities", "list", "--json")
    assert communities.returncode == 0, communities.stderr
    assert [c["did"] for c in map(json.loads, communities.stdout.splitlines())] == ["did:plc:listedcommunity"]
    assert cli(state_dir, "communities", "list", "--query", "nomatchword").stdout.strip().endswith("(none)")

    hooks = [json.loads(line) for line in cli(state_dir, "webhooks", "list", "--json").stdout.splitlines()]
    assert [(h["webhookId"], h["pending"]) for h in hooks] == [(webhook_id, 0)]

    again = cli(state_dir, "webhooks", "redeliver", webhook_id, str(delivered[0]["deliveryId"]))
    assert again.returncode == 0, again.stderr
    hooks = [json.loads(line) for line in cli(state_dir, "webhooks", "list", "--json").stdout.splitlines()]
    assert hooks[0]["pending"] == 1  # queued for the running daemon

    missing = cli(state_dir, "webhooks", "redeliver", webhook_id, "999999")
    assert missing.returncode == 1 and missing.stdout == "" and "no delivery 999999" in missing.stderr
    unknown = cli(state_dir, "apps", "deactivate", "app_0000000000000000")
    assert unknown.returncode == 1 and unknown.stdout == "" and "no app" in unknown.stderr
