"""The atproto OAuth client protocol, as a confidential web client (or, for local
development, the atproto loopback client).

Discovery: handle or DID -> the user's PDS -> `/.well-known/oauth-protected-resource` ->
the authorization server -> `/.well-known/oauth-authorization-server` (its `issuer` must
be exactly the server's URL). Then PAR with PKCE S256 (asking for the granular scope, and
for the fallback scope only if the server refuses that), DPoP proofs signed with the
session's own ES256 key (server nonces remembered per origin; one retry on
`use_dpop_nonce`), `private_key_jwt` client assertions, code exchange, refresh with
rotation and revocation. All JOSE goes through joserfc.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import httpx
from joserfc import jwt
from joserfc.jwk import ECKey

from daemon.plugin import ApiError
from daemon.plugin.atproto import resolve_did, resolve_identity
from daemon.plugin.security import RequestRefused
from plugins.oauth.config import OAuthConfig
from plugins.oauth.keys import ClientKeys

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.oauth")

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
CALLBACK_PATH = "/oauth/callback"
METADATA_PATH = "/oauth-client-metadata.json"
JWKS_PATH = "/.well-known/jwks.json"
MAX_METADATA_BYTES = 64 * 1024
MAX_NONCE_ORIGINS = 10_000


class OAuthError(Exception):
    """The authorization server refused a request (`error` is its OAuth error code)."""

    def __init__(self, error: str, description: str = "", status: int = 0) -> None:
        self.error = error
        self.description = description
        self.status = status
        super().__init__(f"{error}: {description}" if description else error)


class ServerRefused(ApiError):
    """The SSRF guard refused to contact a server (it resolves to a non-public address)."""

    def __init__(self, what: str, url: str, reason: str) -> None:
        super().__init__(502, "pds_error",
                         f"The {what} at {url} is not reachable from this service: {reason}.")
        self.reason = reason


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def pkce_pair() -> tuple[str, str]:
    verifier = b64url(secrets.token_bytes(32))
    return verifier, b64url(hashlib.sha256(verifier.encode()).digest())


@dataclass(frozen=True)
class ServerMeta:
    """What we use of an authorization server's metadata."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    par_endpoint: str
    revocation_endpoint: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "ServerMeta":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class LoginTarget:
    """Where a login goes: the server, and whom we expect back (None for a server URL)."""

    server: ServerMeta
    did: str | None
    handle: str | None
    pds_url: str | None
    login_hint: str | None


@dataclass(frozen=True)
class PushedAuthorization:
    """A pushed authorization request: where to send the browser, and the scope asked for."""

    request_uri: str
    scope: str


@dataclass(frozen=True)
class TokenSet:
    access_token: str
    refresh_token: str | None
    expires_in: float
    scope: str
    sub: str


