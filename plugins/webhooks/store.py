"""Webhooks, their subscriptions and the durable delivery queue."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from daemon.plugin import Reader, Row, Transaction

# ------------------------------------------------------------------ webhooks


async def count_for_app_tx(tx: Transaction, app_id: str) -> int:
    return await tx.fetchval("SELECT COUNT(*) FROM webhooks WHERE app_id = ?", (app_id,))


async def insert_webhook_tx(tx: Transaction, *, webhook_id: str, app_id: str, url: str,
                            community_did: str | None, secret_sealed: str, events: Sequence[str],
                            now: str, concurrency: int = 1) -> None:
    await tx.execute(
        "INSERT INTO webhooks (id, app_id, url, community_did, secret_sealed, concurrency, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (webhook_id, app_id, url, community_did, secret_sealed, concurrency, now, now))
    await set_events_tx(tx, webhook_id, events)


async def set_events_tx(tx: Transaction, webhook_id: str, events: Sequence[str]) -> None:
    await tx.execute("DELETE FROM webhook_events WHERE webhook_id = ?", (webhook_id,))
    await tx.executemany("INSERT INTO webhook_events (event_type, webhook_id) VALUES (?, ?)",
                         [(e, webhook_id) for e in events])


_WEBHOOK_COLUMNS = (
    "w.*, (SELECT active FROM apps WHERE id = w.app_id) AS app_active, "
    "(SELECT json_group_array(event_type) FROM "
    "(SELECT event_type FROM webhook_events WHERE webhook_id = w.id ORDER BY event_type)) AS events_json")


async def get_webhook(db: Reader, webhook_id: str) -> Row | None:
    return await db.fetchone(f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks w WHERE w.id = ?", (webhook_id,))


async def list_webhooks(db: Reader, app_id: str, limit: int,
                        after: tuple[str, str] | None) -> list[Row]:
    if after is None:
        return await db.fetchall(
            f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks w WHERE w.app_id = ? "
            "ORDER BY w.created_at, w.id LIMIT ?", (app_id, limit))
    return await db.fetchall(
        f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks w WHERE w.app_id = ? AND (w.created_at, w.id) > (?, ?) "
        "ORDER BY w.created_at, w.id LIMIT ?", (app_id, after[0], after[1], limit))


async def update_webhook_tx(tx: Transaction, webhook_id: str, now: str, **fields: Any) -> None:
    allowed = {"url", "community_did", "concurrency", "active", "disabled_reason", "disabled_at", "failed_streak",
               "secret_sealed", "previous_secret_sealed", "previous_secret_until", "secret_rotated_at"}
    assert set(fields) <= allowed, fields
    if not fields:
        return
    assignments = ", ".join(f"{k} = ?" for k in fields)
    await tx.execute(f"UPDATE webhooks SET {assignments}, updated_at = ? WHERE id = ?",
                     (*fields.values(), now, webhook_id))


async def delete_webhook_tx(tx: Transaction, webhook_id: str) -> None:
    await tx.execute("DELETE FROM webhooks WHERE id = ?", (webhook_id,))


async def disable_webhook_tx(tx: Transaction, webhook_id: str, reason: str, now: str) -> None:
    await tx.execute(
        "UPDATE webhooks SET active = 0, disabled_reason = ?, disabled_at = ?, updated_at = ? "
        "WHERE id = ? AND active = 1", (reason, now, now, webhook_id))


# ------------------------------------------------------------------ fan-out


async def subscribed_webhooks_tx(tx: Transaction, event_type: str,
                                 community_did: str | None) -> list[Row]:
    """Active webhooks of active apps subscribed to `event_type`, unscoped or scoped to
    `community_did`."""
    return await tx.fetchall(
        "SELECT w.id, w.app_id FROM webhook_events e "
        "JOIN webhooks w ON w.id = e.webhook_id JOIN apps a ON a.id = w.app_id "
        "WHERE e.event_type = ? AND w.active = 1 AND a.active = 1 "
        "AND (w.community_did IS NULL OR w.community_did IS ?) ORDER BY w.id",
        (event_type, community_did))


async def enqueue_tx(tx: Transaction, rows: Iterable[tuple[str, str, bool]], next_attempt_at: float,
                     now: str) -> None:
    """Queue deliveries: `rows` are (webhook_id, event_id, hide_people: send the data
    without the keys that name a person)."""
    await tx.executemany(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at, hide_people) "
        "VALUES (?, ?, ?, ?, ?)", [(w, e, next_attempt_at, now, 1 if hide else 0) for w, e, hide in rows])


async def redeliver_tx(tx: Transaction, delivery: Row, next_attempt_at: float, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at, redelivery_of, "
        "hide_people) SELECT ?, ?, ?, ?, ?, hide_people FROM webhook_deliveries WHERE id = ?",
        (delivery["webhook_id"], delivery["event_id"], next_attempt_at, now, delivery["id"], delivery["id"]))
    return cur.lastrowid


# ------------------------------------------------------------------ the delivery loop


async def pending_heads(db: Reader) -> list[Row]:
    """For every active webhook (of an active app) with pending deliveries: the oldest
    one's due time."""
    return await db.fetchall(
        "SELECT h.webhook_id, d.next_attempt_at FROM "
        "(SELECT webhook_id, MIN(id) AS head FROM webhook_deliveries WHERE status = 'pending' "
        " GROUP BY webhook_id) h "
        "JOIN webhook_deliveries d ON d.id = h.head JOIN webhooks w ON w.id = h.webhook_id "
        "JOIN apps a ON a.id = w.app_id WHERE w.active = 1 AND a.active = 1")


