"""Refused admin and moderator actions, in the audit log (docs/communities.md, "Audit of
denials").

A handler method that acts in an admin's or moderator's name is wrapped with
:func:`audit_denials` (API-key routes: once the request has named its acting user,
``ApiBase.acting``) or :func:`audit_browser_denials` (browser routes: the session's user);
a 403 answer is also written to the community's audit log as an entry with the method
attempted, ``outcome: "denied"`` and the error code. The answer itself is unchanged.

So that a flood of refused requests cannot fill the log, the entries are rate limited
with the application's token buckets (``app.ratelimiter``): at most
:data:`PER_ACTOR` entries per acting user, community and action, and :data:`PER_COMMUNITY`
per community, in any :data:`WINDOW_SECONDS`. Refusals past either limit are answered as
usual and only counted in the log line.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable
from urllib.parse import unquote

from daemon.plugin import ApiError
from plugins.communities.steps import Actor, audit_tx

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities")

PER_ACTOR = 10          # denied entries per (community, actor, action) per window
PER_COMMUNITY = 100     # denied entries per community per window, all actors together
WINDOW_SECONDS = 3600.0


async def record(app: "Application", community_did: str, actor: Actor, action: str, code: str,
                 target_did: str | None = None) -> bool:
    """Write one ``denied`` audit entry unless the limits say enough; whether it was written."""
    limiter = app.ratelimiter
    if not limiter.hit(f"audit-denied:{community_did}:{actor.did}:{action}", PER_ACTOR, WINDOW_SECONDS).allowed \
            or not limiter.hit(f"audit-denied:{community_did}", PER_COMMUNITY, WINDOW_SECONDS).allowed:
        log.info("not auditing another denied %s by %s in %s (%s): rate limited",
                 action, actor.did, community_did, code)
        return False
    async with app.db.transaction("communities.denied") as tx:
        await audit_tx(app, tx, community_did, action, actor, target_did,
                       metadata={"outcome": "denied", "code": code})
    return True


def audit_denials(method: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Wrap an ``ApiBase`` handler method: a 403 after the acting user was named is audited
    (see the module docstring). Apply it under ``@operation``."""

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            await method(self, *args, **kwargs)
        except ApiError as exc:
            acted = getattr(self, "acted", None)
            if exc.status == 403 and acted is not None:
                community, actor, action = acted
                try:
                    await record(self.app, community["did"], actor, action, exc.code,
                                 getattr(self, "denied_target", None))
                except Exception as err:  # noqa: BLE001 (the refusal is answered all the same)
                    log.warning("could not audit a denied %s in %s: %r", action, community["did"], err)
            raise
    return wrapper


def audit_browser_denials(action: str, *, target: bool = False) -> Callable[[Any], Any]:
    """The same for a browser route (the session's user acts; the path's first group is the
    community's DID). `action` may name the path's later groups: ``"membership.{1}"``;
    with `target`, the group after the DID is the target's DID. Apply it under ``@operation``."""

    def decorate(method: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        @functools.wraps(method)
        async def wrapper(self: Any, raw_did: str, *args: Any, **kwargs: Any) -> None:
            try:
                await method(self, raw_did, *args, **kwargs)
            except ApiError as exc:
                if exc.status == 403 and exc.code != "csrf_failed":
                    await _record_browser(self, raw_did, args, action, exc.code, target)
                raise
        return wrapper
    return decorate


async def _record_browser(handler: Any, raw_did: str, args: tuple, action: str, code: str, target: bool) -> None:
    from daemon.plugin import is_did
    from plugins.communities import store

    did = unquote(raw_did)
    row = await store.get_community(handler.app.db, did) if is_did(did) else None
    if row is None or row["state"] != "active" or handler.principal is None:
        return
    target_did = unquote(args[0]) if target and args else None
    try:
        await record(handler.app, did, Actor(handler.principal.did, None, proven=True), action.format(None, *args),
                     code, target_did if target_did and is_did(target_did) else None)
    except Exception as err:  # noqa: BLE001 (the refusal is answered all the same)
        log.warning("could not audit a denied %s in %s: %r", action, did, err)
