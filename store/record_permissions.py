"""Who may create, update and delete records in each collection of a community (the
records plugin's `record_permissions`, migration 0005_permissions.sql)."""

from __future__ import annotations

from typing import Any, Iterable

from store.db import Row, Transaction


async def rule(reader: Any, community_did: str, collection: str) -> Row | None:
    """The collection's row (None: the defaults). One primary-key lookup."""
    return await reader.fetchone(
        "SELECT create_rule, update_rule, delete_rule FROM record_permissions "
        "WHERE community_did = ? AND collection = ?", (community_did, collection))


async def all_rules(reader: Any, community_did: str) -> list[Row]:
    return await reader.fetchall(
        "SELECT * FROM record_permissions WHERE community_did = ? ORDER BY collection", (community_did,))


async def replace_tx(tx: Transaction, community_did: str,
                     rules: Iterable[tuple[str, str, str, str]]) -> None:
    """Make exactly `rules` [(collection, create, update, delete)] the community's rules."""
    await tx.execute("DELETE FROM record_permissions WHERE community_did = ?", (community_did,))
    await tx.executemany(
        "INSERT INTO record_permissions (community_did, collection, create_rule, update_rule, delete_rule) "
        "VALUES (?, ?, ?, ?, ?)", [(community_did, *r) for r in rules])
