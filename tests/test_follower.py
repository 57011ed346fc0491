"""A follower in process (`server.role: follower`, docs/scaling.md), on a copy of the test
database: it serves reads, sends every write to the primary (307), writes nothing on a read
path, and runs no background writer. tests/test_replication.py runs the real thing with
Litestream."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from commonroom_testing.http import Session
from daemon.security.sessions import hash_sid
from plugins.apikeys.keys import hash_key, new_key

PRIMARY = "https://primary.example.com"
NOW = 1_800_000_000.0  # the FakeClock's start (this module's own, see `clock`)


@pytest.fixture
def clock():
    """A fixed start, so the copy written below is as old as its comments say (the shipped
    fixture starts at the real time)."""
    from daemon.base import FakeClock
    return FakeClock(start=NOW)
KEY = new_key()


@pytest.fixture
def config_overrides(tmp_path: Path) -> dict[str, Any]:
    return {"server": {"role": "follower"}, "metrics": {"allow_from": ["127.0.0.1/32"]},
            "storage": {"database": "primary-only.sqlite3"},  # not there: the follower reads its copy
            "follower": {"replica": "commonroom.sqlite3", "primary_url": PRIMARY},
            "replication": {"url": (tmp_path / "replica").as_uri()}}


@pytest.fixture
def state_dir(tmp_path: Path, template_db: Path) -> Path:
    """The copy, with what the primary had written: an app's key, a session seen 10 minutes
    ago, a heartbeat 2 s ago."""
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(template_db, state / "commonroom.sqlite3")
    conn = sqlite3.connect(state / "commonroom.sqlite3")
    conn.execute("INSERT INTO apps (id, owner_did, name, domain, key_hash, created_at, updated_at) "
                 "VALUES ('app_00000000000000f1', 'did:plc:owner', 'f', 'f.example.com', ?, 'x', 'x')",
                 (hash_key(KEY),))
    conn.execute("INSERT INTO sessions (id_hash, did, handle, csrf_token, created_at, last_seen_at, expires_at) "
                 "VALUES (?, 'did:plc:reader', 'reader.test', 'csrf-token-value', ?, ?, ?)",
                 (hash_sid("the-sid"), NOW - 600, NOW - 600, NOW + 86400))
    conn.execute("INSERT INTO replication_heartbeat (id, at) VALUES (1, ?)", (NOW - 2,))
    conn.commit()
    conn.close()
    return state


SESSION = Session("did:plc:reader", "reader.test", "the-sid", "csrf-token-value")


async def test_a_follower_reads_from_its_copy_and_reports_its_role_and_lag(app: Any, client: Any) -> None:
    health = (await client.get("/health")).json()
    assert health["role"] == "follower" and health["replicaLagSeconds"] == 2.0
    listed = await client.get("/api/v1/communities", api_key=KEY)
    assert listed.status == 200, listed.text
    me = await client.get("/users/me", session=SESSION)
    assert me.status == 200 and me.json()["did"] == "did:plc:reader"
    metrics = await client.get("/metrics")
    assert metrics.status == 200 and b"commonroom_" in metrics.body
    # the session was not touched (the primary's clock keeps its idle timeout)
    row = await app.db.fetchone("SELECT last_seen_at FROM sessions WHERE id_hash = ?", (hash_sid("the-sid"),))
    assert row["last_seen_at"] == NOW - 600


async def test_writes_go_to_the_primary(app: Any, client: Any) -> None:
    created = await client.post("/api/v1/communities", json={"name": "Elsewhere"}, api_key=KEY)
    assert created.status == 307, created.text
    assert created.headers["Location"] == f"{PRIMARY}/api/v1/communities"
    assert created.json()["error"] == "use_primary"
    # membership/check is a POST that only reads: the follower answers it
    check = await client.post("/api/v1/communities/did:plc:nosuchcommunity0000000000/membership/check",
                              json={"userDid": "did:plc:someone"}, api_key=KEY)
    assert check.status != 307
    # a page's form: the browser is sent to the primary, with a page saying so
    page = await client.post("/logout", session=SESSION, body="")
    assert page.status == 307 and page.headers["Location"] == f"{PRIMARY}/logout"
    # the sign-in callback writes the session and talks to the authorization server
    callback = await client.get("/oauth/callback?state=abc&code=def")
    assert callback.status == 307 and callback.headers["Location"] == f"{PRIMARY}/oauth/callback?state=abc&code=def"


async def test_a_follower_runs_no_background_writer_and_cannot_write(app: Any) -> None:
    from store.db import ReadOnlyDatabase
    names = {t.get_name() for t in app._tasks}
    assert "follower.watch" in names
    assert not names & {"sessions.janitor", "writes.reconciler", "webhooks.dispatcher", "replication.heartbeat",
                        "communities.audit_prune", "sync.apply", "sync.read"}, names
    with pytest.raises(ReadOnlyDatabase):
        async with app.db.transaction("test.write"):
            pass
    with pytest.raises(sqlite3.OperationalError):  # mode=ro below query_only
        app.db._now.execute("PRAGMA query_only = OFF")
        app.db._now.execute("DELETE FROM sessions")


async def test_the_follower_notices_litestreams_changes_and_reopens_its_readers(app: Any, state_dir: Path) -> None:
    copy = state_dir / "commonroom.sqlite3"
    before = await app.db.fetchval("SELECT count(*) FROM apps")
    # What Litestream does: write the file behind SQLite's back, then move the -txid file.
    writer = sqlite3.connect(copy)
    writer.execute("INSERT INTO apps (id, owner_did, name, domain, key_hash, created_at, updated_at) "
                   "VALUES ('app_00000000000000f2', 'did:plc:owner', 'g', 'g.example.com', ?, 'x', 'x')",
                   (secrets.token_bytes(32),))
    writer.commit()
    writer.close()
    Path(f"{copy}-txid").write_text("0000000000000002\n")
    assert await app.follower.check() is True
    assert await app.db.fetchval("SELECT count(*) FROM apps") == before + 1
    assert await app.follower.check() is False  # nothing new
    await asyncio.sleep(0)


def test_operator_commands_that_write_are_refused_on_a_follower(tmp_path: Path, template_db: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO, TEST_SECRET_KEY
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(template_db, state / "replica.sqlite3")
    config = tmp_path / "follower.yaml"
    config.write_text(f"server: {{role: follower}}\nstorage: {{state_dir: {state}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
                      f"replication: {{url: '{(tmp_path / 'replica').as_uri()}'}}\n"
                      f"follower: {{primary_url: '{PRIMARY}'}}\n")
    for args in (("migrate",), ("apps", "deactivate", "app_00000000000000f1")):
        done = subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), *args],
                              capture_output=True, text=True, timeout=60, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 2 and "read-only follower" in done.stderr, (args, done.stderr)
