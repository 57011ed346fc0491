"""Upgrading (docs/operations.md, "Upgrading"), with the real command in processes of its own:
`migrate --dry-run` lists what would run and changes nothing; a failing migration is named,
exits non-zero and leaves the database byte for byte as it was; a database migrated by a newer
Commonroom is refused, naming the version that wrote it."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from daemon import __version__
from tests.conftest import REPO, TEST_SECRET_KEY

BROKEN = "tests.plugin_broken_migration:plugin"


def run(config: Path, *args: str, plugins: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    if plugins:
        env["COMMONROOM_EXTRA_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def migrated(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "state"
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{state_dir: {state}, pre_migration_backups: 0}}\nsecret_key: '{TEST_SECRET_KEY}'\n")
    done = run(config, "migrate")
    assert done.returncode == 0, done.stderr
    database = next(state.glob("*.sqlite3"))
    return config, database


def test_a_dry_run_lists_what_would_run_and_changes_nothing(migrated: tuple[Path, Path], tmp_path: Path) -> None:
    config, database = migrated
    before = digest(database)
    done = run(config, "migrate", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"last migrated by Commonroom {__version__}; 0 migration(s) would be applied" in done.stdout
    pending = run(config, "migrate", "--dry-run", plugins=BROKEN)
    assert pending.returncode == 0, pending.stderr
    assert "1 migration(s) would be applied:" in pending.stdout and "brokenmig/0001_half_done" in pending.stdout
    assert digest(database) == before
    fresh = tmp_path / "fresh.yaml"
    fresh.write_text(f"storage: {{state_dir: {tmp_path / 'none'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n")
    assert "does not exist" in run(fresh, "migrate", "--dry-run").stdout
    assert not list((tmp_path / "none").glob("*.sqlite3"))


@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_a_failing_migration_is_named_and_leaves_the_database_as_it_was(migrated: tuple[Path, Path],
                                                                       command: str) -> None:
    config, database = migrated
    before = digest(database)
    done = run(config, command, plugins=BROKEN)
    assert done.returncode == 4, (done.returncode, done.stderr)
    assert "migration brokenmig/0001_half_done failed" in done.stderr
    assert "no such table: brokenmig_nowhere" in done.stderr
    assert digest(database) == before
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'brokenmig_widgets'").fetchone() == (0,)


def test_a_database_from_a_newer_commonroom_is_refused_naming_that_version(migrated: tuple[Path, Path]) -> None:
    config, database = migrated
    with sqlite3.connect(database) as conn:  # as Commonroom 9.1.0 would leave it
        conn.execute("INSERT INTO schema_migrations (component, version, name, checksum) "
                     "VALUES ('core', 9999, 'from_the_future', 'x')")
        conn.execute("INSERT INTO schema_writers (version, first_at) VALUES ('9.1.0', '2099-01-01T00:00:00.000Z')")
    with sqlite3.connect(database) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the file whose bytes are compared
    before = digest(database)
    for command in ("serve", "migrate"):
        done = run(config, command)
        assert done.returncode == 3, (command, done.stderr)
        assert "schema version 9999 of 'core'" in done.stderr and "it was migrated by Commonroom 9.1.0" in done.stderr
    assert digest(database) == before
