"""Pages for people, any plugin's: the base handler of an HTML page (`PageHandler`, in the
public plugin API). It brings the optional browser session, forms with the CSRF token in
a hidden field, redirect-after-post, and errors answered as the site's pages; what a page
looks like (the layout, navigation, footer, the signed-in person) is drawn by the plugin
that answers `cr_render_page` (the web plugin). Without one, pages answer plain text.

A plugin's page names a template of its own folder (`cr_web_folders`): ``render_page(
"board.html", ...)`` of a handler whose `plugin` is ``"noticeboard"`` renders
``noticeboard/board.html``; a name that could leave the folder is refused.
"""

from __future__ import annotations

import hmac
import re
from typing import Any
from urllib.parse import parse_qs, urlencode

from tornado.httputil import parse_body_arguments

from daemon.base import ApiError, Principal
from daemon.http.base import STATE_CHANGING, BaseHandler, log_failure, same_site_path
from daemon.security.sessions import SID_COOKIE, clear_session_cookies

#: The CSRF token's form field (its value: the session's token, as in the x-csrf-token header).
CSRF_FIELD = "_csrf"
FORM_TYPE = "application/x-www-form-urlencoded"
FILES_FORM_TYPE = "multipart/form-data"
#: The most fields (and files) a form may send.
MAX_FORM_FIELDS = 50
#: A page's template name inside its plugin's folder: plain names and sub-folders, .html.
PAGE_NAME = re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*\.html$")

safe_next = same_site_path  # a `next` path on this site, or None

#: Refusals that signing in again cures (the login ended, or lacks a permission), in words.
SIGN_IN_AGAIN = {
    "oauth_grant_missing": "This session cannot write to your repository. Sign in again to carry on.",
    "scope_missing": "Your sign-in does not allow this service to write your membership record. "
                     "Sign in again and approve the permissions it asks for.",
}


class PageNameError(ValueError):
    """A page or template name that could leave its plugin's template folder."""


class SignInRequired(Exception):
    """The page needs a signed-in person (the session is missing or has ended)."""


def confine_pages(routes: list[tuple], route_plugins: dict[str, str]) -> dict[type, str]:
    """Each plugin page's plugin (`PageHandler.plugin`), checked at start-up against the
    plugin whose `cr_routes` routes it (`route_plugins`: pattern -> plugin): a page renders
    only its own plugin's templates, never another's folder. A page naming another plugin
    stops start-up (`DeclarationError`)."""
    from daemon.runtime.declarations import DeclarationError
    pages: dict[type, str] = {}
    for route in routes:
        handler, owner = route[1], route_plugins.get(route[0])
        if not (isinstance(handler, type) and issubclass(handler, PageHandler) and handler.plugin) \
                or owner is None:
            continue
        if handler.plugin != owner:
            raise DeclarationError(f"plugin {owner!r} routes {route[0]} to {handler.__name__}, a page of the "
                                   f"plugin {handler.plugin!r}: a page renders only its own plugin's templates")
        pages.setdefault(handler, owner)
    return pages


def page_name(plugin: str, name: str) -> str:
    """``<plugin>/<name>``, the template a plugin's page renders; PageNameError for a name that
    could leave the plugin's folder (``..``, absolute, anything but plain path parts)."""
    if not isinstance(name, str) or not PAGE_NAME.match(name):
        raise PageNameError(f"page name {name!r} of plugin {plugin!r} is not a template of its own folder "
                         "(plain names and sub-folders ending in .html)")
    return f"{plugin}/{name}"


