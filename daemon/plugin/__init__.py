"""The public plugin API: what a Commonroom plugin imports to be a plugin.

    from daemon.plugin import hookimpl, BaseHandler, ApiError, operation, obj, STRING

This module's ``__all__`` (at most sixty names) and its submodules' are the promise made to
plugin authors: names stay, and a change to them is announced in the changelog
(``tests/test_plugin_api.py`` keeps a snapshot). What fewer plugins need is grouped by
purpose in submodules: `daemon.plugin.http` (handlers beyond the everyday), `.pages`,
`.atproto` (identities, repo reads and writes, the network), `.events` (who hears of an
event), `.storage`, `.services` (the other built-ins' services), `.security` (sessions, the
SSRF guard), `.cli` (operator commands), `.testing`. Every other module of ``daemon`` and
``store`` is internal and may change between releases without notice; the built-in plugins
are held to the same rule and import nothing else of the core. The reference is
docs/plugins.md, "The plugin API".

This package sits above the core's layers (it re-exports from all of them); nothing in the
core imports it.
"""

from __future__ import annotations

from daemon import hookimpl
from daemon.atproto.proofs import prove_acting_user, UserMethod
from daemon.atproto.syntax import is_did, require_did
from daemon.base import Alarm, ApiError, iso, Principal
from daemon.http.base import BaseHandler, encode_cursor, invalid, validate
from daemon.http.openapi import (arr, BOOLEAN, DATETIME, DID, INTEGER, NO_CONTENT, nullable, obj, operation,
                                 page, query, STRING, STRING_OR_NULL)
from daemon.runtime.app import Application
from daemon.runtime.config import check_range, ConfigError
from daemon.runtime.dates import moment, when
from daemon.runtime.declarations import Capability, declared, EventKind, Link, WebFolders
from daemon.runtime.events import emit_tx
from daemon.runtime.pages import PageHandler
from daemon.runtime.services import CommunitiesService, Community, DID_PATTERN, Visibility
from daemon.security.access import Actor, MemberStatus
from store.db import Reader, Row, Transaction

from daemon.runtime.plugins import API_VERSION  # the plugin API's version: docs/plugins.md, "Compatibility"

__all__ = [
    "hookimpl", "declared", "Application", "BaseHandler", "ApiError", "Principal", "operation", "query", "obj",
    "arr", "nullable", "page", "STRING", "STRING_OR_NULL", "INTEGER", "BOOLEAN", "DATETIME", "DID",
    "NO_CONTENT", "encode_cursor", "DID_PATTERN", "validate", "invalid", "is_did", "require_did", "PageHandler",
    "WebFolders", "Link", "when", "moment", "EventKind", "emit_tx", "Capability", "CommunitiesService",
    "Community", "Visibility", "Actor", "MemberStatus", "UserMethod", "prove_acting_user", "ConfigError",
    "check_range", "Reader", "Row", "Transaction", "Alarm", "iso",
    "API_VERSION",
]
