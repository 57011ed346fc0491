"""Writing to the logged-in user's own repository with their OAuth grant.

    repo = await user_repo(app, handler.principal)
    ref = await repo.create_record(f"{ns}.membership", record)   # {"uri", "cid"}
    await repo.delete_record(f"{ns}.membership", rkey)

Requests go to the user's PDS with ``Authorization: DPoP <token>`` and a proof bound to
the token (``ath``) and the PDS's current nonce. Errors: 403 ``scope_missing`` when the
grant does not cover the collection, 401 when the login has ended, 502 when the PDS fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from daemon.plugin import ApiError, Principal
from plugins.oauth.grants import Grant, oauth_state

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

WRITE_ACTIONS = ("create", "update", "delete")


def scope_allows(scope: str, collection: str, action: str) -> bool:
    """Whether a granted scope string lets us `action` records of `collection`.

    Understands `transition:generic` (full repo access) and the granular
    `repo:<collection>[?action=...]` / `repo?collection=...&action=...` forms, with `*`."""
    for token in scope.split():
        if token == "transition:generic":
            return True
        if not token.startswith("repo"):
            continue
        rest = token[len("repo"):]
        if rest.startswith(":"):
            rest = rest[1:]
        elif not rest.startswith("?"):
            continue
        target, _, query = rest.partition("?")
        params = parse_qs(query)
        collections = [target] if target else params.get("collection", [])
        actions = params.get("action", list(WRITE_ACTIONS))
        if any(c in ("*", collection) for c in collections) and action in actions:
            return True
    return False


@dataclass
class UserRepo:
    app: "Application"
    session_id: str
    did: str

    async def _grant(self, collection: str, actions: tuple[str, ...]) -> Grant:
        grant = await oauth_state(self.app).grants.fresh(self.session_id)
        if grant is None:
            raise ApiError(401, "session_expired", "The session has ended; log in again.")
        for action in actions:
            if not scope_allows(grant.scope, collection, action):
                raise ApiError(403, "scope_missing",
                               f"Your login does not allow this service to {action} {collection} "
                               "records in your repository; log in again and approve the "
                               "requested permissions.")
        return grant

    async def _write(self, nsid: str, collection: str, actions: tuple[str, ...],
                     body: dict[str, Any]) -> dict[str, Any]:
        grant = await self._grant(collection, actions)
        _, resp = await oauth_state(self.app).grants.pds_request(grant, "POST", nsid, json=body)
        try:
            payload = resp.json()
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        if resp.status_code == 200:
            return payload
        error = str(payload.get("error") or "")
        if resp.status_code == 403 or error in ("InsufficientScope", "ScopeMissingError"):
            raise ApiError(403, "scope_missing",
                           f"Your PDS refused: {payload.get('message') or error or 'insufficient scope'}.")
        if resp.status_code == 401:
            raise ApiError(401, "session_expired", "Your PDS no longer accepts this login; log in again.")
        raise ApiError(502, "pds_error",
                       f"Your PDS answered {resp.status_code} to {nsid}: "
                       f"{payload.get('message') or error or resp.text[:200]}")

    async def create_record(self, collection: str, record: dict[str, Any],
                            rkey: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"repo": self.did, "collection": collection, "record": record}
        if rkey is not None:
            body["rkey"] = rkey
        out = await self._write("com.atproto.repo.createRecord", collection, ("create",), body)
        return {"uri": out.get("uri"), "cid": out.get("cid")}

    async def put_record(self, collection: str, rkey: str, record: dict[str, Any]) -> dict[str, Any]:
        body = {"repo": self.did, "collection": collection, "rkey": rkey, "record": record}
        # putRecord creates the record when it is missing: a granular scope must allow both.
        out = await self._write("com.atproto.repo.putRecord", collection, ("create", "update"), body)
        return {"uri": out.get("uri"), "cid": out.get("cid")}

    async def delete_record(self, collection: str, rkey: str) -> None:
        await self._write("com.atproto.repo.deleteRecord", collection, ("delete",),
                          {"repo": self.did, "collection": collection, "rkey": rkey})


async def user_repo(app: "Application", principal: Principal | None) -> UserRepo:
    """The repository of the session's user, written with the session's OAuth grant."""
    if principal is None or principal.kind != "session" or not principal.session_id or not principal.did:
        raise ApiError(403, "user_session_required",
                       "Writing to a user's repository needs that user's browser session.")
    grant = await oauth_state(app).grants.load(principal.session_id)
    if grant is None:
        raise ApiError(403, "oauth_grant_missing",
                       "This session was not created through an OAuth login, so it cannot write "
                       "to the user's repository; log in again.")
    return UserRepo(app, principal.session_id, principal.did)
