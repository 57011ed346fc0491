"""The domain-event outbox."""

from __future__ import annotations

from typing import Any, Sequence

from store.db import Database, Reader, Row, Transaction


async def insert_event_tx(tx: Transaction, *, event_id: str, type: str, community_did: str | None,
                          app_id: str | None, actor_did: str | None, data_json: str,
                          created_at: str, audience: str = "", people: str = "*") -> int:
    """Record an event; `audience` (who hears of it) and `people` (who of them sees the
    people it names) in the stored form of `daemon.runtime.events.AppSet`."""
    cur = await tx.execute(
        "INSERT INTO events (id, type, community_did, app_id, actor_did, data, created_at, audience, people) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (event_id, type, community_did, app_id, actor_did, data_json, created_at, audience, people))
    return cur.lastrowid


async def get_event(db: Database, event_id: str) -> Row | None:
    return await db.fetchone("SELECT * FROM events WHERE id = ?", (event_id,))


# ------------------------------------------------------------------ the event stream


async def bounds(db: Reader) -> tuple[int, int]:
    """(oldest seq kept, newest seq ever written) in one snapshot; (head + 1, head) when
    the outbox is empty (everything pruned, or nothing written yet)."""
    row = await db.fetchone(
        "SELECT (SELECT MIN(seq) FROM events) AS oldest, COALESCE((SELECT MAX(seq) FROM events), "
        "(SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) AS head")
    assert row is not None
    head = int(row["head"])
    return (int(row["oldest"]) if row["oldest"] is not None else head + 1), head


# `body`: the event as the stream shows it, built by SQLite on the reader thread: the
# webhook body (daemon.runtime.events.Event.payload: type, timestamp, data with
# communityDid added last unless the data has one) after the event id.
_STREAM_COLUMNS = (
    "seq, type, community_did, audience, people, json_object('id', id, 'type', type, 'timestamp', created_at, "
    "'data', CASE WHEN community_did IS NULL OR json_type(data, '$.communityDid') IS NOT NULL "
    "THEN json(data) ELSE json_set(data, '$.communityDid', community_did) END) AS body")


async def stream_after(db: Reader, after: int, upto: int, *, app_id: str | None,
                       kinds: Sequence[str] | None, community_did: str | None,
                       limit: int) -> list[Row]:
    """Up to `limit` events with ``after < seq <= upto`` in commit order that `app_id` may
    hear of (None: every event, whatever its audience: the stream's own fan-out, which
    filters per subscriber), optionally of these `kinds` and this community."""
    sql = f"SELECT {_STREAM_COLUMNS} FROM events WHERE seq > ? AND seq <= ?"
    params: list[Any] = [after, upto]
    if app_id is not None:
        sql += " AND (audience = '*' OR instr(audience, ?) > 0)"
        params.append(f" {app_id} ")
    if kinds:
        sql += f" AND type IN ({','.join('?' * len(kinds))})"
        params.extend(kinds)
    if community_did is not None:
        sql += " AND community_did = ?"
        params.append(community_did)
    sql += " ORDER BY seq LIMIT ?"
    params.append(limit)
    return await db.fetchall(sql, params)


async def prune_tx(tx: Transaction, created_before: str, below_seq: int | None, limit: int) -> int:
    """Delete the oldest events, at most `limit`, up to the first one that is not older
    than `created_before` (ISO 8601) or not below `below_seq`: always a prefix of the
    outbox, so every event after the oldest one kept is still there. The count deleted."""
    rows = await tx.fetchall("SELECT seq, created_at FROM events ORDER BY seq LIMIT ?", (limit,))
    last = None
    for row in rows:
        if row["created_at"] >= created_before or (below_seq is not None and row["seq"] >= below_seq):
            break
        last = row["seq"]
    if last is None:
        return 0
    cur = await tx.execute("DELETE FROM events WHERE seq <= ?", (last,))
    return cur.rowcount
