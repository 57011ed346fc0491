"""scripts/serve with the local devnet: each start clears what the state directory
remembers of the previous devnet (issue 24), keeping the service's keys; a database the
devnet did not make is moved aside, never deleted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
