"""Join and leave from a page: the same service calls, in the same order, as the browser
JSON routes (`plugins.communities.web.JoinHandler` / `LeaveHandler`): the user's own
`membership` record is written to (or deleted from) their repo through their OAuth session.

The record key is kept in the same pending write (``membership:<community>:<user>``) as
the JSON route uses, so a retry from either rewrites the same record and the reconciler
treats both alike. These two functions belong in the communities plugin next to its
handlers; until that move, keep them in step with plugins/communities/web.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from daemon.atproto.syntax import new_tid
from daemon.http import Principal
from plugins.communities import records as rec, service
from plugins.communities.service import Actor
from store import communities as communities_store
from store.db import Row


def _rkey_of(uri: str | None) -> str | None:
    return uri.rsplit("/", 1)[-1] if uri and uri.count("/") >= 4 else None


async def join(app: Any, row: Row, principal: Principal) -> tuple[int, dict[str, Any]]:
    """Join (201) or ask to join (202), writing the user's own membership record first."""
    from plugins.oauth.userrepo import user_repo

    user = principal.did
    assert user is not None
    key = f"membership:{row['did']}:{user}"
    collection = rec.nsid(app, "membership")

    async def write_own_record() -> tuple[str | None, str | None]:
        async with app.db.transaction("communities.membership_begin") as tx:
            pending = await communities_store.begin_write_tx(
                tx, key=key, community_did=row["did"], operation="membership.put",
                rkey=new_tid(app.clock), payload={"userDid": user}, now=app.clock.iso_now())
        repo = await user_repo(app, principal)
        out = await service.pds(repo.put_record(
            collection, pending["rkey"], rec.membership(row["did"], app.clock.iso_now())))
        return out.get("uri"), out.get("cid")

    status, result = await service.join(app, row, user, Actor(user, None, proven=True), before_commit=write_own_record)
    async with app.db.transaction("communities.membership_done") as tx:
        await communities_store.finish_write_tx(tx, key)
    return status, result


async def leave(app: Any, row: Row, principal: Principal) -> dict[str, Any]:
    """Leave, or withdraw a request; then, best effort, delete the user's own record."""
    from plugins.oauth.userrepo import user_repo

    user = principal.did
    assert user is not None
    collection = rec.nsid(app, "membership")

    async def delete_own_record(member_or_request: Row) -> None:
        rkey = _rkey_of(member_or_request["membership_uri"])
        if rkey:
            repo = await user_repo(app, principal)
            await asyncio.wait_for(repo.delete_record(collection, rkey),
                                   app.config.atproto.request_timeout_seconds * 2)

    return await service.leave(app, row, user, Actor(user, None, proven=True), after_commit=delete_own_record)
