"""Queries of the reports about communities (`instance_reports`, migration instance/0005).
Reads take a `Reader`: ``app.db`` or a transaction."""

from __future__ import annotations

from daemon.plugin import Reader, Row, Transaction


async def insert_tx(tx: Transaction, *, community_did: str, community_name: str, community_handle: str,
                    reporter_did: str, reason: str, body: str | None, app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO instance_reports (community_did, community_name, community_handle, reporter_did, reason, body,"
        " app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, community_name, community_handle, reporter_did, reason, body, app_id, now))
    return int(cur.lastrowid)


async def get(db: Reader, report_id: int) -> Row | None:
    return await db.fetchone("SELECT * FROM instance_reports WHERE id = ?", (report_id,))


async def open_of(db: Reader, community_did: str, reporter_did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM instance_reports WHERE community_did = ? AND reporter_did = ?"
                             " AND status = 'open'", (community_did, reporter_did))


async def made_since(db: Reader, reporter_did: str, since: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM instance_reports WHERE reporter_did = ? AND created_at >= ?",
                                 (reporter_did, since)))


async def open_reports(db: Reader, *, limit: int, community_did: str | None = None) -> list[Row]:
    """Open reports, oldest first (of one community, or all)."""
    return await db.fetchall(
        "SELECT * FROM instance_reports WHERE status = 'open' AND (? IS NULL OR community_did = ?)"
        " ORDER BY id LIMIT ?", (community_did, community_did, limit))


async def count_open(db: Reader) -> tuple[int, int]:
    """(open reports, communities they are about)."""
    row = await db.fetchone("SELECT count(*) AS n, count(DISTINCT community_did) AS c FROM instance_reports"
                            " WHERE status = 'open'")
    return (int(row["n"]), int(row["c"])) if row else (0, 0)


async def settled(db: Reader, *, limit: int) -> list[Row]:
    return await db.fetchall("SELECT * FROM instance_reports WHERE status = 'settled' ORDER BY decided_at DESC,"
                             " id DESC LIMIT ?", (limit,))


async def of_reporter(db: Reader, reporter_did: str, *, limit: int) -> list[Row]:
    return await db.fetchall("SELECT * FROM instance_reports WHERE reporter_did = ? ORDER BY id DESC LIMIT ?",
                             (reporter_did, limit))


async def settle_tx(tx: Transaction, report_id: int, *, outcome: str, operator_did: str, now: str) -> bool:
    cur = await tx.execute(
        "UPDATE instance_reports SET status = 'settled', outcome = ?, decided_by = ?, decided_at = ?"
        " WHERE id = ? AND status = 'open'", (outcome, operator_did, now, report_id))
    return cur.rowcount == 1


async def open_counts(db: Reader, *, limit: int = 100) -> dict[str, int]:
    """Communities with open reports about them and how many, the most reported first."""
    rows = await db.fetchall(
        "SELECT community_did, count(*) AS n FROM instance_reports WHERE status = 'open' "
        "GROUP BY community_did ORDER BY n DESC, min(id) LIMIT ?", (limit,))
    return {r["community_did"]: int(r["n"]) for r in rows}
