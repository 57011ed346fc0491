"""The SQLite store: one writer connection, a few read connections, WAL mode.

All writes go through `Database.transaction(name)`, which serialises writers on one
connection and issues ``BEGIN IMMEDIATE`` so a write transaction never has to be
upgraded half-way. Reads use separate connections and, thanks to WAL, never wait
behind a writer. Functions that must run inside a caller's transaction take the
`Transaction` and end in ``_tx``; a read takes a `Reader`, which both a `Database` (the
read connections) and a `Transaction` (its own connection, seeing its own writes) are, so
each query is written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Protocol, Sequence

import aiosqlite

log = logging.getLogger(__name__)

Row = sqlite3.Row

#: How many rows `Database.fetchone_now(..., cached=True)` keeps: ~2.7 KB each with its key
#: (measured with tracemalloc on membership/check's row; a `sqlite3.Row` carries its
#: cursor's column description), so ~2.7 MB at most; when full, the cache starts afresh.
POINT_CACHE_ENTRIES = 1024
_NO_ROW = object()  # a cached "no such row"

_NOW_BUSY_TIMEOUT_MS = 50

#: How much of the database file a primary's read connections map into memory by default
#: (SQLite's ``mmap_size``; `storage.mmap_mb`): a read then finds its B-tree pages in the
#: kernel's page cache through the mapping instead of copying each one into the connection's
#: own cache with a ``pread``. A check that reads SQLite costs ~3 µs less (13.4 → 10.5 µs in
#: the running server, docs/performance.md), and the connections' private page caches stay
#: nearly empty. The mapped pages are the kernel's page cache, shared and reclaimable: they
#: show as file-backed RSS, not as the process's own memory. Address space only beyond what
#: is read; a file larger than this is read the usual way past it. SQLite remaps when another
#: connection grows or shrinks the file (tests/test_store.py). A follower's copy is never
#: mapped: Litestream writes into it behind SQLite's back (daemon/runtime/replication.py),
#: and a page cut off that way under a mapping would fault instead of failing a read.
READ_MMAP_BYTES = 1 << 30


class ReadOnlyDatabase(RuntimeError):
    """A write was attempted on a database opened read-only (a follower's copy)."""


def _configure(conn: sqlite3.Connection, busy_timeout_ms: int, query_only: bool, mmap_bytes: int = 0) -> None:
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")
    if query_only:
        conn.execute("PRAGMA query_only = ON")
    if mmap_bytes:
        conn.execute(f"PRAGMA mmap_size = {int(mmap_bytes)}")


def _fetch_one(conn: sqlite3.Connection, sql: str, params: Any) -> Row | None:
    cur = conn.execute(sql, params)
    try:
        return cur.fetchone()
    finally:
        cur.close()


def _fetch_all(conn: sqlite3.Connection, sql: str, params: Any) -> list[Row]:
    cur = conn.execute(sql, params)
    try:
        return cur.fetchall()
    finally:
        cur.close()


def _on_reader(fn: Callable[[sqlite3.Connection, str, Any], Any], reader: aiosqlite.Connection,
               sql: str, params: Any) -> Any:
    """Run `fn` on the reader's connection as it is when the call reaches the reader's thread
    (a follower replaces it there, see `Database.reopen_readers`). A follower's copy may
    answer SQLITE_READONLY for a moment while Litestream restores it afresh: one retry."""
    try:
        return fn(reader._conn, sql, params)
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc):
            raise
        time.sleep(0.05)
        return fn(reader._conn, sql, params)


def narrowed(sql: str, params: Sequence[Any], filters: dict[str, Any], tail: str = "",
             *tail_params: Any) -> tuple[str, list[Any]]:
    """A query built from optional filters: `sql` (ending in its WHERE clause) and `params`,
    then `` AND <condition>`` for each condition of `filters` whose value is not None (a
    tuple value gives one parameter per ``?``; an empty tuple counts as None), then `tail`
    (``ORDER BY ... LIMIT ?``) and its parameters.

        sql, params = narrowed("SELECT * FROM my_rows WHERE community_did = ?", [did],
                               {"author_did = ?": author, "id < ?": before_id},
                               "ORDER BY id DESC LIMIT ?", limit)
    """
    parts, values = [sql], list(params)
    for condition, value in filters.items():
        if value is None or value == ():
            continue
        parts.append(f"AND {condition}")
        values.extend(value if isinstance(value, tuple) else (value,))
    if tail:
        parts.append(tail)
    values.extend(tail_params)
    return " ".join(parts), values


