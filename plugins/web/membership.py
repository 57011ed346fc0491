"""Join and leave from a page: the communities service's browser join and leave, the same
calls the browser JSON routes make (`plugins.communities.web`). They write (or delete) the
user's own `membership` record in their repo through their OAuth session, as an intent of
the core's write path, so a crash in between is settled by the reconciler."""

from __future__ import annotations

from typing import Any

from daemon.plugin import Principal, Row


async def join(app: Any, row: Row, principal: Principal) -> tuple[int, dict[str, Any]]:
    """Join (201) or ask to join (202), writing the user's own membership record first."""
    return await app.communities.browser_join(row, principal)


async def leave(app: Any, row: Row, principal: Principal) -> dict[str, Any]:
    """Leave, or withdraw a request; then delete the user's own record."""
    return await app.communities.browser_leave(row, principal)