async def delivery_target_tx(tx: Transaction, webhook_id: str) -> Row | None:
    """What the delivery loop needs of a webhook (URL, secrets, concurrency), or None if it
    or its app is not active (or it is gone)."""
    return await tx.fetchone(
        "SELECT w.id, w.url, w.concurrency, w.secret_sealed, w.previous_secret_sealed, "
        "w.previous_secret_until FROM webhooks w JOIN apps a ON a.id = w.app_id "
        "WHERE w.id = ? AND w.active = 1 AND a.active = 1", (webhook_id,))


async def pending_batch_tx(tx: Transaction, webhook_id: str, limit: int) -> list[Row]:
    """The webhook's pending deliveries in send order, with their events. Read on the
    writer connection: a reader connection shared by overlapping statements can keep
    an older snapshot, and a stale batch would send delivered events again."""
    return await tx.fetchall(
        "SELECT d.id, d.event_id, d.attempts, d.next_attempt_at, d.first_attempt_at, d.hide_people, "
        "e.type, e.community_did, e.data, e.created_at AS event_created_at "
        "FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
        "WHERE d.webhook_id = ? AND d.status = 'pending' ORDER BY d.id LIMIT ?",
        (webhook_id, limit))


async def mark_delivered_tx(tx: Transaction, webhook_id: str,
                            results: Sequence[tuple[int, int, str, str, str | None]]) -> None:
    """`results`: (delivery id, status code, first attempt at, attempted at, the answer's
    first 2 KB)."""
    await tx.executemany(
        "UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, "
        "status_code = ?, error = NULL, first_attempt_at = COALESCE(first_attempt_at, ?), "
        "last_attempt_at = ?, completed_at = ?, response_body = ? WHERE id = ? AND status = 'pending'",
        [(code, first, at, at, answer, did) for did, code, first, at, answer in results])
    await tx.execute("UPDATE webhooks SET failed_streak = 0 WHERE id = ? AND failed_streak != 0",
                     (webhook_id,))


async def mark_retry_tx(tx: Transaction, delivery_id: int, *, status_code: int | None, error: str,
                        attempted_at: str, next_attempt_at: float, response_body: str | None = None) -> None:
    await tx.execute(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, status_code = ?, error = ?, "
        "first_attempt_at = COALESCE(first_attempt_at, ?), last_attempt_at = ?, next_attempt_at = ?, "
        "response_body = ? WHERE id = ? AND status = 'pending'",
        (status_code, error, attempted_at, attempted_at, next_attempt_at, response_body, delivery_id))


