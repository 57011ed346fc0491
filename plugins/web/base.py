"""What every page shares: the optional session, forms with the CSRF token in a hidden
field, the layout, the Content-Security-Policy and HTML error pages.

Pages are Tornado templates over plain data: a handler calls the same services the JSON
routes call and hands the template dictionaries and lists; templates hold no rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from tornado.escape import xhtml_escape

from daemon.plugin import BaseHandler, CommunitiesService
from daemon.plugin.http import strip_spoofing
from daemon.plugin.pages import CSRF_FIELD, FORM_TYPE, SignInRequired, safe_next
from daemon.plugin.services import AppsService, WebhooksService
from daemon.plugin import PageHandler as CorePageHandler
from plugins.web.assets import web_assets
from plugins.web.dates import moment, when
from plugins.web.slots import slot_links

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
        # the links plugins add to a named place (`cr_web_links`): links("community.page", community=...)
        "links": lambda slot, **slot_values: slot_links(handler.app, slot, {"me": me, "app": handler.app,
                                                                            **slot_values}),
        # every {{ }} of a page: names from the network (profiles) lose their direction
        # overrides and zero-width spaces (daemon.http.base.SPOOFING_CHARS)
        "xhtml_escape": shown_escape,
        "when": when, "moment": moment, "needs": [], "holds": None,
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


class PageHandler(CorePageHandler):
    """Base of the web plugin's own pages: the core's page handler (daemon.plugin.PageHandler:
    the optional session, forms and their CSRF token, errors as pages), drawing the site's
    own templates directly, with the services the pages are a layer over."""

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

    # ---------------------------------------------------------------- output

    def render_page(self, template: str, *, title: str, status: int = 200,
                    sign_in_form: bool = False, **values: Any) -> None:
        render_html(self, template, title=title, status=status, sign_in_form=sign_in_form, me=self.me,
                    csrf=self.principal.csrf_token if self.principal else "", **values)

    def render_site_page(self, page: str, *, title: str, status: int = 200, sign_in_form: bool = False,
                         **values: Any) -> None:
        self.render_page(f"{page}.html", title=title, status=status, sign_in_form=sign_in_form, **values)
