"""Routes: client metadata, JWKS, login, callback, logout, and the user's profile."""

from __future__ import annotations

import hashlib
import html
import hmac
import logging
import secrets
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from daemon.plugin import BOOLEAN, STRING, STRING_OR_NULL, ApiError, BaseHandler, arr, obj, operation, query
from daemon.plugin.atproto import read_user_profile, resolve_did
from daemon.plugin.http import Response, error_or_page, redirect
from daemon.plugin.pages import safe_next
from daemon.plugin.security import clear_session_cookies, create_session, end_session, set_session_cookies
from plugins.oauth.client import (CALLBACK_PATH, JWKS_PATH, METADATA_PATH, OAuthError, ServerMeta,
                                  origin_of, pkce_pair)
from plugins.oauth.grants import oauth_state
from plugins.oauth.keys import dump_private, load_private, new_dpop_key
from plugins.oauth import store as oauth_store

log = logging.getLogger("commonroom.oauth")

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

# Login failures a person may see, in words they can act on.
ERROR_TEXT = {
    "access_denied": "You declined the request at your server, so you are not logged in.",
    "missing_state": "This login link is incomplete. Start the login again.",
    "unknown_state": "This login link was already used or is not one we issued. Start the login again.",
    "flow_expired": "This login took too long and expired. Start the login again.",
    "issuer_mismatch": "The answer came from a different server than the one the login started "
                       "with, so it was refused.",
    "missing_code": "Your server did not send an authorization code. Start the login again.",
    "authorization_failed": "Your server could not complete the login.",
    "token_exchange_failed": "Your server refused to complete the login.",
    "account_mismatch": "You signed in with a different account than the one you asked to log in as.",
    "issuer_not_authoritative": "That server is not the one your account's PDS names for logins, "
                                "so the login was refused.",
    "server_unreachable": "Your server could not be reached. Try again in a moment.",
    "server_not_reachable": "That server is not reachable from this service. Check the address, "
                            "or log in with your handle instead.",
    "flow_not_from_this_browser": "This login was not started in this browser, so it was refused "
                                  "and you are not logged in. If someone sent you this link, they "
                                  "may have tried to log you in to their account. To log in, start "
                                  "the login again here.",
    "unsupported_did": "That DID cannot be used to log in here: only did:plc and did:web "
                       "identities whose host this service may reach are supported.",
    "unknown_did": "That DID does not exist. Check it, or log in with your handle instead.",
    "login_failed": "The login could not be started.",
    "sign_in_refused": "This instance does not let this account sign in.",
}

#: Binds a login flow to the browser that started it (login CSRF defence): a random nonce,
#: sent back only to the callback; the flow keeps its SHA-256.
FLOW_COOKIE = "oauth-flow"