class Reader(Protocol):
    """What a read query needs: a `Database` or a `Transaction`."""

    async def fetchone(self, sql: str, params: Sequence[Any] | dict = ()) -> Row | None: ...
    async def fetchall(self, sql: str, params: Sequence[Any] | dict = ()) -> list[Row]: ...
    async def fetchval(self, sql: str, params: Sequence[Any] | dict = ()) -> Any: ...
    async def fetchone_now(self, sql: str, params: Sequence[Any] | dict = (), *,
                           cached: bool = False) -> Row | None:
        """`fetchone` for a lookup through an index; see `Database.fetchone_now`."""


class Transaction:
    """A write transaction in progress; passed to `*_tx` functions, and a `Reader`."""

    def __init__(self, conn: aiosqlite.Connection, name: str) -> None:
        self._conn = conn
        self.name = name
        self._after_commit: list[Callable[[], Any]] = []

    async def execute(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Cursor:
        return await self._conn.execute(sql, params)

    async def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any] | dict = ()) -> Row | None:
        async with self._conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] | dict = ()) -> list[Row]:
        async with self._conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def fetchval(self, sql: str, params: Sequence[Any] | dict = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]

    async def fetchone_now(self, sql: str, params: Sequence[Any] | dict = (), *,
                           cached: bool = False) -> Row | None:
        """`fetchone`: inside a transaction every read goes through its connection (and
        `cached` is ignored: the transaction must see its own writes)."""
        return await self.fetchone(sql, params)

    def after_commit(self, callback: Callable[[], Any]) -> None:
        """Run `callback` (sync, or returning an awaitable) once the transaction commits."""
        self._after_commit.append(callback)


