"""The primary's replication heartbeat (one row), read by followers to tell their lag."""

from __future__ import annotations

from pathlib import Path

from store.db import Reader, Transaction

MIGRATIONS = Path(__file__).parent / "migrations_replication"


async def beat_tx(tx: Transaction, now: float) -> None:
    await tx.execute("INSERT INTO replication_heartbeat (id, at) VALUES (1, ?) "
                     "ON CONFLICT (id) DO UPDATE SET at = excluded.at", (now,))


async def last_beat(db: Reader) -> float | None:
    row = await db.fetchone("SELECT at FROM replication_heartbeat WHERE id = 1")
    return None if row is None else row["at"]
