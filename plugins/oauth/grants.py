"""The OAuth grant behind each browser session: sealed at rest, refreshed before it
expires (one refresh per session at a time), used for the user's own PDS.

A grant that can no longer be refreshed ends its session: the next request gets 401.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx
from joserfc.jwk import ECKey

from daemon.plugin import ApiError, Row, Transaction
from daemon.plugin.atproto import KeyedLocks
from daemon.plugin.security import end_session
from plugins.oauth.client import OAuthClient, OAuthError, ServerMeta, TokenSet, origin_of
from plugins.oauth.config import OAuthConfig
from plugins.oauth.keys import dump_private, load_client_keys, load_private
from plugins.oauth import store as oauth_store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.oauth")

#: How long `GrantManager.forget_then_revoke` waits for the servers' answers, all together.
REVOKE_ALL_SECONDS = 30

# Refresh answers that mean the grant is gone for good (revoked, expired, replayed).
DEAD_GRANT_ERRORS = frozenset({"invalid_grant", "invalid_client", "unauthorized_client",
                               "access_denied"})


@dataclass(frozen=True)
class Grant:
    session_id: str
    did: str
    server: ServerMeta
    pds_url: str
    scope: str
    access_token: str
    refresh_token: str | None
    dpop_key: ECKey
    access_expires_at: float


def _ctx(column: str, session_id: str) -> str:
    return f"oauth_grants.{column}:{session_id}"


class GrantManager:
    def __init__(self, app: "Application", client: OAuthClient, cfg: OAuthConfig) -> None:
        self.app = app
        self.client = client
        self.cfg = cfg
        self._locks = KeyedLocks()

    # ---------------------------------------------------------------- storage

    async def store_tx(self, tx: Transaction, session_id: str, *, server: ServerMeta, pds_url: str,
                       tokens: TokenSet, dpop_key: ECKey) -> None:
        seal = self.app.secrets.seal
        now = self.app.clock.time()
        await oauth_store.insert_grant_tx(
            tx, session_id=session_id, did=tokens.sub, issuer=server.issuer,
            server_meta=server.to_json(), pds_url=pds_url, client_id=self.client.client_id,
            scope=tokens.scope,
            access_token_sealed=seal(tokens.access_token, _ctx("access_token", session_id)),
            refresh_token_sealed=(seal(tokens.refresh_token, _ctx("refresh_token", session_id))
                                  if tokens.refresh_token else None),
            dpop_key_sealed=seal(dump_private(dpop_key), _ctx("dpop_key", session_id)),
            access_expires_at=now + tokens.expires_in, now=now)

    def _open(self, row: Row) -> Grant:
        sid = row["session_id"]
        opened = self.app.secrets.open
        return Grant(
            session_id=sid, did=row["did"], server=ServerMeta.from_json(row["server_meta"]),
            pds_url=row["pds_url"], scope=row["scope"],
            access_token=opened(row["access_token_sealed"], _ctx("access_token", sid)),
            refresh_token=(opened(row["refresh_token_sealed"], _ctx("refresh_token", sid))
                           if row["refresh_token_sealed"] else None),
            dpop_key=load_private(opened(row["dpop_key_sealed"], _ctx("dpop_key", sid))),
            access_expires_at=row["access_expires_at"])

    async def load(self, session_id: str) -> Grant | None:
        row = await oauth_store.get_grant(self.app.db, session_id)
        return None if row is None else self._open(row)

    # ---------------------------------------------------------------- refresh

    def _session_lock(self, session_id: str) -> Any:
        return self._locks.hold(session_id)

    def _expiring(self, grant: Grant) -> bool:
        return grant.access_expires_at - self.cfg.refresh_margin_seconds <= self.app.clock.time()

    async def fresh(self, session_id: str, *, force: bool = False,
                    stale_token: str | None = None) -> Grant | None:
        """The session's grant with an access token that is not about to expire.

        Concurrent callers for one session wait for a single refresh. `force` refreshes
        even if the token looks valid, unless another caller already replaced
        `stale_token`. Returns None if the session has no grant. Raises 401 (and ends the
        session) when the grant cannot be refreshed any more, 502 when the server fails.
        """
        grant = await self.load(session_id)
        if grant is None or not (force or self._expiring(grant)):
            return grant
        async with self._session_lock(session_id):
            grant = await self.load(session_id)  # another request may have refreshed it
            if grant is None:
                return None
            if not self._expiring(grant) and not (force and grant.access_token == stale_token):
                return grant
            return await self._refresh(grant)

    async def _refresh(self, grant: Grant) -> Grant:
        if not grant.refresh_token:
            await self._end(grant.session_id, "the grant has no refresh token")
        try:
            tokens = await self.client.refresh(grant.server, grant.dpop_key, grant.refresh_token or "")
        except OAuthError as exc:
            if exc.error in DEAD_GRANT_ERRORS or exc.status in (400, 401):
                await self._end(grant.session_id, f"refresh refused: {exc}")
            raise ApiError(502, "oauth_refresh_failed",
                           f"Your server at {grant.server.issuer} could not refresh the login: "
                           f"{exc}") from None
        if tokens.sub != grant.did:
            await self._end(grant.session_id, f"refresh answered for {tokens.sub}")
        sid, seal, now = grant.session_id, self.app.secrets.seal, self.app.clock.time()
        # Rotation: the old refresh token is spent; keep the new one (or the old if none came).
        refresh = tokens.refresh_token or grant.refresh_token
        async with self.app.db.transaction("oauth.refresh") as tx:
            await oauth_store.update_tokens_tx(
                tx, sid, access_token_sealed=seal(tokens.access_token, _ctx("access_token", sid)),
                refresh_token_sealed=seal(refresh, _ctx("refresh_token", sid)) if refresh else None,
                scope=tokens.scope, access_expires_at=now + tokens.expires_in, now=now)
        log.info("refreshed the OAuth grant of %s", grant.did)
        return Grant(sid, grant.did, grant.server, grant.pds_url, tokens.scope, tokens.access_token,
                     refresh, grant.dpop_key, now + tokens.expires_in)

    async def _end(self, session_id: str, why: str) -> None:
        log.info("ending a session: %s", why)  # no part of a session id is ever logged
        await end_session(self.app, session_id)
        raise ApiError(401, "session_expired",
                       "Your login at your server has ended or was revoked; log in again.")

    # ---------------------------------------------------------------- using the grant

    async def pds_request(self, grant: Grant, method: str, nsid: str, *,
                          params: dict[str, Any] | None = None,
                          json: Any = None) -> tuple[Grant, httpx.Response]:
        """Call XRPC `nsid` on the user's PDS with the DPoP-bound token; refresh once if the
        PDS says the token expired."""
        url = f"{origin_of(grant.pds_url)}/xrpc/{nsid}"
        for attempt in range(2):
            try:
                resp = await self.client.dpop_request(grant.dpop_key, method, url,
                                                      access_token=grant.access_token,
                                                      params=params, json=json)
            except httpx.HTTPError as exc:
                raise ApiError(502, "pds_unreachable", f"Could not reach your PDS: {exc}") from None
            if resp.status_code == 401 and attempt == 0:
                fresh = await self.fresh(grant.session_id, force=True, stale_token=grant.access_token)
                if fresh is None:
                    raise ApiError(401, "session_expired", "The session has ended; log in again.")
                grant = fresh
                continue
            return grant, resp
        return grant, resp

    async def revoke_and_forget(self, session_id: str) -> bool:
        """Revoke the session's tokens at its authorization server (if it offers
        revocation) and delete the grant. True if the server confirmed."""
        grant = await self.load(session_id)
        if grant is None:
            return False
        revoked = False
        for token in (grant.refresh_token, grant.access_token):
            if token:
                revoked = await self.client.revoke(grant.server, grant.dpop_key, token) or revoked
        async with self.app.db.transaction("oauth.forget") as tx:
            await oauth_store.delete_grant_tx(tx, session_id)
        return revoked

    async def forget_then_revoke(self, session_ids: list[str]) -> int:
        """Delete these sessions' grants at once (one transaction), then revoke their
        tokens at the authorization servers in the background, all at once and within
        `REVOKE_ALL_SECONDS` (best effort: a server that stalls delays nothing). Returns
        how many grants there were."""
        grants = [grant for grant in [await self.load(sid) for sid in session_ids] if grant is not None]
        if not grants:
            return 0
        async with self.app.db.transaction("oauth.forget_all") as tx:
            for grant in grants:
                await oauth_store.delete_grant_tx(tx, grant.session_id)

        async def revoke_all() -> None:
            calls = [self.client.revoke(grant.server, grant.dpop_key, token)
                     for grant in grants for token in (grant.refresh_token, grant.access_token) if token]
            try:
                done = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), REVOKE_ALL_SECONDS)
            except asyncio.TimeoutError:
                log.info("token revocations still unanswered after %d s: given up", REVOKE_ALL_SECONDS)
                return
            failed = sum(1 for result in done if result is not True)
            if failed:
                log.info("%d of %d token revocations were not confirmed", failed, len(done))
        self.app.spawn(revoke_all(), name="oauth.revoke_all")
        return len(grants)


class OAuthState:
    """The plugin's per-application state, ``app.oauth`` (`cr_services`): the OAuth
    client and the grants, built on first use. It is also what other plugins may ask of
    this one, `daemon.runtime.services.OAuthService`."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        self._client: OAuthClient | None = None
        self._grants: GrantManager | None = None

    def _build(self) -> None:
        cfg: OAuthConfig = self.app.config.plugin("oauth")
        keys = load_client_keys(cfg.signing_keys, self.app.config.state_dir)
        self._client = OAuthClient(self.app, cfg, keys)
        self._grants = GrantManager(self.app, self._client, cfg)

    @property
    def client(self) -> OAuthClient:
        if self._client is None:
            self._build()
        assert self._client is not None
        return self._client

    @property
    def grants(self) -> GrantManager:
        if self._grants is None:
            self._build()
        assert self._grants is not None
        return self._grants

    async def sign_out(self, session_id: str) -> bool:
        return await self.grants.revoke_and_forget(session_id)

    async def sign_out_all(self, session_ids: list[str]) -> int:
        return await self.grants.forget_then_revoke(session_ids)


def oauth_state(app: "Application") -> OAuthState:
    """This plugin's state (registered as ``app.oauth``)."""
    return cast(OAuthState, app.oauth)
