"""The reports plugin's queries: its own table only (members and records are asked of the
communities and records services). Reads take a `Reader`: ``app.db`` or a transaction."""

from __future__ import annotations

from daemon.plugin import Reader, Row, Transaction


async def insert_tx(tx: Transaction, *, community_did: str, reporter_did: str, subject: str, subject_kind: str,
                    subject_did: str, reason: str, body: str | None, app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO reports (community_did, reporter_did, subject, subject_kind, subject_did, reason, body, "
        "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, reporter_did, subject, subject_kind, subject_did, reason, body, app_id, now))
    return int(cur.lastrowid)


async def get(db: Reader, community_did: str, report_id: int) -> Row | None:
    return await db.fetchone("SELECT * FROM reports WHERE community_did = ? AND id = ?", (community_did, report_id))


async def open_of(db: Reader, community_did: str, reporter_did: str, subject: str) -> Row | None:
    return await db.fetchone(
        "SELECT * FROM reports WHERE community_did = ? AND reporter_did = ? AND subject = ? AND status = 'open'",
        (community_did, reporter_did, subject))


async def made_since(db: Reader, community_did: str, reporter_did: str, since: str) -> list[Row]:
    """The reporter's reports in the community created at or after `since`, oldest first."""
    return await db.fetchall(
        "SELECT created_at FROM reports WHERE community_did = ? AND reporter_did = ? AND created_at >= ? "
        "ORDER BY id", (community_did, reporter_did, since))


async def open_for_subject(db: Reader, community_did: str, subject: str) -> list[Row]:
    return await db.fetchall(
        "SELECT * FROM reports WHERE community_did = ? AND subject = ? AND status = 'open' ORDER BY id",
        (community_did, subject))


async def open_reports(db: Reader, community_did: str, *, limit: int) -> list[Row]:
    """Open reports, oldest first (at most `limit`)."""
    return await db.fetchall(
        "SELECT * FROM reports WHERE community_did = ? AND status = 'open' ORDER BY id LIMIT ?",
        (community_did, limit))


async def resolved(db: Reader, community_did: str, *, limit: int) -> list[Row]:
    return await db.fetchall(
        "SELECT * FROM reports WHERE community_did = ? AND status != 'open' ORDER BY resolved_at DESC, id DESC "
        "LIMIT ?", (community_did, limit))


async def of_reporter(db: Reader, community_did: str, reporter_did: str, *, limit: int) -> list[Row]:
    return await db.fetchall(
        "SELECT * FROM reports WHERE community_did = ? AND reporter_did = ? ORDER BY id DESC LIMIT ?",
        (community_did, reporter_did, limit))


async def all_of_reporter(db: Reader, reporter_did: str, *, limit: int) -> list[Row]:
    return await db.fetchall("SELECT * FROM reports WHERE reporter_did = ? ORDER BY id DESC LIMIT ?",
                             (reporter_did, limit))


async def resolve_tx(tx: Transaction, report_id: int, *, status: str, outcome: str, note: str | None,
                     reviewer_did: str, now: str) -> bool:
    cur = await tx.execute(
        "UPDATE reports SET status = ?, outcome = ?, note = ?, reviewer_did = ?, resolved_at = ? "
        "WHERE id = ? AND status = 'open'", (status, outcome, note, reviewer_did, now, report_id))
    return cur.rowcount == 1


async def prune_settled_tx(tx: Transaction, cutoff: str, limit: int) -> int:
    """Delete at most `limit` settled reports resolved before `cutoff`, oldest first; never
    an open one. How many went."""
    cur = await tx.execute(
        "DELETE FROM reports WHERE id IN (SELECT id FROM reports WHERE status != 'open' AND resolved_at < ? "
        "ORDER BY resolved_at LIMIT ?)", (cutoff, limit))
    return int(cur.rowcount)


#: What of a report travels when its community is handed over (its app does not: apps are
#: registered per instance).
HANDOVER_FIELDS = ("reporter_did", "subject", "subject_kind", "subject_did", "reason", "body", "created_at")


async def open_state(db: Reader, community_did: str) -> list[dict[str, object]]:
    """The community's open reports, oldest first, as a handover bundle carries them."""
    rows = await db.fetchall(
        "SELECT reporter_did, subject, subject_kind, subject_did, reason, body, created_at FROM reports "
        "WHERE community_did = ? AND status = 'open' ORDER BY id", (community_did,))
    return [{k: r[k] for k in HANDOVER_FIELDS} for r in rows]


async def restore_open_tx(tx: Transaction, community_did: str, reports: list[dict[str, object]]) -> list[str]:
    """Insert the open reports a handover bundle carried (with no app); answers what was not
    restored (a malformed entry, or the same reporter's open report of the same subject)."""
    not_restored = []
    for i, entry in enumerate(reports):
        try:
            values = [entry[k] for k in HANDOVER_FIELDS]
        except (KeyError, TypeError):
            not_restored.append(f"open report {i + 1} of the bundle: malformed")
            continue
        cur = await tx.execute(
            "INSERT INTO reports (community_did, reporter_did, subject, subject_kind, subject_did, reason, body, "
            "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?) ON CONFLICT DO NOTHING",
            (community_did, *values))
        if cur.rowcount == 0:
            not_restored.append(f"an open report of {entry['subject']} made {entry['created_at']}: "
                                "the same reporter's report of it is already open here")
    return not_restored
