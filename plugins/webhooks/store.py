"""The webhooks plugin's registration and listing queries: webhooks, their subscriptions
(`webhook_events`) and the delivery log the API and the operator read. The delivery queue's
own queries (fan-out, the delivery loop) live with the queue, in `delivery.py`."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from daemon.plugin import Reader, Row, Transaction
from daemon.plugin.storage import narrowed

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
    return await db.fetchall(*narrowed(
        f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id "
        "WHERE d.webhook_id = ?", [webhook_id],
        {"d.status = ?": status, "d.id < ?": before_id}, "ORDER BY d.id DESC LIMIT ?", limit))


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


async def failing_count(db: Reader) -> int:
    """Webhooks failing, every app's: disabled by the service, or with deliveries given up in a row."""
    return int(await db.fetchval(
        "SELECT count(*) FROM webhooks WHERE disabled_reason IS NOT NULL OR failed_streak > 0"))