class OAuthClient:
    """One per application (`app.oauth.client`)."""

    def __init__(self, app: "Application", cfg: OAuthConfig, keys: ClientKeys) -> None:
        self.app = app
        self.cfg = cfg
        self.keys = keys
        self.base_url = app.config.server.base_url.rstrip("/")
        #: Asked for first: by default only what joining and leaving need.
        self.scope = " ".join((cfg.scope or default_scope(app.config.atproto.namespace)).split())
        #: Asked for instead when the server refuses `scope` (None: never).
        fallback = " ".join((cfg.fallback_scope or "").split())
        self.fallback_scope = fallback if fallback and fallback != self.scope else None
        # Servers that accepted the granular scope but granted less (no membership
        # permission): their next logins ask for the fallback at once, so a person is not
        # sent round the same login again and again. In memory: a restart forgets it.
        self.granular_ignored: set[str] = set()
        #: Declared in the client metadata: a server grants only scopes declared there.
        self.declared_scope = " ".join(dict.fromkeys(
            [*self.scope.split(), *(self.fallback_scope or "").split()]))
        parts = urlsplit(self.base_url)
        #: Plain http: the atproto loopback development client (public, no keys).
        self.loopback = parts.scheme == "http"
        if self.loopback:
            host = "127.0.0.1" if parts.hostname in ("localhost", "127.0.0.1", "::1") else parts.hostname
            if parts.hostname not in ("localhost", "127.0.0.1", "::1"):
                log.warning("server.base_url %s is plain http but not loopback: OAuth login needs "
                            "https (or http://127.0.0.1 for the development client)", self.base_url)
            port = f":{parts.port}" if parts.port else ""
            self.redirect_uri = f"http://{host}{port}{parts.path.rstrip('/')}{CALLBACK_PATH}"
            self.client_id = "http://localhost?" + urlencode(
                {"redirect_uri": self.redirect_uri, "scope": self.declared_scope})
        else:
            self.redirect_uri = self.base_url + CALLBACK_PATH
            self.client_id = self.base_url + METADATA_PATH
        self._nonces: dict[str, str] = {}  # origin -> latest DPoP-Nonce

    # ---------------------------------------------------------------- metadata

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "client_id": self.client_id,
            "client_name": self.cfg.client_name,
            "client_uri": self.base_url,
            "application_type": "web",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "redirect_uris": [self.redirect_uri],
            "scope": self.declared_scope,
            "dpop_bound_access_tokens": True,
        }
        if self.loopback:
            meta["application_type"] = "native"
            meta["token_endpoint_auth_method"] = "none"
        else:
            meta["token_endpoint_auth_method"] = "private_key_jwt"
            meta["token_endpoint_auth_signing_alg"] = "ES256"
            meta["jwks_uri"] = self.base_url + JWKS_PATH
        return meta

    # ---------------------------------------------------------------- discovery

    def _check_url(self, url: str, what: str) -> None:
        parts = urlsplit(url)
        insecure_ok = self.app.config.atproto.allow_insecure_http
        if parts.scheme != "https" and not (insecure_ok and parts.scheme == "http"):
            raise ApiError(400, "insecure_server", f"The {what} {url!r} does not use https.")
        if not parts.hostname or parts.query or parts.fragment:
            raise ApiError(400, "invalid_server", f"The {what} {url!r} is not a server URL.")

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            resp = await self.app.http.get(url, headers={"Accept": "application/json"})
        except RequestRefused as exc:
            raise ServerRefused(what, url, exc.reason) from None
        except httpx.HTTPError as exc:
            raise ApiError(502, "server_unreachable", f"Could not reach the {what} at {url}: {exc}") from None
        if resp.status_code != 200:
            raise ApiError(502, "server_metadata_missing",
                           f"The {what} at {url} answered {resp.status_code}.")
        if len(resp.content) > MAX_METADATA_BYTES:
            raise ApiError(502, "server_metadata_invalid", f"The {what} at {url} is too large.")
        try:
            value = resp.json()
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ApiError(502, "server_metadata_invalid", f"The {what} at {url} is not a JSON object.")
        return value

    async def authorization_server_of(self, pds_url: str) -> str:
        """The issuer a PDS names in its protected-resource metadata."""
        pds_url = origin_of(pds_url)
        self._check_url(pds_url, "PDS")
        doc = await self._get_json(f"{pds_url}/.well-known/oauth-protected-resource",
                                   "PDS's OAuth metadata")
        servers = doc.get("authorization_servers")
        if not isinstance(servers, list) or len(servers) != 1 or not isinstance(servers[0], str):
            raise ApiError(502, "server_metadata_invalid",
                           f"The PDS {pds_url} must name exactly one authorization server.")
        return servers[0]

    async def server_metadata(self, issuer: str) -> ServerMeta:
        """Fetch and validate an authorization server's metadata."""
        self._check_url(issuer, "authorization server")
        issuer = issuer.rstrip("/")
        doc = await self._get_json(f"{issuer}/.well-known/oauth-authorization-server",
                                   "authorization server metadata")
        if doc.get("issuer") != issuer:
            raise ApiError(502, "issuer_mismatch",
                           f"The authorization server at {issuer} calls itself {doc.get('issuer')!r}.")

        def endpoint(name: str, required: bool = True) -> str | None:
            value = doc.get(name)
            if value is None and not required:
                return None
            if not isinstance(value, str) or origin_of(value) != issuer:
                raise ApiError(502, "server_metadata_invalid",
                               f"The authorization server {issuer} has no usable {name}.")
            return value

        if "S256" not in (doc.get("code_challenge_methods_supported") or []):
            raise ApiError(502, "server_metadata_invalid", f"{issuer} does not support PKCE S256.")
        if "ES256" not in (doc.get("dpop_signing_alg_values_supported") or []):
            raise ApiError(502, "server_metadata_invalid", f"{issuer} does not support DPoP ES256.")
        method = "none" if self.loopback else "private_key_jwt"
        if method not in (doc.get("token_endpoint_auth_methods_supported") or []):
            raise ApiError(502, "server_metadata_invalid",
                           f"{issuer} does not accept {method} client authentication.")
        if "atproto" not in (doc.get("scopes_supported") or []):
            raise ApiError(502, "server_metadata_invalid", f"{issuer} is not an atproto server.")
        return ServerMeta(issuer=issuer,
                          authorization_endpoint=endpoint("authorization_endpoint"),  # type: ignore[arg-type]
                          token_endpoint=endpoint("token_endpoint"),  # type: ignore[arg-type]
                          par_endpoint=endpoint("pushed_authorization_request_endpoint"),  # type: ignore[arg-type]
                          revocation_endpoint=endpoint("revocation_endpoint", required=False))

    async def resolve_login(self, text: str) -> LoginTarget:
        """A handle, a DID or a PDS/entryway URL -> the server to log in at."""
        text = text.strip()
        if text.startswith(("https://", "http://")):
            url = origin_of(text)
            self._check_url(url, "server")
            try:
                try:
                    issuer = await self.authorization_server_of(url)
                except ApiError as exc:
                    if exc.code != "server_metadata_missing":
                        raise
                    issuer = url  # an entryway that is its own authorization server
                return LoginTarget(await self.server_metadata(issuer), None, None, url, None)
            except ServerRefused as exc:  # the person typed it: bad input, not a server failure
                raise ApiError(400, "server_not_reachable",
                               f"That server is not reachable from this service ({exc.reason}).") from None
        if text.startswith("at://"):
            text = text[len("at://"):]
        text = text.lstrip("@")
        info = await (resolve_did(self.app, text) if text.startswith("did:")
                      else resolve_identity(self.app, text.lower()))
        if not info.pds_url:
            raise ApiError(400, "no_pds", f"{text} has no PDS in its DID document.")
        issuer = await self.authorization_server_of(info.pds_url)
        hint = info.handle if info.handle and not text.startswith("did:") else info.did
        return LoginTarget(await self.server_metadata(issuer), info.did, info.handle,
                           info.pds_url, hint)

    # ---------------------------------------------------------------- JOSE

    def client_assertion(self, audience: str) -> dict[str, str]:
        """private_key_jwt credentials (nothing for the public loopback client)."""
        if self.loopback:
            return {}
        # JWT times go to another server, which checks them against its own clock: real time,
        # not app.clock (a test's fake clock must not make assertions look stale).
        now = int(time.time())
        key = self.keys.signing
        token = jwt.encode({"alg": "ES256", "kid": self.keys.kid(key), "typ": "JWT"},
                           {"iss": self.client_id, "sub": self.client_id, "aud": audience,
                            "jti": uuid.uuid4().hex, "iat": now, "exp": now + 60}, key)
        return {"client_assertion_type": ASSERTION_TYPE, "client_assertion": token}

    def dpop_proof(self, key: ECKey, method: str, url: str, access_token: str | None = None) -> str:
        claims: dict[str, Any] = {"jti": uuid.uuid4().hex, "htm": method,
                                  "htu": url.split("?", 1)[0].split("#", 1)[0], "iat": int(time.time())}
        nonce = self._nonces.get(origin_of(url))
        if nonce:
            claims["nonce"] = nonce
        if access_token is not None:
            claims["ath"] = b64url(hashlib.sha256(access_token.encode()).digest())
        return jwt.encode({"typ": "dpop+jwt", "alg": "ES256", "jwk": key.as_dict(private=False)},
                          claims, key)

    async def dpop_request(self, key: ECKey, method: str, url: str, *,
                           access_token: str | None = None, retry_nonce: bool = True,
                           **kwargs: Any) -> httpx.Response:
        """Send with a DPoP proof; when the server asks for a fresh nonce, retry once."""
        base_headers = dict(kwargs.pop("headers", None) or {})
        for attempt in range(2 if retry_nonce else 1):
            headers = dict(base_headers)
            headers["DPoP"] = self.dpop_proof(key, method, url, access_token)
            if access_token is not None:
                headers["Authorization"] = f"DPoP {access_token}"
            resp = await self.app.http.request(method, url, headers=headers, **kwargs)
            nonce = resp.headers.get("DPoP-Nonce")
            if nonce:
                if len(self._nonces) >= MAX_NONCE_ORIGINS:
                    self._nonces.clear()  # nonces are cheap to learn again
                self._nonces[origin_of(url)] = nonce
            if attempt == 0 and nonce and _asks_for_nonce(resp):
                continue
            return resp
        return resp

    # ---------------------------------------------------------------- the grant

    async def _token_call(self, key: ECKey, url: str, data: dict[str, str],
                          audience: str) -> httpx.Response:
        data = {**data, "client_id": self.client_id}
        for attempt in range(2):
            # A fresh assertion per attempt: the server remembers each jti.
            body = {**data, **self.client_assertion(audience)}
            try:
                resp = await self.dpop_request(key, "POST", url, data=body, retry_nonce=False)
            except httpx.HTTPError as exc:
                raise ApiError(502, "server_unreachable",
                               f"Could not reach the authorization server: {exc}") from None
            if not (attempt == 0 and _asks_for_nonce(resp)):
                return resp
        return resp

    async def push_authorization(self, server: ServerMeta, key: ECKey, *, state: str,
                                 challenge: str, login_hint: str | None) -> PushedAuthorization:
        """PAR with `scope`; if the server refuses that scope (a server without granular
        scopes), once more with `fallback_scope`. The person is asked to approve only what
        the accepted request names. A server known to grant less than `scope` asks (see
        `note_grant`) is sent `fallback_scope` at once."""
        if self.fallback_scope is not None and server.issuer in self.granular_ignored:
            return await self._push(server, key, self.fallback_scope, state, challenge, login_hint)
        try:
            return await self._push(server, key, self.scope, state, challenge, login_hint)
        except OAuthError as exc:
            if self.fallback_scope is None or not _refuses_scope(exc):
                raise
            log.info("%s refused the scope %r (%s); asking for %r instead", server.issuer,
                     self.scope, exc, self.fallback_scope)
            return await self._push(server, key, self.fallback_scope, state, challenge, login_hint)

    def note_grant(self, server: ServerMeta, granted_scope: str, membership_nsid: str) -> bool:
        """After a login: False when the server granted no permission to write the
        membership record although it was asked for one (it then gets `fallback_scope`
        from the next login on). Logging in still succeeds; joining will say
        ``scope_missing`` until the person signs in again."""
        from plugins.oauth.userrepo import scope_allows
        if scope_allows(granted_scope, membership_nsid, "create"):
            return True
        if self.fallback_scope is not None and server.issuer not in self.granular_ignored:
            log.info("%s granted %r for %r: its next logins ask for %r", server.issuer, granted_scope,
                     self.scope, self.fallback_scope)
            self.granular_ignored.add(server.issuer)
        return False

    async def _push(self, server: ServerMeta, key: ECKey, scope: str, state: str, challenge: str,
                    login_hint: str | None) -> PushedAuthorization:
        data = {"response_type": "code", "redirect_uri": self.redirect_uri, "scope": scope,
                "state": state, "code_challenge": challenge, "code_challenge_method": "S256"}
        if login_hint:
            data["login_hint"] = login_hint
        resp = await self._token_call(key, server.par_endpoint, data, server.issuer)
        body = _json(resp)
        if resp.status_code not in (200, 201) or not isinstance(body.get("request_uri"), str):
            raise OAuthError(str(body.get("error") or "par_failed"),
                             str(body.get("error_description") or resp.text[:200]), resp.status_code)
        return PushedAuthorization(body["request_uri"], scope)

    def authorization_url(self, server: ServerMeta, request_uri: str) -> str:
        return server.authorization_endpoint + "?" + urlencode(
            {"client_id": self.client_id, "request_uri": request_uri})

    async def exchange_code(self, server: ServerMeta, key: ECKey, code: str,
                            verifier: str) -> TokenSet:
        resp = await self._token_call(key, server.token_endpoint, {
            "grant_type": "authorization_code", "code": code, "redirect_uri": self.redirect_uri,
            "code_verifier": verifier}, server.issuer)
        return _token_set(resp)

    async def refresh(self, server: ServerMeta, key: ECKey, refresh_token: str) -> TokenSet:
        resp = await self._token_call(key, server.token_endpoint, {
            "grant_type": "refresh_token", "refresh_token": refresh_token}, server.issuer)
        return _token_set(resp)

    async def revoke(self, server: ServerMeta, key: ECKey, token: str) -> bool:
        """Revoke at the server if it offers revocation; False if it does not or failed."""
        if not server.revocation_endpoint:
            return False
        try:
            resp = await self._token_call(key, server.revocation_endpoint, {"token": token},
                                          server.issuer)
        except ApiError as exc:
            log.warning("token revocation at %s failed: %s", server.issuer, exc.message)
            return False
        if resp.status_code != 200:
            log.warning("token revocation at %s answered %d: %s", server.issuer,
                        resp.status_code, resp.text[:200])
            return False
        return True


