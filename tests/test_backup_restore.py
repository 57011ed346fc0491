"""Complete backups and restores (docs/operations.md, "Backups"): the database and the
generated keys travel together, a restore checks everything before writing, and a restored
service decrypts its stored community credentials."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from daemon.runtime import backup
from daemon.runtime.app import create_app, migration_components, state_files
from store.migrate import newest_versions
from tests.conftest import REPO, build_config
from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.helpers import Client

_, extra_plugins = devnet_module_fixtures()


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    # secret_key unset: the service generates one into the state dir, as a fresh install does.
    return {**communities_config, "secret_key": None}


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


#: The operator's backup key (storage.backup_key): kept off the backups, it signs them.
BACKUP_KEY = "5e" * 32


def _config_file(tmp_path: Path, name: str, backup_key: str | None = BACKUP_KEY) -> Path:
    path = tmp_path / f"{name}.yaml"
    key = f", backup_key: '{backup_key}'" if backup_key else ""
    path.write_text(f"storage: {{state_dir: {tmp_path / name}{key}}}\n")
    return path


def _copy(src: Path, dest: Path) -> Path:
    subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
    return dest


def _reseal(backup_dir: Path) -> None:
    """Recompute every checksum in the manifest, as someone who changed a file would."""
    manifest = json.loads((backup_dir / "manifest.json").read_text())
    for name in list(manifest["files"]):
        path = backup_dir / name
        manifest["files"][name] = {"bytes": path.stat().st_size, "sha256": backup._sha256(path)}
    (backup_dir / "manifest.json").write_text(json.dumps(manifest))


def _rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_backup_holds_the_database_the_generated_key_and_a_manifest(tmp_path: Path) -> None:
    config = _config_file(tmp_path, "one")
    assert _cli(config, "migrate").returncode == 0
    assert _cli(config, "check-config").returncode == 0
    state = tmp_path / "one"
    (state / "secret_key").write_text("ab" * 32 + "\n")  # as the first start generates it
    result = _cli(config, "backup", str(tmp_path / "bk"))
    assert result.returncode == 0, result.stderr
    assert "copying the database" in result.stderr  # progress, on stderr
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"commonroom.sqlite3", "secret_key"}
    assert manifest["secretKey"] == "included" and manifest["schema"]["core"] >= 1
    assert manifest["signature"]["alg"] == "HMAC-SHA256" and manifest["signature"]["key"] == "backup_key"
    assert BACKUP_KEY not in (tmp_path / "bk" / "manifest.json").read_text()
    assert (tmp_path / "bk" / "secret_key").read_text() == "ab" * 32 + "\n"
    assert not (tmp_path / "bk.partial").exists()
    again = _cli(config, "backup", str(tmp_path / "bk"))
    assert again.returncode == 1 and "not an empty directory" in again.stderr  # never overwrites


def test_restore_into_a_fresh_state_dir_and_refusals(tmp_path: Path) -> None:
    source = _config_file(tmp_path, "one")
    assert _cli(source, "migrate").returncode == 0
    (tmp_path / "one" / "secret_key").write_text("cd" * 32 + "\n")
    assert _cli(source, "backup", str(tmp_path / "bk")).returncode == 0

    target = _config_file(tmp_path, "two")
    done = _cli(target, "restore", str(tmp_path / "bk"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "two" / "secret_key").read_text() == "cd" * 32 + "\n"
    assert _rows(tmp_path / "two" / "commonroom.sqlite3", "SELECT component, version FROM schema_migrations") \
        == _rows(tmp_path / "one" / "commonroom.sqlite3", "SELECT component, version FROM schema_migrations")

    # Not over an existing database.
    again = _cli(target, "restore", str(tmp_path / "bk"))
    assert again.returncode == 1 and "fresh state directory" in again.stderr

    # Not from a damaged backup: nothing is written.
    damaged = tmp_path / "damaged"
    subprocess.run(["cp", "-r", str(tmp_path / "bk"), str(damaged)], check=True)
    with (damaged / "secret_key").open("a") as f:
        f.write("x")
    third = _config_file(tmp_path, "three")
    refused = _cli(third, "restore", str(damaged))
    assert refused.returncode == 1 and "checksum" in refused.stderr
    assert not (tmp_path / "three" / "commonroom.sqlite3").exists()

    # Not a backup made by a newer Commonroom.
    newer = tmp_path / "newer"
    subprocess.run(["cp", "-r", str(tmp_path / "bk"), str(newer)], check=True)
    with sqlite3.connect(newer / "commonroom.sqlite3") as conn:
        conn.execute("INSERT INTO schema_migrations (component, version, name, checksum) "
                     "VALUES ('core', 9999, 'future', 'x')")
    _reseal(newer)
    refused = _cli(third, "restore", "--unsigned", str(newer))
    assert refused.returncode == 1 and "newer version" in refused.stderr
    assert not (tmp_path / "three" / "commonroom.sqlite3").exists()


def test_restore_accepts_only_the_database_and_the_known_key_files(tmp_path: Path) -> None:
    source = _config_file(tmp_path, "one")
    assert _cli(source, "migrate").returncode == 0
    assert _cli(source, "backup", str(tmp_path / "bk")).returncode == 0
    target = _config_file(tmp_path, "two")
    # A -wal file beside the database would be replayed into it, past the integrity check;
    # any other name is a file of someone else's. Refused even when the operator says
    # --unsigned, before anything is written.
    for extra in ("commonroom.sqlite3-wal", "commonroom.sqlite3-shm", ".bashrc", "notes.txt"):
        crafted = _copy(tmp_path / "bk", tmp_path / f"crafted-{extra}")
        (crafted / extra).write_bytes(b"\0" * 32)
        manifest = json.loads((crafted / "manifest.json").read_text())
        manifest["files"][extra] = {}
        (crafted / "manifest.json").write_text(json.dumps(manifest))
        _reseal(crafted)
        refused = _cli(target, "restore", "--unsigned", str(crafted))
        assert refused.returncode == 1, refused.stderr
        assert "not a file a Commonroom backup holds" in refused.stderr and extra in refused.stderr
        assert "Traceback" not in refused.stderr
        assert not (tmp_path / "two" / "commonroom.sqlite3").exists()
        assert not (tmp_path / "two" / extra).exists()
    # Nor beside a -wal left from an older database, which SQLite would replay into it.
    (tmp_path / "two").mkdir(exist_ok=True)
    (tmp_path / "two" / "commonroom.sqlite3-wal").write_bytes(b"\0" * 32)
    refused = _cli(target, "restore", str(tmp_path / "bk"))
    assert refused.returncode == 1 and "left from an older database" in refused.stderr, refused.stderr
    assert not (tmp_path / "two" / "commonroom.sqlite3").exists()


def test_a_backup_changed_after_it_was_written_is_refused_unless_unsigned(tmp_path: Path) -> None:
    source = _config_file(tmp_path, "one")
    assert _cli(source, "migrate").returncode == 0
    assert _cli(source, "backup", str(tmp_path / "bk")).returncode == 0
    # Someone swaps the database for another one and recomputes the checksums.
    swapped = _copy(tmp_path / "bk", tmp_path / "swapped")
    with sqlite3.connect(swapped / "commonroom.sqlite3") as conn:
        conn.execute("CREATE TABLE planted (x)")
    _reseal(swapped)
    target = _config_file(tmp_path, "two")
    refused = _cli(target, "restore", str(swapped))
    assert refused.returncode == 1 and "signature does not verify" in refused.stderr, refused.stderr
    assert not (tmp_path / "two" / "commonroom.sqlite3").exists()
    # A stripped signature is no better.
    stripped = _copy(tmp_path / "swapped", tmp_path / "stripped")
    manifest = json.loads((stripped / "manifest.json").read_text())
    del manifest["signature"]
    (stripped / "manifest.json").write_text(json.dumps(manifest))
    refused = _cli(target, "restore", str(stripped))
    assert refused.returncode == 1 and "is not signed" in refused.stderr and "--unsigned" in refused.stderr
    # Nor is another operator's key.
    other = _config_file(tmp_path, "three", backup_key="7a" * 32)
    refused = _cli(other, "restore", str(tmp_path / "bk"))
    assert refused.returncode == 1 and "signature does not verify" in refused.stderr
    # The untouched backup restores; the operator may take a changed one on their word.
    assert _cli(target, "restore", str(tmp_path / "bk")).returncode == 0
    taken = _cli(_config_file(tmp_path, "four"), "restore", "--unsigned", str(swapped))
    assert taken.returncode == 0 and "--unsigned" in taken.stderr, taken.stderr


def test_a_backup_signed_with_the_configured_secret_key_or_none(tmp_path: Path) -> None:
    secret = "c3" * 32
    path = tmp_path / "one.yaml"
    path.write_text(f"storage: {{state_dir: {tmp_path / 'one'}}}\nsecret_key: '{secret}'\n")
    assert _cli(path, "migrate").returncode == 0
    assert _cli(path, "backup", str(tmp_path / "bk")).returncode == 0
    assert json.loads((tmp_path / "bk" / "manifest.json").read_text())["signature"]["key"] == "secret_key"
    # Restored where the same secret_key is configured (as it must be, to open the credentials).
    path2 = tmp_path / "two.yaml"
    path2.write_text(f"storage: {{state_dir: {tmp_path / 'two'}}}\nsecret_key: '{secret}'\n")
    done = _cli(path2, "restore", str(tmp_path / "bk"))
    assert done.returncode == 0 and "signature verified" in done.stderr, done.stderr

    # Without either key the backup is written unsigned, says so, and restores only on --unsigned.
    bare = _config_file(tmp_path, "bare", backup_key=None)
    assert _cli(bare, "migrate").returncode == 0
    written = _cli(bare, "backup", str(tmp_path / "plain"))
    assert written.returncode == 0 and "not signed" in written.stderr
    target = _config_file(tmp_path, "three", backup_key=None)
    refused = _cli(target, "restore", str(tmp_path / "plain"))
    assert refused.returncode == 1 and "--unsigned" in refused.stderr
    assert _cli(target, "restore", "--unsigned", str(tmp_path / "plain")).returncode == 0


def test_restore_refuses_while_a_daemon_holds_the_state_dir(tmp_path: Path) -> None:
    source = _config_file(tmp_path, "one")
    assert _cli(source, "migrate").returncode == 0
    assert _cli(source, "backup", str(tmp_path / "bk")).returncode == 0
    target = _config_file(tmp_path, "two")
    with backup.state_lock(tmp_path / "two", "testing"):  # what `commonroom serve` holds
        refused = _cli(target, "restore", str(tmp_path / "bk"))
    assert refused.returncode == 1 and "in use by a running Commonroom daemon" in refused.stderr
    assert not (tmp_path / "two" / "commonroom.sqlite3").exists()


def test_backup_into_keeps_the_newest(tmp_path: Path) -> None:
    config = _config_file(tmp_path, "one")
    assert _cli(config, "migrate").returncode == 0
    for _ in range(3):
        assert _cli(config, "backup", "--into", str(tmp_path / "daily"), "--keep", "2").returncode == 0
    kept = sorted(p.name for p in (tmp_path / "daily").iterdir())
    assert len(kept) == 2 and all(name.startswith("commonroom-") for name in kept)


def test_a_backup_is_taken_before_migrations_change_an_existing_database(tmp_path: Path) -> None:
    older = tmp_path / "older.yaml"  # an install without the webhooks plugin: its tables are new
    older.write_text(f"storage: {{state_dir: {tmp_path / 'st'}}}\nplugins: {{disabled: [webhooks]}}\n")
    assert _cli(older, "migrate").returncode == 0
    assert not (tmp_path / "st" / "backups").exists()  # a new database has nothing to keep
    upgraded = tmp_path / "upgraded.yaml"
    upgraded.write_text(f"storage: {{state_dir: {tmp_path / 'st'}}}\n")
    result = _cli(upgraded, "migrate")
    assert result.returncode == 0, result.stderr
    (taken,) = list((tmp_path / "st" / "backups").iterdir())
    assert taken.name.startswith("pre-migrate-")
    assert "webhooks" not in json.loads((taken / "manifest.json").read_text())["schema"]
    assert ("webhooks",) in _rows(tmp_path / "st" / "commonroom.sqlite3",
                                  "SELECT DISTINCT component FROM schema_migrations")


@pytest.mark.pds
async def test_a_backup_under_write_load_restores_with_decryptable_credentials(
        app: Any, client: Any, devnet: Any, people: Any, io_loop: Any, tmp_path: Path,
        config_overrides: dict[str, Any]) -> None:
    api = await Api.make(app, client)
    alice = people("alice")
    community = (await api.create(alice, "Backup club"))["did"]
    joiners = [people(f"m{i}") for i in range(6)]

    async def write_load() -> None:
        for person in joiners:
            assert (await api.join(community, person["did"])).status == 201

    load = asyncio.ensure_future(write_load())
    await asyncio.sleep(0.05)
    dest = tmp_path / "bk"
    await asyncio.to_thread(backup.backup, app.config.database_path, app.config.state_dir, dest,
                            declared_files=state_files(app.config, app.pm), secret_key_configured=False)
    await load
    backed_up = set(_rows(dest / "commonroom.sqlite3",
                          f"SELECT member_did FROM members WHERE community_did = '{community}'"))
    assert (alice["did"],) in backed_up

    fresh = tmp_path / "restored"
    await asyncio.to_thread(backup.restore, dest, fresh, app.config.storage.database,
                            newest_versions(migration_components(app.pm)), secret_key_configured=False,
                            declared_files=state_files(app.config, app.pm), keys=[], unsigned=True)
    config, pm = build_config(fresh, config_overrides)
    restored = await create_app(config, pm)
    sock, port = bind_unused_port()
    server = HTTPServer(restored)
    server.add_sockets([sock])
    other = Client(f"http://127.0.0.1:{port}")
    try:
        members = await other.get(api.path(community, "/members"), api_key=api.key, params={"limit": 100})
        assert members.status == 200, members.text
        assert {(m["did"],) for m in members.json()["members"]} == backed_up
        # Writing to the community's repo needs its stored credentials: they decrypt.
        late = people("late")
        joined = await other.post(api.path(community, "/members/join"), api_key=api.key,
                                  json={"userDid": late["did"]})
        assert joined.status == 201, joined.text
    finally:
        other.close()
        server.stop()
        await server.close_all_connections()
        await restored.shutdown()
