"""The communities plugin's own queries that have left `store/` (issue 23, item 2: a
plugin's SQL lives next to its migrations). Each takes a `Reader`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Reader, Row


async def active_by_handle(db: "Reader", handle: str) -> "Row | None":
    """The active community with `handle` (lower-case, as indexed), the newest if a handle
    was reused."""
    return await db.fetchone(
        "SELECT * FROM communities WHERE handle = ? AND state = 'active' ORDER BY id DESC LIMIT 1", (handle,))
