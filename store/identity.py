"""The identity cache: handle -> DID and DID -> document, each with an expiry."""

from __future__ import annotations

from typing import Iterable

from store.db import Database, Row, Transaction

_CHUNK = 500  # stays well under SQLite's bound-parameter limit


async def get_handle(db: Database, handle: str, now: float) -> str | None:
    return await db.fetchval(
        "SELECT did FROM identity_handles WHERE handle = ? AND expires_at > ?", (handle, now))


async def get_dids(db: Database, dids: Iterable[str], now: float) -> dict[str, Row]:
    """Unexpired cache rows for `dids`, keyed by DID."""
    wanted = list(dict.fromkeys(dids))
    out: dict[str, Row] = {}
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i:i + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = await db.fetchall(
            f"SELECT did, handle, pds_url, doc, resolved_at, expires_at FROM identity_dids "
            f"WHERE did IN ({marks}) AND expires_at > ?", (*chunk, now))
        out.update((r["did"], r) for r in rows)
    return out


async def put_handle_tx(tx: Transaction, handle: str, did: str, now: float, expires_at: float) -> None:
    await tx.execute(
        "INSERT INTO identity_handles (handle, did, resolved_at, expires_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (handle) DO UPDATE SET did = excluded.did, resolved_at = excluded.resolved_at, "
        "expires_at = excluded.expires_at", (handle, did, now, expires_at))


async def put_did_tx(tx: Transaction, did: str, handle: str | None, pds_url: str | None, doc: str,
                     now: float, expires_at: float) -> None:
    await tx.execute(
        "INSERT INTO identity_dids (did, handle, pds_url, doc, resolved_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (did) DO UPDATE SET handle = excluded.handle, "
        "pds_url = excluded.pds_url, doc = excluded.doc, resolved_at = excluded.resolved_at, "
        "expires_at = excluded.expires_at", (did, handle, pds_url, doc, now, expires_at))


async def forget_tx(tx: Transaction, *, did: str | None = None, handle: str | None = None) -> None:
    """Drop cached entries (e.g. after a handle change was noticed)."""
    if did is not None:
        await tx.execute("DELETE FROM identity_dids WHERE did = ?", (did,))
        await tx.execute("DELETE FROM identity_handles WHERE did = ?", (did,))
    if handle is not None:
        await tx.execute("DELETE FROM identity_handles WHERE handle = ?", (handle,))


async def purge_expired_tx(tx: Transaction, before: float) -> int:
    cur = await tx.execute("DELETE FROM identity_handles WHERE expires_at <= ?", (before,))
    removed = cur.rowcount
    cur = await tx.execute("DELETE FROM identity_dids WHERE expires_at <= ?", (before,))
    return removed + cur.rowcount
