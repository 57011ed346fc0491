"""A community's custom roles, and the roles each member holds (the `roles` and `grants`
columns of `members`). Every function takes a reader that the database and a transaction
both satisfy, or a transaction where it writes."""

from __future__ import annotations

from typing import Any, Iterable

from store.db import Row, Transaction

_HOLDERS_SQL = ("SELECT member_did, roles FROM members WHERE community_did = ? AND roles IS NOT NULL "
                "ORDER BY id")


async def definitions(reader: Any, community_did: str) -> list[Row]:
    """The community's custom roles, by name."""
    return await reader.fetchall(
        "SELECT * FROM community_roles WHERE community_did = ? ORDER BY name", (community_did,))


async def definition(reader: Any, community_did: str, name: str) -> Row | None:
    return await reader.fetchone(
        "SELECT * FROM community_roles WHERE community_did = ? AND name = ?", (community_did, name))


async def put_definition_tx(tx: Transaction, community_did: str, name: str, *, description: str,
                            capabilities_json: str, collections_json: str, now: str) -> None:
    await tx.execute(
        "INSERT INTO community_roles (community_did, name, description, capabilities, collections, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (community_did, name) DO UPDATE "
        "SET description = excluded.description, capabilities = excluded.capabilities, "
        "collections = excluded.collections, updated_at = excluded.updated_at",
        (community_did, name, description, capabilities_json, collections_json, now, now))


async def delete_definition_tx(tx: Transaction, community_did: str, name: str) -> bool:
    cur = await tx.execute("DELETE FROM community_roles WHERE community_did = ? AND name = ?",
                           (community_did, name))
    return cur.rowcount > 0


async def holders(reader: Any, community_did: str) -> list[Row]:
    """(member_did, roles) of every member who holds a role, in join order."""
    return await reader.fetchall(_HOLDERS_SQL, (community_did,))


async def set_member_roles_tx(tx: Transaction, community_did: str,
                              changes: Iterable[tuple[str, str | None, str | None]]) -> None:
    """Set (member_did, roles, grants) of members (space-separated; None: none)."""
    await tx.executemany(
        "UPDATE members SET roles = ?, grants = ? WHERE community_did = ? AND member_did = ?",
        [(roles, grants, community_did, did) for did, roles, grants in changes])
