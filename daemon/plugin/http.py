"""Handlers beyond `BaseHandler`'s everyday use: a handler's request logic outside it (a WebSocket
handler), lean routes, more schema pieces for `operation`, answers that are a page to a browser, and
the refusals the communities service's answers lead to.

    from daemon.plugin.http import LeanHandler, Response, enum_of

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.http.base import decode_cursor, encode_json, error_for, RequestLogic, SERVER_HEADER, strip_spoofing
from daemon.http.lean import LeanHandler
from daemon.http.openapi import (ANY, CURSOR, DATETIME_OR_NULL, enum_of, error_or_page, EVENT_KIND, header,
                                 html, redirect, Response)
from daemon.security.access import APP_NOT_TRUSTED, NOT_FOUND, ROSTER_HIDDEN

__all__ = [
    "RequestLogic", "SERVER_HEADER", "encode_json", "error_for", "LeanHandler", "decode_cursor", "header",
    "Response", "html", "redirect", "CURSOR", "ANY", "EVENT_KIND", "enum_of", "error_or_page",
    "DATETIME_OR_NULL", "strip_spoofing", "NOT_FOUND", "APP_NOT_TRUSTED", "ROSTER_HIDDEN",
]