class PageHandler(BaseHandler):
    """Base of every HTML page. `auth` stays None (the core does not authenticate): the
    session is looked up here and is optional unless `login_required` (signed-out visitors
    are welcome otherwise); state-changing requests must be a form with the session's CSRF
    token in the hidden `_csrf` field (`csrf_field` and `csrf` in every template).

    A plugin's page sets `plugin` to its plugin's name, answers GET with ``render_page``
    and a form's POST with ``submit`` (then ``see_other``)."""

    #: The plugin whose template folder the page's templates are in (`cr_web_folders`).
    plugin: str = ""
    #: Flash messages: ``see_other(url, done="posted")`` leads to a page that shows
    #: ``notices["posted"]`` (as `notice`; the site's ``?done=`` pattern: only fixed words).
    notices: dict[str, str] = {}
    login_required = False
    serves_html = True  # pages for people: not in the OpenAPI document
    #: True: the page's form may send files (``<form method="post" enctype="multipart/form-data">``).
    #: Its fields are then in `form` as any form's, and its files in `files`: ``{name:
    #: [HTTPFile]}``, each with ``filename``, ``content_type`` (what the browser claims) and
    #: ``body`` (bytes). Set `max_body` (bytes), or override ``body_limit()``, to the largest
    #: body you take, the multipart framing included: the default refuses a body over
    #: `server.max_body_bytes` (413, before it is read). Treat what arrives as
    #: untrusted: check its size and kind yourself, and re-encode what you keep (an image
    #: through Pillow, as the site's own picture forms do).
    accepts_files = False
    form: dict[str, str]
    form_lists: dict[str, list[str]]   # every value of each field (checkbox groups)
    files: dict[str, list[Any]]
    session_ended = False

    async def admit(self) -> None:
        """The core's checks (body cap, rate limits; `auth` is None so no credentials),
        then the optional session. Refusals raised here reach `write_error` as pages."""
        self.form, self.form_lists, self.files = {}, {}, {}
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
        header = self.request.headers.get("Content-Type", "")
        ctype = header.split(";")[0].strip().lower()
        if ctype == FILES_FORM_TYPE and self.accepts_files:
            return self._parse_files_form(header)
        if ctype != FORM_TYPE:
            raise ApiError(415, "unsupported_media_type", "Send the form as " + FORM_TYPE
                           + (" or " + FILES_FORM_TYPE if self.accepts_files else "") + ".")
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "bad_request", "The form is not UTF-8.") from None
        try:
            fields = parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
        except ValueError:
            raise ApiError(400, "bad_request", "The form has too many fields.") from None
        return fields

    def _parse_files_form(self, header: str) -> dict[str, list[str]]:
        """A ``multipart/form-data`` body (`accepts_files`): its fields, its files into `files`."""
        raw: dict[str, list[bytes]] = {}
        files: dict[str, list[Any]] = {}
        try:
            parse_body_arguments(header, self.body, raw, files)
        except Exception:  # noqa: BLE001 - HTTPInputError and the like: not a form a browser sends
            raise ApiError(400, "bad_request", "The form could not be read.") from None
        if sum(map(len, raw.values())) + sum(map(len, files.values())) > MAX_FORM_FIELDS:
            raise ApiError(400, "bad_request", "The form has too many fields.")
        try:
            fields = {k: [v.decode("utf-8") for v in vs] for k, vs in raw.items()}
        except UnicodeDecodeError:
            raise ApiError(400, "bad_request", "The form is not UTF-8.") from None
        self.files = files
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
        """The signed-in person (``did``, ``handle``), or None."""
        if self.principal is None:
            return None
        return {"did": self.principal.did, "handle": self.principal.handle or self.principal.did}

    async def person_names(self, dids: Any) -> dict[str, str]:
        """How the site names people, for a page of yours: ``{did: handle}`` from the
        profile cache the member pages read (the communities service's `profiles`), the
        DID itself for a person the site does not know (or without the communities plugin).
        Ask only for people the viewer may see (`CommunitiesService.visibility`)."""
        wanted = list(dict.fromkeys(dids))
        known: dict[str, Any] = {}
        service = getattr(self.app, "communities", None)
        if service is not None and wanted:
            known = await service.profiles(wanted[:1000])
        return {did: ((known.get(did) or {}).get("handle") or did) for did in wanted}

    async def settings_layout(self, community_did: str) -> dict[str, Any]:
        """The values that make a page of yours one of the community's settings pages (its
        template extends ``settings_base.html`` and fills ``{% block section %}``): the
        sections the signed-in person may open, your `community.settings` links, the
        community's name. Pass them to `render_page` with your own values (``**layout``).
        Check first that the person may see your page: the layout itself refuses nobody.
        Empty without a plugin that draws the site's pages."""
        opened = self.app.pm.hook.cr_settings_layout(handler=self, community_did=community_did)
        return dict(await opened) if opened is not None else {}

    def next_path(self) -> str:
        """Where to come back to after signing in: the page itself, or for a form, the
        page the form belongs to (`form_page`)."""
        if self.request.method == "GET":
            return safe_next(self.request.uri) or "/"
        return self.form_page()

    def form_page(self) -> str:
        """The page a POST route's form is on: where a visitor whose session had ended
        returns after signing in (`next_path`). By default the page itself (the form posts
        to the page it is on, ``<form method="post">`` without an action); override it for
        a form that posts to a route of its own (return the page that shows the form)."""
        return safe_next(self.request.path) or "/"

    def render_page(self, template: str, *, title: str, status: int = 200,
                    sign_in_form: bool = False, **values: Any) -> None:
        """Answer with `template` of this plugin's folder in the site's layout."""
        if not self.plugin:
            raise TypeError(f"{type(self).__name__} sets no `plugin`: whose templates would it render?")
        owner = self.app.page_plugins.get(type(self).route_class())
        if owner is not None and self.plugin != owner:   # `plugin` changed after start-up
            raise PageNameError(f"{type(self).__name__} is a page of the plugin {owner!r}: it renders no "
                                f"templates of {self.plugin!r}")
        values.setdefault("notice", self.notices.get(self.get_query_argument("done", "")))
        self.render_site_page(page_name(self.plugin, template), title=title, status=status,
                              sign_in_form=sign_in_form, **values)

    def render_site_page(self, page: str, *, title: str, status: int = 200, sign_in_form: bool = False,
                         **values: Any) -> None:
        """Answer with one of the site's pages by name (``error``, ``signin``), or a
        plugin's ``<plugin>/<template>``, through `cr_render_page`; plain text without a
        plugin that draws pages."""
        values = {**values, "me": self.me, "csrf": self.principal.csrf_token if self.principal else "",
                  "sign_in_form": sign_in_form}
        answered = self.app.pm.hook.cr_render_page(handler=self, page=page, title=title, status=status,
                                                   values=values)
        if not answered:
            if status != 200:
                self.set_status(status)
            self.put_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(f"{title}\n")

    def see_other(self, url: str, *, done: str | None = None) -> None:
        """Redirect-after-post: 303, so a reload does not send the form again; `done` names
        the flash message (`notices`) the next page shows."""
        if done is not None:
            url += ("&" if "?" in url else "?") + urlencode({"done": done})
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
            self.render_site_page("signin", title="Sign in to continue", status=status,
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
        elif status == 403:  # any refusal, a plugin's own codes too (not_member, not_allowed...)
            kind, heading = "forbidden", "You do not have permission for this"
        elif status == 410:  # gone for good, e.g. a community handed over to another instance
            kind, heading = "gone", "No longer here"
        elif status == 429:
            kind, heading = "rate_limited", "Too many requests"
        elif status >= 500:
            kind, heading = "internal", "Something went wrong"
        else:
            kind, heading = "bad_request", "That did not work"
        needs = [d["capability"] for d in (exc.details or []) if isinstance(d, dict) and "capability" in d] \
            if isinstance(exc, ApiError) else []
        back = safe_next(self.request.path) or "/"
        if kind == "forbidden":  # the page itself is refused: back to the community
            back = "/".join(back.split("/")[:3]) if back.startswith("/c/") else "/"
        self.render_site_page("error", title=heading, status=status, kind=kind, heading=heading,
                              message=message, back=back, needs=needs)