def _create_private(path: Path) -> None:
    """Create a missing database file readable by its owner only (0600), whatever the umask:
    SQLite would create it 0644, and its -wal and -shm files take the database's mode. (Under
    systemd, StateDirectoryMode=0700 guards the directory too.) An existing file keeps its
    mode: the operator may have chosen it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)  # an empty file is a new database to SQLite


class Database:
    """The daemon's SQLite file."""

    def __init__(self, path: str | Path, *, read_connections: int = 2,
                 busy_timeout_ms: int = 5000, read_only: bool = False,
                 autocheckpoint: bool = True, mmap_bytes: int = READ_MMAP_BYTES) -> None:
        """`read_only`: no writer connection, readers opened with SQLite's ``mode=ro`` (a
        follower's Litestream copy); every write raises `ReadOnlyDatabase`.
        `autocheckpoint` False: SQLite never checkpoints the WAL itself
        (``wal_autocheckpoint = 0``), as Litestream requires when it owns checkpoints.
        `mmap_bytes`: how much of the file the read connections map (`READ_MMAP_BYTES`; 0
        reads without a mapping; always 0 for `read_only`)."""
        self.path = Path(path)
        self._mmap_bytes = 0 if read_only else max(0, mmap_bytes)
        self.read_only = read_only
        self._autocheckpoint = autocheckpoint
        self._n_readers = max(1, read_connections)
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: aiosqlite.Connection | None = None
        self._readers: list[aiosqlite.Connection] = []
        self._reader_cycle: Iterable[aiosqlite.Connection] = iter(())
        self._write_lock = asyncio.Lock()
        self._now: sqlite3.Connection | None = None
        #: Commits made through this object so far (see `VersionedCache`). It moves as
        #: soon as a COMMIT has finished, before the transaction's caller resumes.
        self.commits = 0
        #: `fetchone_now(..., cached=True)`'s rows (see there).
        self._point_cache = VersionedCache(time, max_entries=POINT_CACHE_ENTRIES)

    def _committed(self, _: Any = None) -> None:
        self.commits += 1

    async def open(self) -> None:
        if self.read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"no database at {self.path}")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _create_private(self.path)
            self._writer = await aiosqlite.connect(self.path, isolation_level=None)
            await self._writer._execute(_configure, self._writer._conn, self._busy_timeout_ms, False)
            async with self._writer.execute("PRAGMA journal_mode = WAL") as cur:
                mode = (await cur.fetchone())[0]
            if mode.lower() != "wal":
                raise RuntimeError(f"SQLite refused WAL mode for {self.path} (got {mode})")
            if not self._autocheckpoint:
                await self._writer.execute("PRAGMA wal_autocheckpoint = 0")
        self._readers = await self._open_readers()
        self._reader_cycle = itertools.cycle(self._readers)
        # Point reads on the event-loop thread (see fetchone_now).
        self._now = self._connect_sync(_NOW_BUSY_TIMEOUT_MS)

    def _target(self) -> tuple[str | Path, bool]:
        """What sqlite3.connect opens, and whether it is a URI."""
        if self.read_only:
            return f"{self.path.resolve().as_uri()}?mode=ro", True
        return self.path, False

    def _read_mmap(self) -> int:
        """How much of the file a read connection maps (0 for a follower's copy)."""
        return self._mmap_bytes

    def _connect_sync(self, busy_timeout_ms: int) -> sqlite3.Connection:
        target, uri = self._target()
        conn = sqlite3.connect(target, isolation_level=None, uri=uri)
        _configure(conn, busy_timeout_ms, True, self._read_mmap())
        return conn

    async def _open_readers(self) -> list[aiosqlite.Connection]:
        target, uri = self._target()
        readers = []
        for _ in range(self._n_readers):
            conn = await aiosqlite.connect(target, isolation_level=None, uri=uri)
            await conn._execute(_configure, conn._conn, self._busy_timeout_ms, True, self._read_mmap())
            readers.append(conn)
        return readers

    async def reopen_readers(self) -> None:
        """Replace every read connection with a new one (a follower, after Litestream
        changed the file behind SQLite's back: a connection kept open would go on
        answering from the pages it has cached). Reads already queued on an old connection
        finish there first. Counts as a commit, so `VersionedCache` entries are dropped."""
        new_now = self._connect_sync(_NOW_BUSY_TIMEOUT_MS)
        old_now, self._now = self._now, new_now
        self.commits += 1
        if old_now is not None:
            old_now.close()
        # Each reader's connection is replaced on its own thread (a new thread per reopen
        # would cost more than the connection), behind the reads already queued there.
        for reader in self._readers:
            await reader._execute(self._swap_connection, reader)

    def _swap_connection(self, reader: aiosqlite.Connection) -> None:
        target, uri = self._target()
        conn = sqlite3.connect(target, isolation_level=None, uri=uri)
        _configure(conn, self._busy_timeout_ms, True, self._read_mmap())
        old, reader._connection = reader._conn, conn
        old.close()

    async def close(self) -> None:
        if self._now is not None:
            self._now.close()
            self._now = None
        for conn in self._readers:
            await conn.close()
        self._readers = []
        if self._writer is not None:
            async with self._write_lock:
                with contextlib.suppress(Exception):
                    await self._writer.execute("PRAGMA optimize")
                await self._writer.close()
            self._writer = None

    # ---------------------------------------------------------------- writes

    @contextlib.asynccontextmanager
    async def transaction(self, name: str) -> AsyncIterator[Transaction]:
        """A named ``BEGIN IMMEDIATE`` transaction on the writer connection."""
        if self.read_only:
            raise ReadOnlyDatabase(f"{name}: this database is a read-only copy")
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            started = time.perf_counter()
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
            except asyncio.CancelledError:
                # The BEGIN is already queued on the writer's thread and will run; undo it
                # behind it, or the next transaction would find one still open.
                await asyncio.shield(self._rollback_quietly())
                raise
            tx = Transaction(self._writer, name)
            try:
                yield tx
            except BaseException:
                await asyncio.shield(self._rollback_quietly())
                log.debug("tx %s rolled back after %.1f ms", name, (time.perf_counter() - started) * 1e3)
                raise
            # Shielded: a cancelled caller must not leave the lock while COMMIT is pending.
            # The commit counter moves when COMMIT finishes, even if the caller was cancelled.
            commit = asyncio.ensure_future(self._writer.execute("COMMIT"))
            commit.add_done_callback(self._committed)
            await asyncio.shield(commit)
            log.debug("tx %s committed in %.1f ms", name, (time.perf_counter() - started) * 1e3)
        for callback in tx._after_commit:
            try:
                result = callback()
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result
            except Exception:
                log.exception("after-commit callback of tx %s failed", name)

    async def _rollback_quietly(self) -> None:
        assert self._writer is not None
        try:
            await self._writer.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # nothing was open

    async def executescript(self, script: str) -> None:
        """Run a multi-statement script on the writer (migrations only)."""
        if self.read_only:
            raise ReadOnlyDatabase("this database is a read-only copy")
        assert self._writer is not None
        async with self._write_lock:
            try:
                await self._writer.executescript(script)
            finally:
                self._committed()

    async def rollback_script(self) -> None:
        """Roll back what a failed `executescript` left open (executescript itself would
        COMMIT first, so this must be a plain statement)."""
        assert self._writer is not None
        async with self._write_lock:
            if self._writer.in_transaction:
                await self._writer.execute("ROLLBACK")

    # ---------------------------------------------------------------- reads

    def _reader(self) -> aiosqlite.Connection:
        return next(self._reader_cycle)  # type: ignore[call-overload]

    # Each read runs as ONE call on the reader's thread: execute, fetch, close. A cursor
    # left open between two thread hops keeps its read snapshot, and an overlapping read
    # on the same connection would then see data older than a commit that had finished.

    async def fetchone(self, sql: str, params: Sequence[Any] | dict = ()) -> Row | None:
        reader = self._reader()
        return await reader._execute(_on_reader, _fetch_one, reader, sql, params)

    async def fetchall(self, sql: str, params: Sequence[Any] | dict = ()) -> list[Row]:
        reader = self._reader()
        return await reader._execute(_on_reader, _fetch_all, reader, sql, params)

    async def fetchval(self, sql: str, params: Sequence[Any] | dict = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]

    async def fetchone_now(self, sql: str, params: Sequence[Any] | dict = (), *,
                           cached: bool = False) -> Row | None:
        """A read answered synchronously on the event-loop thread.

        For lookups through an index that touch a handful of rows (an API key by hash, a
        membership by primary key): they take microseconds, while a hop to a reader thread
        costs ~200 µs, which dominates hot routes such as membership/check. WAL readers
        never wait for the writer; if the file is briefly locked (WAL recovery), the read
        falls back to a reader thread. Never use this for scans.

        `cached`: the row may come from a small in-memory cache of such reads (at most
        `POINT_CACHE_ENTRIES`, keyed by the query and its parameters), which is never stale
        for this daemon's own writes: it is a `VersionedCache`, emptied as soon as any
        transaction of this daemon commits (before its caller resumes) and filled only with
        rows read after that; a write by another process on the file (the operator CLI) is
        seen within a second (``PRAGMA data_version``). For the hottest read only
        (membership/check): a hit costs a dictionary lookup instead of a query whose B-tree
        pages are often out of the CPU's caches (docs/performance.md). `params` must be a
        tuple or list.
        """
        if cached and not isinstance(params, dict):
            cache = self._point_cache
            version = cache.version(self)
            key = (sql, *params)
            row = cache.get(version, key)
            if row is None:
                row = await self.fetchone_now(sql, params)
                cache.put(version, key, _NO_ROW if row is None else row)
            return None if row is _NO_ROW else row
        if self._now is not None:
            try:
                return self._now.execute(sql, params).fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) and not (
                        self.read_only and "readonly" in str(exc)):
                    raise
        return await self.fetchone(sql, params)

    def data_version_now(self) -> int | None:
        """SQLite's ``PRAGMA data_version`` on the loop-thread connection, or None if it
        cannot be read. It changes whenever another connection commits: this daemon's
        writer, or another process on the same file (the operator CLI)."""
        if self._now is None:
            return None
        try:
            return self._now.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.OperationalError:
            return None

    async def pragma(self, name: str) -> Any:
        return await self.fetchval(f"PRAGMA {name}")


