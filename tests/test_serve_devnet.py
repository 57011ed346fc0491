"""scripts/serve with the local devnet: each start clears what the state directory
remembers of the previous devnet (issue 24), keeping the service's keys; a database the
devnet did not make is moved aside, never deleted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def serve_module():
    spec = importlib.util.spec_from_file_location("serve_with_devnet", REPO / "scripts" / "serve_with_devnet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_previous_devnets_database_is_cleared_and_the_keys_kept(tmp_path):
    serve = serve_module()
    assert serve.clear_previous_devnet(tmp_path, "db.sqlite3") is None
    for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm", "secret_key", "oauth_client_key.json"):
        (tmp_path / name).write_text("x")
    (tmp_path / serve.MARKER).write_text("devnet")
    said = serve.clear_previous_devnet(tmp_path, "db.sqlite3")
    assert said.startswith("cleared ") and "previous local devnet" in said and "\n" not in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oauth_client_key.json", "secret_key"]


def test_a_database_the_devnet_did_not_make_is_moved_aside(tmp_path):
    serve = serve_module()
    (tmp_path / "db.sqlite3").write_text("precious")
    said = serve.clear_previous_devnet(tmp_path, "db.sqlite3")
    assert said.startswith("moved ")
    (aside,) = [p for p in tmp_path.iterdir()]
    assert aside.name.startswith("db.sqlite3.before-devnet-") and aside.read_text() == "precious"


def test_the_devnet_config_lets_webhooks_reach_a_loopback_receiver_without_edits(tmp_path):
    """scripts/serve's derived config: the shipped config.yaml refuses http://127.0.0.1
    (scripts/webhook-receiver), the devnet's accepts it and keeps the operator's entries."""
    import yaml
    from daemon.security.netguard import Guard, TargetRefused

    serve = serve_module()
    raw = yaml.safe_load((REPO / "config.yaml").read_text()) or {}
    receiver = "http://127.0.0.1:9000/"

    def guard(config: dict) -> Guard:
        hooks = config.get("webhooks") or {}
        return Guard(allow_http=bool(hooks.get("allow_http")), allowed_targets=hooks.get("allowed_targets") or [])

    shipped = guard(raw)
    try:
        shipped.parse(receiver)
        refused = shipped.refusal("127.0.0.1")
    except TargetRefused:
        refused = "plain http"
    assert refused, "the shipped config should refuse a loopback receiver"

    derived = serve.devnet_config({**raw, "webhooks": {"allowed_targets": ["10.0.0.0/8"]}}, tmp_path,
                                  "http://127.0.0.1:2582", "http://127.0.0.1:2583")
    devnet = guard(derived)
    devnet.parse(receiver)
    assert devnet.refusal("127.0.0.1") is None
    assert derived["webhooks"]["allowed_targets"] == ["10.0.0.0/8", "127.0.0.0/8"]
    assert derived["atproto"]["pds_url"] == "http://127.0.0.1:2583" and derived["storage"]["state_dir"] == str(tmp_path)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(config: Path):
    """scripts/serve's devnet run (what scripts/serve execs after set-up): the process and
    its printed lines up to the config line, by then the devnet and demo account exist."""
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "serve_with_devnet.py"), str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("config: "):
            return proc, lines
    proc.wait(30)
    raise AssertionError("scripts/serve stopped early:\n" + "\n".join(lines))


def _stop(proc) -> None:
    import signal
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except Exception:
        proc.kill()
        proc.wait(10)
        raise


def _wait_healthy(base: str) -> None:
    import time
    import urllib.request
    deadline = time.monotonic() + 40
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.3)


def _session(pds: str, handle: str, password: str) -> int:
    import json
    import urllib.error
    import urllib.request
    req = urllib.request.Request(pds + "/xrpc/com.atproto.server.createSession", method="POST",
                                 data=json.dumps({"identifier": handle, "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.pds
@pytest.mark.slow
def test_serve_stopped_and_started_again_signs_the_demo_in_and_forgets_the_old_devnets_communities(tmp_path):
    """Issue 24's acceptance: each start prints a demo account whose password works against
    that run's PDS, and a community the previous run indexed is gone (its account is too)."""
    import json
    import re
    import sqlite3
    import subprocess
    import yaml

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    raw = yaml.safe_load((REPO / "config.yaml").read_text()) or {}
    raw["server"] = {**(raw.get("server") or {}), "port": port, "base_url": base}
    raw["storage"] = {**(raw.get("storage") or {}), "state_dir": str(tmp_path / "state")}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    login = re.compile(r"^log in at (\S+) as (\S+) with password (\S+)$")
    pds_line = re.compile(r"^PLC (\S+)\s+PDS (\S+)$")

    def started() -> tuple[subprocess.Popen, str, str, str, list[str]]:
        proc, lines = _start(config)
        [(site, handle, password)] = [m.groups() for m in map(login.match, lines) if m]
        [(_plc, pds)] = [m.groups() for m in map(pds_line.match, lines) if m]
        assert site == base
        _wait_healthy(base)
        return proc, handle, password, pds, lines

    proc, handle, first_password, first_pds, _ = started()
    try:
        assert _session(first_pds, handle, first_password) == 200
    finally:
        _stop(proc)
    # a community the first run indexed (its account lived on the first devnet's PDS)
    db = tmp_path / "state" / raw["storage"]["database"]
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO communities (did, handle, display_name, type, pds_url, account_kind, state, "
                     "creator_did, proof_rkey, created_at, updated_at) VALUES ('did:plc:oldclub', 'old.test', "
                     "'Old club', 'open', ?, 'provisioned', 'active', 'did:plc:olda', 'r', "
                     "'2026-11-26T00:00:00Z', '2026-11-26T00:00:00Z')", (first_pds,))
    conn.close()

    def communities() -> list[dict]:
        """What the operator's `commonroom communities list --json` shows (JSON lines)."""
        derived = tmp_path / "state" / "config.devnet.yaml"
        listed = subprocess.run([str(REPO / ".venv" / "bin" / "commonroom"), "-c", str(derived), "communities",
                                 "list", "--json"], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert listed.returncode == 0, listed.stderr
        return [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]

    assert [c["name"] for c in communities()] == ["Old club"]   # the listing sees it before the restart

    proc, handle2, password, pds, lines = started()
    try:
        assert any(line.startswith("cleared ") and "previous local devnet" in line for line in lines), lines
        assert handle2 == handle and password != first_password
        assert _session(pds, handle2, password) == 200          # the printed password signs the demo in
        assert _session(pds, handle2, first_password) == 401    # the previous run's account is gone
        listed = communities()
        assert listed == [], listed
    finally:
        _stop(proc)
