"""A test-only plugin whose one migration is broken (tests/test_upgrades.py): it creates a
table and writes a row, then fails."""

from __future__ import annotations

from pathlib import Path

from daemon import hookimpl

HERE = Path(__file__).parent / "plugin_broken_migration_sql"


class BrokenMigrations:
    plugin_name = "brokenmig"

    @hookimpl
    def cr_migrations(self) -> tuple[str, str]:
        return ("brokenmig", str(HERE))


plugin = BrokenMigrations()
