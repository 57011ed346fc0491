"""Community accounts: the sealed credentials the daemon acts with, and pending creations."""

from __future__ import annotations

from store.db import Reader, Row, Transaction


async def get_account(db: Reader, did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM community_accounts WHERE did = ?", (did,))


async def upsert_account_tx(tx: Transaction, *, did: str, handle: str, pds_url: str, origin: str,
                            password_sealed: str, session_sealed: str | None, now: str) -> None:
    await tx.execute(
        "INSERT INTO community_accounts (did, handle, pds_url, origin, password_sealed, "
        "session_sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (did) DO UPDATE SET handle = excluded.handle, pds_url = excluded.pds_url, "
        "origin = excluded.origin, password_sealed = excluded.password_sealed, "
        "session_sealed = excluded.session_sealed, updated_at = excluded.updated_at",
        (did, handle, pds_url, origin, password_sealed, session_sealed, now, now))


async def update_session_tx(tx: Transaction, did: str, session_sealed: str | None, now: str,
                            password_sealed: str | None = None) -> None:
    """Store a new PDS session (and, on key rotation, the password re-sealed)."""
    if password_sealed is None:
        await tx.execute("UPDATE community_accounts SET session_sealed = ?, updated_at = ? WHERE did = ?",
                         (session_sealed, now, did))
    else:
        await tx.execute(
            "UPDATE community_accounts SET session_sealed = ?, password_sealed = ?, updated_at = ? "
            "WHERE did = ?", (session_sealed, password_sealed, now, did))


async def delete_account_tx(tx: Transaction, did: str) -> bool:
    cur = await tx.execute("DELETE FROM community_accounts WHERE did = ?", (did,))
    return cur.rowcount > 0


async def get_provisioning_tx(tx: Transaction, handle: str) -> Row | None:
    return await tx.fetchone("SELECT * FROM account_provisioning WHERE handle = ?", (handle,))


async def insert_provisioning_tx(tx: Transaction, *, handle: str, pds_url: str, email: str,
                                 password_sealed: str, now: str) -> None:
    await tx.execute(
        "INSERT INTO account_provisioning (handle, pds_url, email, password_sealed, created_at) "
        "VALUES (?, ?, ?, ?, ?)", (handle, pds_url, email, password_sealed, now))


async def delete_provisioning_tx(tx: Transaction, handle: str) -> None:
    await tx.execute("DELETE FROM account_provisioning WHERE handle = ?", (handle,))