async def mark_failed_tx(tx: Transaction, webhook_id: str, delivery_id: int, *,
                         status_code: int | None, error: str, attempted_at: str,
                         response_body: str | None = None) -> int:
    """Give a delivery up; return the webhook's count of deliveries given up in a row."""
    await tx.execute(
        "UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, status_code = ?, "
        "error = ?, first_attempt_at = COALESCE(first_attempt_at, ?), last_attempt_at = ?, "
        "completed_at = ?, response_body = ? WHERE id = ? AND status = 'pending'",
        (status_code, error, attempted_at, attempted_at, attempted_at, response_body, delivery_id))
    await tx.execute("UPDATE webhooks SET failed_streak = failed_streak + 1 WHERE id = ?", (webhook_id,))
    return await tx.fetchval("SELECT failed_streak FROM webhooks WHERE id = ?", (webhook_id,)) or 0


async def reschedule_pending_tx(tx: Transaction, webhook_id: str, next_attempt_at: float) -> None:
    """Make every pending delivery of a (re-enabled) webhook due at `next_attempt_at`."""
    await tx.execute(
        "UPDATE webhook_deliveries SET next_attempt_at = ? WHERE webhook_id = ? AND status = 'pending'",
        (next_attempt_at, webhook_id))


async def oldest_pending_event_seq(db: Reader) -> int | None:
    """The lowest outbox ``seq`` of an event a pending delivery still has to send."""
    return await db.fetchval(
        "SELECT MIN(e.seq) FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
        "WHERE d.status = 'pending'")


async def prune_completed_tx(tx: Transaction, before: str, limit: int = 5000) -> int:
    cur = await tx.execute(
        "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries "
        "WHERE status != 'pending' AND completed_at < ? LIMIT ?)", (before, limit))
    return cur.rowcount


# ------------------------------------------------------------------ the delivery log


_DELIVERY_COLUMNS = "d.*, e.type AS event_type"


async def delivery_with_event(db: Reader, webhook_id: str, delivery_id: int) -> Row | None:
    """A delivery with its event's fields (`type`, `community_did`, `data`,
    `event_created_at`: what its payload is made of); None if either is gone."""
    return await db.fetchone(
        f"SELECT {_DELIVERY_COLUMNS}, e.type, e.community_did, e.data, e.created_at AS event_created_at "
        "FROM webhook_deliveries d JOIN events e ON e.id = d.event_id WHERE d.webhook_id = ? AND d.id = ?",
        (webhook_id, delivery_id))


async def get_delivery(db: Reader, webhook_id: str, delivery_id: int) -> Row | None:
    return await db.fetchone(
        f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id "
        "WHERE d.webhook_id = ? AND d.id = ?", (webhook_id, delivery_id))


async def list_deliveries(db: Reader, webhook_id: str, limit: int, before_id: int | None,
                          status: str | None = None) -> list[Row]:
    """Newest first."""
    sql = (f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id "
           "WHERE d.webhook_id = ?")
    params: list[Any] = [webhook_id]
    if status is not None:
        sql += " AND d.status = ?"
        params.append(status)
    if before_id is not None:
        sql += " AND d.id < ?"
        params.append(before_id)
    sql += " ORDER BY d.id DESC LIMIT ?"
    params.append(limit)
    return await db.fetchall(sql, params)


async def delivery_counts(db: Reader, webhook_id: str) -> dict[str, int]:
    rows = await db.fetchall(
        "SELECT status, COUNT(*) AS n FROM webhook_deliveries WHERE webhook_id = ? GROUP BY status",
        (webhook_id,))
    return {r["status"]: r["n"] for r in rows}


async def queue_stats(db: Reader) -> tuple[int, str | None]:
    """(pending deliveries, the oldest pending one's created_at) for the metrics."""
    row = await db.fetchone(
        "SELECT q.depth, (SELECT created_at FROM webhook_deliveries WHERE id = q.head) AS oldest FROM "
        "(SELECT COUNT(*) AS depth, MIN(id) AS head FROM webhook_deliveries WHERE status = 'pending') q")
    return (int(row["depth"]), row["oldest"]) if row else (0, None)


async def all_webhooks(db: Reader, app_id: str | None) -> list[Row]:
    """Every webhook (of one app), oldest first, with its pending deliveries (operator listing)."""
    where, params = ("WHERE w.app_id = ?", (app_id,)) if app_id else ("", ())
    return await db.fetchall(
        f"SELECT {_WEBHOOK_COLUMNS}, (SELECT COUNT(*) FROM webhook_deliveries d "
        f"WHERE d.webhook_id = w.id AND d.status = 'pending') AS pending "
        f"FROM webhooks w {where} ORDER BY w.created_at, w.id", params)