def hash_state(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def hash_nonce(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


def flow_cookie_options(handler: BaseHandler) -> dict[str, Any]:
    """Attributes of the flow cookie: sent only to the callback (as the browser sees its
    path), never readable by scripts, and kept on the top-level GET back from the server."""
    client = oauth_state(handler.app).client
    return {"path": urlsplit(client.redirect_uri).path or CALLBACK_PATH, "httponly": True,
            "samesite": "Lax", "secure": handler.app.config.server.base_url.startswith("https://")}


safe_return_to = safe_next  # only paths on this service: no open redirect


class LoginPageError(Exception):
    """A login failure to show the person in the browser."""

    def __init__(self, code: str, detail: str = "", status: int = 400) -> None:
        self.code = code
        self.detail = detail
        self.status = status
        super().__init__(f"{code}: {detail}")


class BrowserFacing(BaseHandler):
    """Answers errors with a readable page (or a redirect to `oauth.error_url`)."""

    def show_error(self, code: str, detail: str = "", status: int = 400) -> None:
        cfg = oauth_state(self.app).client.cfg
        if cfg.error_url:
            sep = "&" if "?" in cfg.error_url else "?"
            self.redirect(f"{cfg.error_url}{sep}{urlencode({'error': code})}")
            return
        text = ERROR_TEXT.get(code, ERROR_TEXT["login_failed"])
        # In the site's layout when a plugin draws pages (the web plugin); else plain HTML.
        # Neither has inline style or script, so the CSP never needs 'unsafe-inline'.
        if self.app.pm.hook.cr_render_page(handler=self, page="login_failed", title="Login failed",
                                           status=status, values={"text": text, "detail": detail, "code": code}):
            return
        self.set_status(status)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'none'")
        self.finish(f"<!doctype html><html lang=en><meta charset=utf-8><title>Login failed</title>"
                    f"<h1>Login failed</h1><p>{html.escape(text)}</p>"
                    + (f"<p>{html.escape(detail)}</p>" if detail else "")
                    + "<p><a href=\"/\">Back</a></p></html>")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if not self.wants_page():
            return super().write_error(status_code, **kwargs)
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ApiError) and "Location" in exc.headers:  # a follower's 307 to the primary
            location = exc.headers["Location"]
            self.set_header("Location", location)
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(f"<!doctype html><html lang=en><meta charset=utf-8><title>Signing in</title>"
                        f"<p>{html.escape(exc.message)}</p><p><a href=\"{html.escape(location)}\">Continue</a></p></html>")
            return
        if isinstance(exc, ApiError):
            self.show_error(exc.code if exc.code in ERROR_TEXT else "login_failed", exc.message,
                            exc.status)
        else:
            self.show_error("login_failed", "Something went wrong on our side.", status_code)

    def wants_page(self) -> bool:
        return True


# ------------------------------------------------------------------ metadata


PAGE_OR_REDIRECT = Response("A page explaining the failure (or a redirect to oauth.error_url)",
                            {"text/html": {"type": "string"}}, {"Location": {"schema": STRING}})


class ClientMetadataHandler(BaseHandler):
    @operation("This service's OAuth client metadata (the client_id document)",
               responses={200: obj({"client_id": STRING, "redirect_uris": arr(STRING)}, ["client_id", "redirect_uris"])})
    async def get(self) -> None:
        self.set_header("Cache-Control", "public, max-age=300")
        self.send_json(oauth_state(self.app).client.metadata())


class JwksHandler(BaseHandler):
    @operation("The public keys of this OAuth client", responses={200: obj({"keys": arr(obj({}))}, ["keys"])})
    async def get(self) -> None:
        self.set_header("Cache-Control", "public, max-age=300")
        self.send_json(oauth_state(self.app).client.keys.jwks())


# ------------------------------------------------------------------ login


class LoginHandler(BrowserFacing):
    rate_limit = "auth"

    @operation("The sign-in form's address: redirects to the home page, which holds the form",
               params=[query("next", description="a path on this site to come back to")],
               responses={303: redirect("The home page (with `next` when it is a path on this site)")})
    async def get(self) -> None:
        """GET /login: the sign-in form lives on the home page (the web plugin's), so send
        the browser there, keeping a `next` path on this site."""
        target = safe_next(self.get_query_argument("next", None))
        self.redirect("/" + (f"?{urlencode({'next': target})}" if target else ""), status=303)

    def is_form(self) -> bool:
        ctype = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        return ctype in FORM_TYPES

    def wants_page(self) -> bool:
        return self.is_form()

    def login_fields(self) -> tuple[str, str | None]:
        if self.is_form():
            if self.request.headers.get("Content-Type", "").lower().startswith("multipart/"):
                raise ApiError(415, "unsupported_media_type",
                               "Send the login form as application/x-www-form-urlencoded.")
            fields = {k: v[0] for k, v in parse_qs(self.body.decode("utf-8", "replace")).items()}
        else:
            fields = self.json_body()
        text = fields.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "invalid_request",
                           "input: give your handle (alice.example.com), DID or server URL.",
                           details=[{"field": "input", "message": "is required"}])
        if len(text) > 2048:
            raise ApiError(400, "invalid_request", "input: too long.",
                           details=[{"field": "input", "message": "must be at most 2048 characters"}])
        return text.strip(), safe_return_to(fields.get("returnTo"))

    @operation("Start an OAuth login: JSON answers the URL to send the browser to; a form post is redirected",
               body=obj({"input": {"type": "string", "minLength": 1, "maxLength": 2048,
                                   "description": "a handle, DID or server URL"},
                         "returnTo": {"type": "string", "description": "a path on this service"}}, ["input"]),
               body_types=("application/json", "application/x-www-form-urlencoded"),
               responses={200: obj({"redirectUrl": STRING}, ["redirectUrl"]),
                          302: redirect("To the authorization server (form posts)"),
                          **{status: error_or_page(text) for status, text in (
                              (400, "invalid_request, or a handle or DID that cannot be resolved"),
                              (413, "The body is larger than the limit"), (415, "Neither JSON nor a form"),
                              (429, "Too many login attempts from this address"),
                              (500, "A bug"), (502, "authorization_server_refused"))}})
    async def post(self) -> None:
        text, return_to = self.login_fields()
        oauth = oauth_state(self.app)
        client = oauth.client
        target = await client.resolve_login(text)
        state = secrets.token_urlsafe(24)
        verifier, challenge = pkce_pair()
        dpop_key = new_dpop_key()
        try:
            pushed = await client.push_authorization(
                target.server, dpop_key, state=state, challenge=challenge, login_hint=target.login_hint)
        except OAuthError as exc:
            log.warning("PAR at %s refused: %s", target.server.issuer, exc)
            raise ApiError(502, "authorization_server_refused",
                           f"{target.server.issuer} refused to start the login: {exc}") from None
        state_hash, now = hash_state(state), self.app.clock.time()
        nonce = secrets.token_urlsafe(32)
        seal = self.app.secrets.seal
        async with self.app.db.transaction("oauth.start") as tx:
            await oauth_store.delete_expired_flows_tx(tx, now)
            await oauth_store.insert_flow_tx(
                tx, state_hash=state_hash, issuer=target.server.issuer,
                server_meta=target.server.to_json(), expected_did=target.did,
                pds_url=target.pds_url, redirect_uri=client.redirect_uri,
                client_id=client.client_id, scope=pushed.scope,
                verifier_sealed=seal(verifier, f"oauth_flows.verifier:{state_hash}"),
                dpop_key_sealed=seal(dump_private(dpop_key), f"oauth_flows.dpop_key:{state_hash}"),
                return_to=return_to, browser_hash=hash_nonce(nonce), now=now,
                expires_at=now + client.cfg.flow_timeout_seconds)
        # One login at a time per browser: a newer login replaces the cookie of an older one.
        self.set_cookie(FLOW_COOKIE, nonce, max_age=client.cfg.flow_timeout_seconds + 60,
                        **flow_cookie_options(self))
        url = client.authorization_url(target.server, pushed.request_uri)
        if self.is_form():
            self.redirect(url)
        else:
            self.send_json({"redirectUrl": url})