def default_scope(namespace: str) -> str:
    """The granular scope: create, update and delete the membership record, nothing else."""
    return f"atproto repo:{namespace}.membership"


def _refuses_scope(exc: OAuthError) -> bool:
    """Whether a PAR refusal is about the scope: ``invalid_scope`` (RFC 6749), or an
    ``invalid_request`` that names the scope as the problem (what servers written before
    granular scopes answer for a scope they do not know)."""
    if exc.error == "invalid_scope":
        return True
    return exc.error == "invalid_request" and "scope" in exc.description.lower()


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        value = resp.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _asks_for_nonce(resp: httpx.Response) -> bool:
    if resp.status_code not in (400, 401):
        return False
    if "use_dpop_nonce" in resp.headers.get("WWW-Authenticate", ""):
        return True
    return _json(resp).get("error") == "use_dpop_nonce"


def _token_set(resp: httpx.Response) -> TokenSet:
    body = _json(resp)
    if resp.status_code != 200:
        raise OAuthError(str(body.get("error") or "token_request_failed"),
                         str(body.get("error_description") or resp.text[:200]), resp.status_code)
    access, sub = body.get("access_token"), body.get("sub")
    if not isinstance(access, str) or not isinstance(sub, str) or not sub.startswith("did:"):
        raise OAuthError("invalid_token_response", "the token response lacks access_token or sub")
    if str(body.get("token_type", "")).lower() != "dpop":
        raise OAuthError("invalid_token_response", "the access token is not DPoP-bound")
    scope = body.get("scope") if isinstance(body.get("scope"), str) else ""
    if "atproto" not in scope.split():
        raise OAuthError("invalid_token_response", "the grant lacks the atproto scope")
    expires_in = body.get("expires_in")
    if not isinstance(expires_in, (int, float)) or expires_in <= 0:
        expires_in = 300
    refresh = body.get("refresh_token") if isinstance(body.get("refresh_token"), str) else None
    return TokenSet(access, refresh, float(expires_in), scope, sub)
