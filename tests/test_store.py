"""The SQLite store: WAL, transactions, migrations."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.security.secretbox import SecretBox, SecretBoxError
from store.db import Database
from store.migrate import NewerSchemaError, migrate

REPO = Path(__file__).resolve().parent.parent


async def test_database_runs_in_wal_mode_with_foreign_keys(app):
    assert (await app.db.pragma("journal_mode")).lower() == "wal"
    assert await app.db.pragma("foreign_keys") == 1
    assert await app.db.pragma("busy_timeout") == 5000
    assert await app.db.pragma("mmap_size") == app.config.storage.mmap_mb << 20 == 1 << 30


async def test_migrations_are_idempotent(tmp_path):
    db = Database(tmp_path / "x.sqlite3")
    await db.open()
    d = tmp_path / "m"
    d.mkdir()
    (d / "0001_first.sql").write_text("CREATE TABLE t (x INTEGER);")
    (d / "0002_second.sql").write_text("ALTER TABLE t ADD COLUMN y TEXT;")
    assert [m.version for m in await migrate(db, [("demo", d)])] == [1, 2]
    assert await migrate(db, [("demo", d)]) == []
    assert await db.fetchval("SELECT count(*) FROM schema_migrations WHERE component='demo'") == 2
    await db.close()


async def test_failed_migration_leaves_nothing_behind(tmp_path):
    db = Database(tmp_path / "x.sqlite3")
    await db.open()
    d = tmp_path / "m"
    d.mkdir()
    (d / "0001_bad.sql").write_text("CREATE TABLE t (x INTEGER);\nINSERT INTO nope VALUES (1);")
    from store.migrate import MigrationFailed
    with pytest.raises(MigrationFailed) as failed:
        await migrate(db, [("demo", d)])
    assert isinstance(failed.value.cause, sqlite3.OperationalError) and "demo/0001_bad" in str(failed.value)
    assert await db.fetchval("SELECT count(*) FROM sqlite_master WHERE name = 't'") == 0
    assert await db.fetchval("SELECT count(*) FROM schema_migrations") == 0
    await db.close()


async def test_newer_schema_is_refused(tmp_path):
    db = Database(tmp_path / "x.sqlite3")
    await db.open()
    d = tmp_path / "m"
    d.mkdir()
    (d / "0001_first.sql").write_text("CREATE TABLE t (x INTEGER);")
    await migrate(db, [("demo", d)])
    async with db.transaction("test.fake_newer") as tx:
        await tx.execute("INSERT INTO schema_migrations (component, version, name, checksum) "
                         "VALUES ('demo', 7, 'future', 'x')")
    with pytest.raises(NewerSchemaError, match="newer"):
        await migrate(db, [("demo", d)])
    await db.close()


def test_daemon_refuses_newer_database_with_clear_message(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{state_dir: {tmp_path}/st}}\nsecret_key: '{'11' * 32}'\n")
    run = lambda: subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), "migrate"],
                                 capture_output=True, text=True, cwd=REPO, timeout=60)
    first = run()
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(tmp_path / "st" / "commonroom.sqlite3") as conn:
        conn.execute("INSERT INTO schema_migrations (component, version, name, checksum) "
                     "VALUES ('core', 999, 'future', 'x')")
    second = run()
    assert second.returncode == 3
    assert "newer version" in second.stderr and "999" in second.stderr


async def test_transaction_rolls_back_on_error(app):
    with pytest.raises(RuntimeError):
        async with app.db.transaction("test.rollback") as tx:
            await tx.execute("INSERT INTO sessions (id_hash, did, csrf_token, created_at, last_seen_at, "
                             "expires_at) VALUES ('h', 'did:plc:x', 'c', 0, 0, 0)")
            raise RuntimeError("boom")
    assert await app.db.fetchval("SELECT count(*) FROM sessions") == 0


async def test_reads_do_not_wait_behind_a_writer(app):
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_writer():
        async with app.db.transaction("test.slow") as tx:
            await tx.execute("INSERT INTO sessions (id_hash, did, csrf_token, created_at, last_seen_at, "
                             "expires_at) VALUES ('h', 'did:plc:x', 'c', 0, 0, 0)")
            entered.set()
            await release.wait()

    task = asyncio.ensure_future(slow_writer())
    await entered.wait()
    # The write transaction is open and holds the write lock; a read still answers at once,
    # and sees the last committed state.
    count = await asyncio.wait_for(app.db.fetchval("SELECT count(*) FROM sessions"), 2)
    assert count == 0
    release.set()
    await task
    assert await app.db.fetchval("SELECT count(*) FROM sessions") == 1


def test_secretbox_rotation_and_context_binding():
    old, new = b"\x01" * 32, b"\x02" * 32
    sealed = SecretBox(old).seal("s3cret", "apps.key:1")
    rotated = SecretBox(new, previous=(old,))
    assert rotated.open(sealed, "apps.key:1") == "s3cret"
    assert rotated.needs_reseal(sealed)
    with pytest.raises(SecretBoxError):
        rotated.open(sealed, "apps.key:2")
    with pytest.raises(SecretBoxError):
        SecretBox(new).open(sealed, "apps.key:1")


def test_online_backup_copies_a_consistent_database(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{state_dir: {tmp_path}/st}}\nsecret_key: '{'11' * 32}'\n")
    cli = lambda *a: subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), *a],
                                    capture_output=True, text=True, cwd=REPO, timeout=60)
    assert cli("migrate").returncode == 0
    result = cli("backup", str(tmp_path / "copy"))
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(tmp_path / "copy" / "commonroom.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations WHERE component='core'").fetchone()[0] >= 1
    assert cli("backup", str(tmp_path / "copy")).returncode == 1  # never overwrites


async def test_keyed_locks_serialise_per_key_and_forget_idle_keys():
    from daemon.base import KeyedLocks
    locks, order = KeyedLocks(), []

    async def work(key, tag, pause):
        async with locks.hold(key):
            order.append(f"{tag}+")
            await asyncio.sleep(pause)
            order.append(f"{tag}-")

    await asyncio.gather(work("a", "a1", 0.02), work("a", "a2", 0), work("b", "b1", 0))
    assert order.index("a1-") < order.index("a2+")  # same key: one at a time
    assert order.index("b1+") < order.index("a1-")  # other keys do not wait
    assert len(locks) == 0 and not locks.busy("a")


async def test_a_transaction_cancelled_while_beginning_leaves_the_writer_usable(app):
    for _ in range(20):
        task = asyncio.ensure_future(app.db.fetchval("SELECT 1"))  # keep the loop busy
        pending = asyncio.ensure_future(_insert(app, "cancelled"))
        await asyncio.sleep(0)
        pending.cancel()
        await asyncio.gather(task, pending, return_exceptions=True)
        await _insert(app, "after")  # must not fail with "transaction within a transaction"
    assert await app.db.fetchval("SELECT count(*) FROM sessions WHERE did = 'after'") == 20


async def _insert(app, did):
    import secrets
    async with app.db.transaction("test.cancel") as tx:
        await tx.execute("INSERT INTO sessions (id_hash, did, csrf_token, created_at, last_seen_at, "
                         "expires_at) VALUES (?, ?, 'c', 0, 0, 0)", (secrets.token_hex(8), did))


async def test_versioned_cache_forgets_on_our_commits_at_once_and_others_within_the_recheck(app, clock):
    from store.db import VersionedCache
    cache = VersionedCache(clock, recheck_seconds=1.0, max_entries=2)
    version = cache.version(app.db)
    assert version is not None
    cache.put(version, "k", "v")
    assert cache.get(cache.version(app.db), "k") == "v"   # nothing committed: still there

    async with app.db.transaction("test.touch") as tx:   # this daemon commits: gone at once
        await tx.execute("CREATE TABLE IF NOT EXISTS cache_probe (x)")
    assert cache.get(cache.version(app.db), "k") is None

    version = cache.version(app.db)
    cache.put(version, "k", "v")
    other = sqlite3.connect(app.config.database_path)   # another process's connection
    other.execute("CREATE TABLE IF NOT EXISTS cache_probe2 (x)")
    other.commit()
    other.close()
    clock.advance(1.0)
    assert cache.get(cache.version(app.db), "k") is None

    # a value read under an older version is never filed under a newer one
    stale = cache.version(app.db)
    async with app.db.transaction("test.touch2") as tx:
        await tx.execute("CREATE TABLE IF NOT EXISTS cache_probe3 (x)")
    fresh = cache.version(app.db)
    cache.put(stale, "k", "old")
    assert cache.get(fresh, "k") is None
    for i in range(5):   # bounded
        cache.put(fresh, i, i)
    assert len(cache) <= 2


async def test_commit_counter_moves_even_if_the_committing_caller_is_cancelled(tmp_path):
    db = Database(tmp_path / "c.sqlite3")
    await db.open()
    try:
        async def write() -> None:
            async with db.transaction("test.cancelled") as tx:
                await tx.execute("CREATE TABLE cancel_probe (x)")
                task.cancel()  # lands on the COMMIT await

        task = asyncio.ensure_future(write())
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if await db.fetchval("SELECT count(*) FROM sqlite_master WHERE name = 'cancel_probe'"):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the COMMIT never landed")
        await asyncio.sleep(0)
        assert db.commits == 1
    finally:
        await db.close()


async def test_a_task_holding_a_key_holds_it_again_without_waiting():
    from daemon.base import KeyedLocks
    locks = KeyedLocks()
    async with locks.hold("a"):
        async with asyncio.timeout(1):
            async with locks.hold("a"):  # the same task: no deadlock
                assert locks.busy("a")
        assert locks.busy("a")
    assert len(locks) == 0 and not locks.busy("a")


async def test_cached_point_reads_are_served_from_memory_until_any_commit(app):
    """`fetchone_now(..., cached=True)` (membership/check's read): a repeated read is the
    cached row itself, and a commit of this daemon makes the very next read see it; another
    process's commit is seen at the next data-version recheck (at most a second)."""
    db = app.db
    async with db.transaction("test.point") as tx:
        await tx.execute("CREATE TABLE IF NOT EXISTS point_probe (k TEXT PRIMARY KEY, v TEXT)")
        await tx.execute("INSERT INTO point_probe VALUES ('a', 'one')")
    sql = "SELECT v FROM point_probe WHERE k = ?"
    first = await db.fetchone_now(sql, ("a",), cached=True)
    assert first["v"] == "one"
    assert await db.fetchone_now(sql, ("a",), cached=True) is first      # from memory
    assert await db.fetchone_now(sql, ("zz",), cached=True) is None       # "no row" is cached too
    assert await db.fetchone_now(sql, ("zz",), cached=True) is None

    async with db.transaction("test.point2") as tx:                      # our write: seen at once
        await tx.execute("UPDATE point_probe SET v = 'two' WHERE k = 'a'")
        await tx.execute("INSERT INTO point_probe VALUES ('zz', 'new')")
        # inside a transaction, `cached` is ignored: the transaction sees its own writes
        assert (await tx.fetchone_now(sql, ("zz",), cached=True))["v"] == "new"
    assert (await db.fetchone_now(sql, ("a",), cached=True))["v"] == "two"
    assert (await db.fetchone_now(sql, ("zz",), cached=True))["v"] == "new"

    other = sqlite3.connect(app.config.database_path)                    # another process
    other.execute("UPDATE point_probe SET v = 'three' WHERE k = 'a'")
    other.commit()
    other.close()
    db._point_cache._next_check = float("-inf")                         # the recheck is due
    assert (await db.fetchone_now(sql, ("a",), cached=True))["v"] == "three"


async def test_a_primary_maps_its_reads_and_sees_every_write_through_the_mapping(tmp_path):
    """`storage.mmap_mb`: a primary's read connections (the loop thread's and the reader
    threads') map the file; a follower's copy, which Litestream writes behind SQLite's back,
    never is. Reads through the mapping see the file grow, change and shrink: this daemon's
    commits at once, and another process's checkpointed into the file itself or vacuumed."""
    path = tmp_path / "m.sqlite3"
    db = Database(path, mmap_bytes=64 << 20)
    await db.open()
    try:
        assert await db.pragma("mmap_size") == 64 << 20                       # a reader thread
        assert db._now.execute("PRAGMA mmap_size").fetchone()[0] == 64 << 20   # the loop thread
        async with db.transaction("test.mmap") as tx:
            await tx.execute("CREATE TABLE grow (k INTEGER PRIMARY KEY, v TEXT)")
            await tx.execute("INSERT INTO grow VALUES (1, 'one')")
        sql = "SELECT v FROM grow WHERE k = ?"
        assert (await db.fetchone_now(sql, (1,)))["v"] == "one"
        other = sqlite3.connect(path, isolation_level=None)                     # another process
        other.executemany("INSERT INTO grow VALUES (?, ?)", ((k, "x" * 500) for k in range(2, 20_000)))
        other.execute("UPDATE grow SET v = 'changed' WHERE k = 1")
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")                        # into the file itself
        other.close()
        assert path.stat().st_size > 8 << 20
        assert (await db.fetchone_now(sql, (1,)))["v"] == "changed"
        assert (await db.fetchone_now(sql, (19_999,)))["v"] == "x" * 500
        assert await db.fetchval("SELECT count(*) FROM grow") == 19_999
        big = path.stat().st_size
        other = sqlite3.connect(path, isolation_level=None)       # `commonroom vacuum` shrinks it
        other.execute("DELETE FROM grow WHERE k > 10")
        other.execute("VACUUM")
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        other.close()
        assert path.stat().st_size < big // 4
        assert (await db.fetchone_now(sql, (1,)))["v"] == "changed"
        assert await db.fetchone_now(sql, (19_999,)) is None
        assert await db.fetchval("SELECT count(*) FROM grow") == 10
    finally:
        await db.close()

    unmapped = Database(path, mmap_bytes=0)
    await unmapped.open()
    assert await unmapped.pragma("mmap_size") == 0
    await unmapped.close()
    follower = Database(path, read_only=True, mmap_bytes=64 << 20)
    await follower.open()
    try:
        assert await follower.pragma("mmap_size") == 0
        assert follower._now.execute("PRAGMA mmap_size").fetchone()[0] == 0
        assert await follower.fetchval("SELECT count(*) FROM grow") == 10
    finally:
        await follower.close()


@pytest.mark.parametrize("mmap_mb", [0, 8])
async def test_the_database_the_daemon_opens_maps_what_storage_mmap_mb_says(tmp_path, mmap_mb):
    from daemon.runtime.config import Config
    from daemon.runtime.replication import open_database
    config = Config.from_mapping({"storage": {"state_dir": str(tmp_path), "mmap_mb": mmap_mb}}, base_dir=tmp_path)
    db = open_database(config)
    await db.open()
    try:
        assert await db.pragma("mmap_size") == mmap_mb << 20
        assert db._now.execute("PRAGMA mmap_size").fetchone()[0] == mmap_mb << 20
    finally:
        await db.close()