# ------------------------------------------------------------------ callback


class CallbackHandler(BrowserFacing):
    primary_only = True  # it writes the session: a follower sends the browser to the primary

    @operation("Where the authorization server sends the browser back: sets the session cookies",
               params=[query("state"), query("code"), query("iss"), query("error"), query("error_description")],
               responses={302: redirect("Logged in: to the page the login started from"),
                          400: PAGE_OR_REDIRECT, 502: PAGE_OR_REDIRECT, 500: PAGE_OR_REDIRECT})
    async def get(self) -> None:
        # Whatever happens, the nonce has done its job: the flow is spent below.
        nonce = self.get_cookie(FLOW_COOKIE)
        if nonce is not None:
            self.clear_cookie(FLOW_COOKIE, **flow_cookie_options(self))
        try:
            await self.complete(nonce)
        except LoginPageError as exc:
            log.info("OAuth callback refused: %s", exc)
            self.show_error(exc.code, exc.detail, exc.status)

    async def complete(self, nonce: str | None) -> None:
        arg = self.get_query_argument
        state = arg("state", "")
        if not state:
            raise LoginPageError("missing_state")
        state_hash, now = hash_state(state), self.app.clock.time()
        async with self.app.db.transaction("oauth.take_flow") as tx:
            flow = await oauth_store.take_flow_tx(tx, state_hash)
        if flow is None:
            raise LoginPageError("unknown_state")
        if flow["expires_at"] <= now:
            raise LoginPageError("flow_expired")
        # Login CSRF: only the browser that started the flow may complete it, or an attacker
        # could send someone the callback link of a login into the attacker's own account.
        if not (nonce and flow["browser_hash"]
                and hmac.compare_digest(hash_nonce(nonce), flow["browser_hash"])):
            client = oauth_state(self.app).client
            detail = (f"Development (loopback) client: open {origin_of(client.redirect_uri)}/ "
                      f"(not localhost) to log in." if client.loopback else "")
            raise LoginPageError("flow_not_from_this_browser", detail)
        if arg("error", ""):
            error = arg("error")
            code = "access_denied" if error == "access_denied" else "authorization_failed"
            raise LoginPageError(code, arg("error_description", "") or error)
        # RFC 9207: the answer must name the server the flow started with (mix-up defence).
        if arg("iss", "") != flow["issuer"]:
            raise LoginPageError("issuer_mismatch")
        code = arg("code", "")
        if not code:
            raise LoginPageError("missing_code")

        oauth = oauth_state(self.app)
        client = oauth.client
        server = ServerMeta.from_json(flow["server_meta"])
        verifier = self.app.secrets.open(flow["verifier_sealed"], f"oauth_flows.verifier:{state_hash}")
        dpop_key = load_private(self.app.secrets.open(flow["dpop_key_sealed"],
                                                      f"oauth_flows.dpop_key:{state_hash}"))
        try:
            tokens = await client.exchange_code(server, dpop_key, code, verifier)
        except OAuthError as exc:
            raise LoginPageError("token_exchange_failed", str(exc), 502) from None
        except ApiError as exc:
            raise LoginPageError("server_unreachable", exc.message, 502) from None

        async def refuse(code: str, detail: str) -> NoReturn:
            await client.revoke(server, dpop_key, tokens.refresh_token or tokens.access_token)
            raise LoginPageError(code, detail)

        client.note_grant(server, tokens.scope, f"{self.app.config.atproto.namespace}.membership")
        if flow["expected_did"] and tokens.sub != flow["expected_did"]:
            await refuse("account_mismatch", f"expected {flow['expected_did']}, got {tokens.sub}")
        # The server vouches for `sub`; only the account's own PDS can say that this server
        # speaks for it (else one server could log in as another server's users).
        try:
            info = await resolve_did(self.app, tokens.sub)
            named = await client.authorization_server_of(info.pds_url) if info.pds_url else None
            if named != server.issuer:  # the account may have just moved: look again
                info = await resolve_did(self.app, tokens.sub, fresh=True)
                named = await client.authorization_server_of(info.pds_url) if info.pds_url else None
        except ApiError as exc:
            await refuse("issuer_not_authoritative", exc.message)
        if named != server.issuer or not info.pds_url:
            await refuse("issuer_not_authoritative",
                         f"{tokens.sub}'s PDS names {named!r}, not {server.issuer}")

        try:  # an instance-wide policy (cr_check_action): a ban on the instance, a takedown
            await self.app.check_action("session.sign_in", tokens.sub)
        except ApiError as exc:
            await client.revoke(server, dpop_key, tokens.refresh_token or tokens.access_token)
            raise LoginPageError("sign_in_refused", exc.message, exc.status) from None
        sid, csrf, session_id = await create_session(self.app, tokens.sub, info.handle)
        try:
            async with self.app.db.transaction("oauth.grant") as tx:
                await oauth.grants.store_tx(tx, session_id, server=server, pds_url=info.pds_url,
                                            tokens=tokens, dpop_key=dpop_key)
        except BaseException:
            await end_session(self.app, session_id)
            raise
        try:  # again, now that the session exists: a ban that landed since the first check
            # signed out the sessions it found, and this one may have come after it looked
            await self.app.check_action("session.sign_in", tokens.sub)
        except ApiError as exc:
            await oauth.sign_out(session_id)
            await end_session(self.app, session_id)
            raise LoginPageError("sign_in_refused", exc.message, exc.status) from None
        set_session_cookies(self, sid, csrf)
        log.info("logged in %s (%s) through %s", tokens.sub, info.handle, server.issuer)
        self.redirect(flow["return_to"] or client.cfg.after_login_url)


