"""Numbered SQL migrations, per component (the core and each plugin).

Files are named ``NNNN_description.sql`` and applied in numeric order, once each, each
in its own transaction together with its row in ``schema_migrations``. Landed files are
never edited; a changed checksum is logged as a warning. A database holding a higher
version of a component than this code knows was migrated by a newer Commonroom and is
refused with a clear message rather than run against a schema we do not understand.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from store.db import Database

log = logging.getLogger(__name__)

CORE_MIGRATIONS = Path(__file__).parent / "migrations"
_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")

_BOOTSTRAP = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    component  TEXT NOT NULL,
    version    INTEGER NOT NULL,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (component, version)
);
"""


class NewerSchemaError(Exception):
    """The database was migrated by a newer version of the daemon."""


class MigrationFailed(Exception):
    """A migration failed; it and every later one were not applied (each runs in its own
    transaction, so the database holds what it held before that migration)."""

    def __init__(self, migration: "Migration", cause: BaseException) -> None:
        self.migration, self.cause = migration, cause
        super().__init__(f"migration {migration.component}/{migration.version:04d}_{migration.name} failed: "
                         f"{cause}. The database is as it was before it; earlier migrations of this run "
                         "are applied.")


# Which Commonroom versions migrated the database (so that an older one can say which newer
# one wrote it): recorded after a migration run succeeds, like schema_migrations never edited.
_WRITERS = """
CREATE TABLE IF NOT EXISTS schema_writers (
    version    TEXT PRIMARY KEY,
    first_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
"""


async def writer_version(db: Database) -> str | None:
    """The newest Commonroom version that migrated this database (None before 0.2.0)."""
    if not await db.fetchval("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_writers'"):
        return None
    return await db.fetchval("SELECT version FROM schema_writers ORDER BY first_at DESC, rowid DESC LIMIT 1")


@dataclass(frozen=True)
class Migration:
    component: str
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def discover(component: str, directory: str | Path) -> list[Migration]:
    out = []
    for path in sorted(Path(directory).glob("*.sql")):
        match = _NAME.fullmatch(path.name)
        if not match:
            raise ValueError(f"migration file {path} is not named NNNN_description.sql")
        out.append(Migration(component, int(match.group(1)), match.group(2), path))
    versions = [m.version for m in out]
    if len(set(versions)) != len(versions):
        raise ValueError(f"duplicate migration numbers in {directory}")
    return out


def newest_versions(components: Iterable[tuple[str, str | Path]]) -> dict[str, int]:
    """Each component's newest schema version that this code knows."""
    return {component: max((m.version for m in discover(component, directory)), default=0)
            for component, directory in components}


async def pending(db: Database, components: Iterable[tuple[str, str | Path]], *,
                  version: str | None = None) -> tuple[list[Migration], bool]:
    """The migrations `migrate` would apply, and whether the database holds any applied
    one already (False for a new database). `version`: the running Commonroom's (named in a
    refusal of a newer database)."""
    await db.executescript(_BOOTSTRAP)
    plan = await _plan(db, components, version)
    return plan, bool(await db.fetchval("SELECT COUNT(*) FROM schema_migrations"))


async def unapplied(db: Database, components: Iterable[tuple[str, str | Path]]) -> list[Migration]:
    """The migrations this code knows that the database lacks, read without writing (a
    follower's read-only copy); `NewerSchemaError` for a database migrated by a newer
    Commonroom."""
    if not await db.fetchval("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"):
        return [m for component, directory in components for m in discover(component, directory)]
    return await _plan(db, components)


async def migrate(db: Database, components: Iterable[tuple[str, str | Path]], *,
                  version: str | None = None) -> list[Migration]:
    """Apply pending migrations of every component; return those applied. `version`: the
    Commonroom doing it, recorded once every migration applied (`writer_version`). A failing
    migration raises `MigrationFailed`; it changed nothing."""
    await db.executescript(_BOOTSTRAP)
    plan = await _plan(db, components, version)
    for m in plan:
        try:
            await _apply(db, m)
        except Exception as exc:
            raise MigrationFailed(m, exc) from exc
        log.info("applied migration %s/%04d_%s", m.component, m.version, m.name)
    await db.executescript(_WRITERS)
    if version is not None:
        async with db.transaction("migrate.writer") as tx:
            await tx.execute("INSERT OR IGNORE INTO schema_writers (version) VALUES (?)", (version,))
    return plan


async def _plan(db: Database, components: Iterable[tuple[str, str | Path]],
                version: str | None = None) -> list[Migration]:
    plan: list[Migration] = []
    for component, directory in components:
        known = discover(component, directory)
        rows = await db.fetchall(
            "SELECT version, checksum FROM schema_migrations WHERE component = ?", (component,))
        applied = {r["version"]: r["checksum"] for r in rows}
        newest_known = max((m.version for m in known), default=0)
        if applied and max(applied) > newest_known:
            writer = await writer_version(db)
            by = f"Commonroom {writer}" if writer and writer != version else "a newer version"
            raise NewerSchemaError(
                f"the database {db.path} has schema version {max(applied)} of '{component}', "
                f"but this Commonroom only knows up to {newest_known}: it was migrated by {by}. "
                "Run that version, or restore a backup taken before the upgrade.")
        for m in known:
            if m.version in applied:
                if applied[m.version] != m.checksum:
                    log.warning("migration %s/%04d_%s changed after it was applied",
                                component, m.version, m.name)
                continue
            plan.append(m)
    return plan


async def _apply(db: Database, m: Migration) -> None:
    # executescript commits any open transaction first, so the BEGIN/COMMIT live in the
    # script itself; the bookkeeping row commits atomically with the schema change.
    record = ("INSERT INTO schema_migrations (component, version, name, checksum) "
              f"VALUES ({_quote(m.component)}, {m.version}, {_quote(m.name)}, {_quote(m.checksum)});")
    script = f"BEGIN IMMEDIATE;\n{m.sql}\n;\n{record}\nCOMMIT;"
    try:
        await db.executescript(script)
    except Exception:
        await db.rollback_script()
        raise


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
