"""atproto OAuth: login flows in progress and the grant behind each browser session.

Credential columns hold values sealed by the caller (`app.secrets`); this module never
sees a plaintext token."""

from __future__ import annotations

from daemon.plugin import Reader, Row, Transaction

# ------------------------------------------------------------------ flows


async def insert_flow_tx(tx: Transaction, *, state_hash: str, issuer: str, server_meta: str,
                         expected_did: str | None, pds_url: str | None, redirect_uri: str,
                         client_id: str, scope: str, verifier_sealed: str, dpop_key_sealed: str,
                         return_to: str | None, browser_hash: str, now: float,
                         expires_at: float) -> None:
    """`browser_hash`: SHA-256 (hex) of the nonce in the starting browser's flow cookie."""
    await tx.execute(
        "INSERT INTO oauth_flows (state_hash, issuer, server_meta, expected_did, pds_url, "
        "redirect_uri, client_id, scope, verifier_sealed, dpop_key_sealed, return_to, "
        "browser_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (state_hash, issuer, server_meta, expected_did, pds_url, redirect_uri, client_id, scope,
         verifier_sealed, dpop_key_sealed, return_to, browser_hash, now, expires_at))


async def take_flow_tx(tx: Transaction, state_hash: str) -> Row | None:
    """Remove and return the flow: a state can be used once, whatever happens next."""
    return await tx.fetchone("DELETE FROM oauth_flows WHERE state_hash = ? RETURNING *",
                             (state_hash,))


async def delete_expired_flows_tx(tx: Transaction, now: float) -> int:
    cur = await tx.execute("DELETE FROM oauth_flows WHERE expires_at <= ?", (now,))
    return cur.rowcount


# ------------------------------------------------------------------ grants


async def insert_grant_tx(tx: Transaction, *, session_id: str, did: str, issuer: str,
                          server_meta: str, pds_url: str, client_id: str, scope: str,
                          access_token_sealed: str, refresh_token_sealed: str | None,
                          dpop_key_sealed: str, access_expires_at: float, now: float) -> None:
    await tx.execute(
        "INSERT INTO oauth_grants (session_id, did, issuer, server_meta, pds_url, client_id, scope, "
        "access_token_sealed, refresh_token_sealed, dpop_key_sealed, access_expires_at, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, did, issuer, server_meta, pds_url, client_id, scope, access_token_sealed,
         refresh_token_sealed, dpop_key_sealed, access_expires_at, now))


async def get_grant(db: Reader, session_id: str) -> Row | None:
    return await db.fetchone("SELECT * FROM oauth_grants WHERE session_id = ?", (session_id,))


async def update_tokens_tx(tx: Transaction, session_id: str, *, access_token_sealed: str,
                           refresh_token_sealed: str | None, scope: str, access_expires_at: float,
                           now: float) -> None:
    await tx.execute(
        "UPDATE oauth_grants SET access_token_sealed = ?, refresh_token_sealed = ?, scope = ?, "
        "access_expires_at = ?, refreshed_at = ? WHERE session_id = ?",
        (access_token_sealed, refresh_token_sealed, scope, access_expires_at, now, session_id))


async def set_access_expiry_tx(tx: Transaction, session_id: str, access_expires_at: float) -> None:
    await tx.execute("UPDATE oauth_grants SET access_expires_at = ? WHERE session_id = ?",
                     (access_expires_at, session_id))


async def delete_grant_tx(tx: Transaction, session_id: str) -> None:
    await tx.execute("DELETE FROM oauth_grants WHERE session_id = ?", (session_id,))