class VersionedCache:
    """A small cache of rows that rarely change (API keys), never stale for this daemon's
    own writes: it is emptied whenever `Database.commits` moves, which happens as soon as
    any transaction of this daemon commits, before its caller resumes. Writes from another
    process on the same file (the operator CLI) are noticed through ``PRAGMA data_version``,
    read at most once per `recheck_seconds` (default 1 s): they count within that time. A
    hit costs two integer comparisons, not a query.

    Use ``version = cache.version(db)``, then ``cache.get(version, key)``; on a miss, read
    the row *after* taking the version and ``cache.put(version, key, value)``. An entry is
    never older than the version it is filed under, so a commit in between only costs a
    miss. Without a readable data_version nothing is cached."""

    def __init__(self, clock: Any, *, recheck_seconds: float = 1.0, max_entries: int = 1024) -> None:
        self._clock = clock
        self._recheck = recheck_seconds
        self._max = max_entries
        self._next_check = float("-inf")
        self._external: int | None = None
        self._version: tuple[int, int] | None = None
        self._entries: dict[Any, Any] = {}

    def version(self, db: Database) -> tuple[int, int] | None:
        now = self._clock.monotonic()
        if now >= self._next_check:
            self._external = db.data_version_now()
            self._next_check = now + self._recheck
        version = None if self._external is None else (db.commits, self._external)
        if version is None or version != self._version:
            self._entries.clear()
            self._version = version
        return version

    def get(self, version: tuple[int, int] | None, key: Any) -> Any:
        if version is None or version != self._version:
            return None
        return self._entries.get(key)

    def put(self, version: tuple[int, int] | None, key: Any, value: Any) -> None:
        if version is None or version != self._version:
            return
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[key] = value

    def __len__(self) -> int:
        return len(self._entries)
