"""What every page shares: the optional session, forms with the CSRF token in a hidden
field, the layout, the Content-Security-Policy and HTML error pages.

Pages are Tornado templates over plain data: a handler calls the same services the JSON
routes call and hands the template dictionaries and lists; templates hold no rules.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

from tornado.escape import xhtml_escape

from daemon.http.base import STATE_CHANGING, ApiError, BaseHandler, Principal, log_failure, same_site_path
from daemon.http.validate import strip_spoofing
from daemon.runtime.services import AppsService, CommunitiesService, WebhooksService
from daemon.security.sessions import SID_COOKIE, clear_session_cookies
from plugins.web.assets import web_assets

#: A person's words for each community type: short (badges) and long (forms, pages).
TYPE_NAMES = {"open": "Open", "admin-approved": "Admin-approved", "private": "Private"}
TYPE_LABELS = {
    "open": "Open: anyone can join",
    "admin-approved": "Admin-approved: admins approve each request",
    "private": "Private: only members see it; admins approve each request",
}
_AVATAR_PX = {"s": 32, "m": 48, "l": 96}


def avatar(src: str | None, name: str | None, size: str) -> str:
    """An avatar image (decorative: the name is always next to it), or the name's first
    letter in a circle when there is no image. Returns escaped HTML."""
    px = _AVATAR_PX[size]
    if src:
        return (f'<img class="avatar avatar-{size}" src="{xhtml_escape(src)}" alt="" '
                f'width="{px}" height="{px}" loading="lazy">')
    letter = xhtml_escape(strip_spoofing(name or "?").strip()[:1].upper() or "?")
    return f'<span class="avatar avatar-{size} avatar-empty" aria-hidden="true">{letter}</span>'


def shown_escape(value: str | bytes) -> str:
    """The pages' autoescape: `xhtml_escape` of the text without `SPOOFING_CHARS` (names
    typed here are refused with them; names from the network are shown without them)."""
    text = value.decode("utf-8") if isinstance(value, bytes) else value
    return xhtml_escape(strip_spoofing(text))


#: The CSRF token's form field (its value: the session's token, as in the x-csrf-token header).
CSRF_FIELD = "_csrf"
FORM_TYPE = "application/x-www-form-urlencoded"


safe_next = same_site_path  # a `next` path on this site, or None (daemon.http.base)


def content_security_policy(*, sign_in_form: bool, http_allowed: bool, image_preview: bool = False) -> str:
    """No inline script or style anywhere. Images may come from any PDS (avatars are blob
    URLs on the community's PDS). The sign-in form posts to /login, which redirects to the
    person's own authorization server: a page that holds it must allow that redirect.
    `http_allowed` (`atproto.allow_insecure_http`, development): PDSes may be plain http.
    `image_preview`: a page that previews a chosen file shows it from a `blob:` URL."""
    img = "'self' https:" + (" http:" if http_allowed else "") + (" blob:" if image_preview else "")
    action = "'self'"
    if sign_in_form:
        action += " https:" + (" http:" if http_allowed else "")
    return ("default-src 'none'; script-src 'self'; style-src 'self'; "
            f"img-src {img}; connect-src 'self'; form-action {action}; "
            "frame-ancestors 'none'; base-uri 'none'")


@dataclass
class FormErrors:
    """GOV.UK-style errors: a summary at the top linking to each field (`#<field>`), the
    message next to the field; `values` is what the person typed, shown again."""

    values: dict[str, str] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)   # field id -> message
    general: list[str] = field(default_factory=list)        # not about one field

    def add(self, name: str, message: str) -> None:
        self.fields.setdefault(name, message)

    def __bool__(self) -> bool:
        return bool(self.fields or self.general)


#: Refusals that signing in again cures (the login ended, or lacks a permission), in words.
SIGN_IN_AGAIN = {
    "oauth_grant_missing": "This session cannot write to your repository. Sign in again to carry on.",
    "scope_missing": "Your sign-in does not allow this service to write your membership record. "
                     "Sign in again and approve the permissions it asks for.",
}


def render_html(handler: BaseHandler, template: str, *, title: str, status: int = 200,
                sign_in_form: bool = False, me: dict[str, Any] | None = None, csrf: str = "",
                **values: Any) -> None:
    """Finish `handler`'s answer with a page in the layout, sent with the CSP and the
    other page headers. Any `BaseHandler` may use it (the core's 404 handler does)."""
    assets = web_assets(handler.app)
    if status != 200:
        handler.set_status(status)
    handler.put_header("Content-Type", "text/html; charset=utf-8")
    handler.put_header("Content-Security-Policy", content_security_policy(
        sign_in_form=sign_in_form, http_allowed=handler.app.config.atproto.allow_insecure_http,
        image_preview=bool(values.get("image_preview"))))
    handler.put_header("Referrer-Policy", "same-origin")
    handler.put_header("X-Frame-Options", "DENY")
    namespace = {
        "title": title, "me": me, "csrf": csrf,
        "csrf_field": CSRF_FIELD, "static": assets.url, "path": handler.request.path,
        "request_id": handler.request_id, "errors": FormErrors(), "notice": None, "urlencode": urlencode,
        "avatar": avatar, "type_names": TYPE_NAMES, "type_labels": TYPE_LABELS,
        # every {{ }} of a page: names from the network (profiles) lose their direction
        # overrides and zero-width spaces (daemon.http.validate.SPOOFING_CHARS)
        "xhtml_escape": shown_escape,
    }
    namespace.update(values)
    handler.finish(assets.templates.load(template).generate(**namespace))


#: Paths that stay JSON when unknown: the API and the JSON routes the spec fixes.
JSON_PREFIXES = ("/api/", "/communities", "/users", "/login", "/logout", "/oauth", "/health",
                 "/metrics", "/.well-known", "/xrpc")


def wants_page(request: Any) -> bool:
    """A browser asking for a page: GET/HEAD, `Accept` names text/html, and the path is
    not one of the JSON routes' (`JSON_PREFIXES`)."""
    accept = request.headers.get("Accept", "")
    return (request.method in ("GET", "HEAD") and "text/html" in accept.lower()
            and not request.path.startswith(JSON_PREFIXES))


def not_found_page(handler: BaseHandler) -> bool | None:
    """The `cr_not_found` answer: the "Page not found" page for a browser, else None."""
    if not wants_page(handler.request):
        return None
    handler.clear_header("Content-Type")
    render_html(handler, "error.html", title="Page not found", status=404, kind="not_found",
                heading="Page not found", message=None, back="/")
    return True


class SignInRequired(Exception):
    """The page needs a signed-in person (the session is missing or has ended)."""


class PageHandler(BaseHandler):
    """Base of every HTML page. `auth` stays None (the core does not authenticate): the
    session is looked up here and is optional unless `login_required`; state-changing
    requests must be a form with the session's CSRF token in the hidden `_csrf` field."""

    login_required = False
    serves_html = True  # pages for people: not in the OpenAPI document
    form: dict[str, str]
    form_lists: dict[str, list[str]]   # every value of each field (checkbox groups)
    session_ended = False

    # The services of the plugins the pages are a layer over (daemon/runtime/services.py).
    @property
    def communities(self) -> "CommunitiesService":
        assert self.app.communities is not None  # a requirement of this plugin
        return self.app.communities

    @property
    def apps(self) -> "AppsService":
        assert self.app.apps is not None  # a requirement of this plugin
        return self.app.apps

    @property
    def webhooks(self) -> "WebhooksService":
        """Only while the webhooks plugin is enabled (the developer pages check first)."""
        assert self.app.webhooks is not None
        return self.app.webhooks

    async def admit(self) -> None:
        """The core's checks (body cap, rate limits; `auth` is None so no credentials),
        then the optional session. Refusals raised here reach `write_error` as pages."""
        self.form, self.form_lists = {}, {}
        await super().admit()
        self.principal = await self._optional_session()
        if self.principal is not None and self.rate_limit is None:
            # the per-user session budget, as for the JSON routes (a page with its own
            # bucket, such as the invite page's per-address `auth`, was counted above)
            self.apply_rate_limit()
        if self.principal is None and (self.login_required or self.request.method in STATE_CHANGING):
            raise SignInRequired()

    async def post(self, *args: str) -> None:
        """Every form post: the body arrives after `prepare` (bodies are streamed), so the
        form is read and its CSRF token checked here, before `submit` sees it."""
        self.form_lists = self._parse_form()
        self.form = {k: v[0] for k, v in self.form_lists.items()}
        self._check_form_csrf()
        await self.submit(*args)

    async def submit(self, *args: str) -> None:
        """The page's form handler (a POST with a checked `_csrf`): override it."""
        raise ApiError(405, "method_not_allowed", "This page takes no form.")

    async def _optional_session(self) -> Principal | None:
        if not self.get_cookie(SID_COOKIE):
            return None
        try:
            # throttled like the JSON routes: guessing cookies costs the failed-auth budget
            principal = await self.authenticate_throttled()
        except ApiError as exc:
            if exc.status != 401:
                raise
            # An ended session: drop its cookies, so later pages do not present them again.
            self.session_ended = True
            clear_session_cookies(self)
            return None
        return principal if principal.kind == "session" else None

    def _parse_form(self) -> dict[str, list[str]]:
        ctype = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype != FORM_TYPE:
            raise ApiError(415, "unsupported_media_type", "Send the form as " + FORM_TYPE + ".")
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "bad_request", "The form is not UTF-8.") from None
        try:
            fields = parse_qs(text, keep_blank_values=True, max_num_fields=50)
        except ValueError:
            raise ApiError(400, "bad_request", "The form has too many fields.") from None
        return fields

    def _check_form_csrf(self) -> None:
        """Like the core's x-csrf-token check, from the hidden field: constant-time,
        against the session's own token."""
        assert self.principal is not None
        sent = self.form.get(CSRF_FIELD) or self.request.headers.get("x-csrf-token", "")
        expected = self.principal.csrf_token or ""
        if not sent or not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            raise ApiError(403, "csrf_failed", "The form was missing its security token.")

    # ---------------------------------------------------------------- output

    @property
    def me(self) -> dict[str, Any] | None:
        if self.principal is None:
            return None
        return {"did": self.principal.did, "handle": self.principal.handle or self.principal.did}

    def next_path(self) -> str:
        """Where to come back to after signing in: the page itself, or for a form, the
        page the form belongs to (`form_page`)."""
        if self.request.method == "GET":
            return safe_next(self.request.uri) or "/"
        return self.form_page()

    def form_page(self) -> str:
        """The page a POST route's form is on (where to return after the POST)."""
        return "/"

    def render_page(self, template: str, *, title: str, status: int = 200,
                    sign_in_form: bool = False, **values: Any) -> None:
        render_html(self, template, title=title, status=status, sign_in_form=sign_in_form, me=self.me,
                    csrf=self.principal.csrf_token if self.principal else "", **values)

    def see_other(self, url: str) -> None:
        """Redirect-after-post: 303, so a reload does not send the form again."""
        self.redirect(url, status=303)

    # ---------------------------------------------------------------- errors as pages

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, SignInRequired):
            if not self._finished:
                self.send_error(401, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ApiError):
            for k, v in exc.headers.items():
                self.set_header(k, v)
        try:
            self.render_error(status_code, exc)
        except Exception as render_exc:  # noqa: BLE001 (never a blank answer)
            log_failure(self.request, render_exc)
            self.put_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(f"Error {status_code}. Request id {self.request_id}.")

    def render_error(self, status: int, exc: BaseException | None) -> None:
        code = exc.code if isinstance(exc, ApiError) else None
        message = exc.message if isinstance(exc, ApiError) and status < 500 else None
        if isinstance(exc, SignInRequired) or status == 401 or code in SIGN_IN_AGAIN:
            self.render_page("signin.html", title="Sign in to continue", status=status,
                             sign_in_form=True, next=self.next_path(),
                             ended=self.session_ended or status == 401,
                             reason=SIGN_IN_AGAIN.get(code or ""))
            return
        if code == "csrf_failed":
            kind, heading = "csrf", "This form could not be sent"
        elif status == 404:
            kind, heading = "not_found", "Page not found"
        elif status == 502 or code == "pds_error":
            kind, heading = "pds", "A server we depend on did not answer"
        elif status == 429:
            kind, heading = "rate_limited", "Too many requests"
        elif status >= 500:
            kind, heading = "internal", "Something went wrong"
        else:
            kind, heading = "bad_request", "That did not work"
        self.render_page("error.html", title=heading, status=status, kind=kind, heading=heading,
                         message=message, back=safe_next(self.request.path) or "/")