# ------------------------------------------------------------------ session routes


class LogoutHandler(BaseHandler):
    auth = "session"

    @operation("End the session (and revoke its OAuth grant)",
               responses={200: obj({"loggedOut": BOOLEAN, "revoked": BOOLEAN}, ["loggedOut", "revoked"])})
    async def post(self) -> None:
        assert self.principal is not None and self.principal.session_id
        revoked = await oauth_state(self.app).grants.revoke_and_forget(self.principal.session_id)
        await end_session(self.app, self.principal.session_id)
        clear_session_cookies(self)
        self.send_json({"loggedOut": True, "revoked": revoked})


class MeHandler(BaseHandler):
    auth = "session"

    @operation("Who is logged in", responses={200: obj(
        {"did": STRING, "handle": STRING_OR_NULL, "displayName": STRING_OR_NULL, "avatar": STRING_OR_NULL,
         "description": STRING_OR_NULL}, ["did", "handle", "displayName", "avatar", "description"])},
        errors={502: ""})
    async def get(self) -> None:
        assert self.principal is not None
        did, handle = self.principal.did, self.principal.handle
        if self.principal.session_id:
            try:
                # Also the liveness check of the login: a dead grant ends the session (401).
                await oauth_state(self.app).grants.fresh(self.principal.session_id)
            except ApiError as exc:
                if exc.status != 502:
                    raise
                log.warning("could not refresh the grant of %s: %s", did, exc.message)
        out: dict[str, Any] = {"did": did, "handle": handle, "displayName": None,
                               "avatar": None, "description": None}
        if did:
            try:
                profile = await read_user_profile(self.app, did)
            except (ApiError, httpx.HTTPError) as exc:  # decoration only: degrade to DID + handle
                log.info("no profile for %s: %s", did, exc)
                profile = None
            for key in ("displayName", "description", "avatar"):
                value = (profile or {}).get(key)
                out[key] = value if isinstance(value, str) and value else None
        self.send_json(out)


def routes() -> list[tuple]:
    return [
        (METADATA_PATH, ClientMetadataHandler),
        (JWKS_PATH, JwksHandler),
        (r"/login", LoginHandler),
        (CALLBACK_PATH, CallbackHandler),
        (r"/logout", LogoutHandler),
        (r"/users/me", MeHandler),
    ]

