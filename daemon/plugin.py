"""The public plugin API: everything a Commonroom plugin imports, from one module.

    from daemon.plugin import hookimpl, BaseHandler, ApiError, operation, obj, STRING

What this module exports (its ``__all__``) is the promise made to plugin authors: names
stay, and a change to them is announced in the changelog. Every other module of
``daemon`` and ``store`` is internal and may change between releases without notice;
the built-in plugins are held to the same rule (``tests/test_plugin_api.py``), with the
remaining exceptions listed there. The reference is docs/plugins.md, "The plugin API".

This module sits above the core's layers (it re-exports from all of them); nothing in
the core imports it.
"""

from __future__ import annotations

from daemon import __version__, hookimpl
from daemon.atproto.accounts import community_repo, delete_account_tx
from daemon.atproto.proofs import UserMethod, prove_acting_user
from daemon.atproto.syntax import (nsid_problem, is_at_uri, is_cid, is_datetime, is_did, is_handle, is_nsid, is_rkey, is_tid,
                                   new_tid, normalize_handle, require_at_uri, require_did, require_handle,
                                   require_nsid, require_rkey)
from daemon.atproto.writes import (DROP_UNWRITTEN, KEEP, ROLL_BACK, Command, Intent, Plan, Run, WriteKind, pds,
                                   roll_back)
from daemon.base import ApiError, Principal
from daemon.http.lean import LeanHandler
from daemon.http.base import (SERVER_HEADER, BaseHandler, RequestLogic, decode_cursor, encode_cursor, encode_json, error_for,
                              invalid, strip_spoofing, validate)
from daemon.http.openapi import (ANY, BOOLEAN, CURSOR, EVENT_KIND, DATETIME, DATETIME_OR_NULL, DID, INTEGER, NO_CONTENT,
                                 STRING, STRING_OR_NULL, Response, arr, enum_of, header, html, nullable, obj,
                                 operation, page, query, redirect)
from daemon.runtime.app import Application
from daemon.runtime.cli import add_json_flag, fail, print_rows, progress
from daemon.runtime.config import ConfigError, check_range
from daemon.base import Clock, FakeClock, KeyedLocks, iso
from daemon.runtime.declarations import SLOTS, Capability, EventKind, Link, WebFolders, declared
from daemon.runtime.retention import BATCH as PRUNE_BATCH, PAUSE_SECONDS as PRUNE_PAUSE_SECONDS, prune_in_batches
from daemon.runtime.pages import CSRF_FIELD, FORM_TYPE, PageHandler, PageNameError, SignInRequired, safe_next
from daemon.runtime.events import EVENT_TYPES, AppSet, Audience, Event, decide_audience, emit_tx, event_data_for
from daemon.runtime.services import (DID_PATTERN, AppsService, CommunitiesService, Community, OAuthService,
                                     RecordsService, WebhooksService, WebService)
from daemon.security.access import APP_NOT_TRUSTED, NOT_FOUND, ROSTER_HIDDEN, Actor, MemberStatus
from store.db import Reader, Row, Transaction

#: The pytest plugin with Commonroom's test fixtures: ``pytest_plugins = [TESTING_PLUGIN]``
#: in a plugin's top-level ``tests/conftest.py`` (the same as ``"commonroom_testing"``).
TESTING_PLUGIN = "commonroom_testing"

__all__ = [
    # plugins and hooks
    "hookimpl", "declared", "__version__", "Application",
    # HTTP handlers and their declarations
    "BaseHandler", "ApiError", "Principal", "encode_cursor", "decode_cursor", "DID_PATTERN",
    "operation", "query", "header", "obj", "arr", "nullable", "page", "Response", "html", "redirect",
    "NO_CONTENT", "STRING", "STRING_OR_NULL", "INTEGER", "BOOLEAN", "DATETIME", "DATETIME_OR_NULL", "DID",
    "CURSOR", "ANY", "EVENT_KIND", "enum_of",
    # a route called on every page view, without a Tornado RequestHandler (membership/check)
    "LeanHandler",
    # a handler's request logic outside BaseHandler (e.g. a WebSocket handler) and its answers
    "RequestLogic", "SERVER_HEADER", "encode_json", "error_for",
    # pages for people (the web plugin draws them in the site's layout)
    "PageHandler", "PageNameError", "SignInRequired", "CSRF_FIELD", "FORM_TYPE", "safe_next", "WebFolders", "Link", "SLOTS",
    # validation of input
    "validate", "invalid", "strip_spoofing", "is_did", "is_handle", "is_nsid", "is_tid", "is_rkey", "is_at_uri", "is_cid",
    "is_datetime", "require_did", "require_handle", "require_nsid", "require_rkey", "require_at_uri",
    "normalize_handle", "new_tid", "nsid_problem",
    # who may see what: the rules are the communities service's (`CommunitiesService`: may_see,
    # membership, sees_roster, acts_for_admins, ...); these are the errors its answers lead to
    "NOT_FOUND", "APP_NOT_TRUSTED", "ROSTER_HIDDEN",
    # who hears of an event (decided at its commit; webhooks and the event stream)
    "event_data_for", "AppSet", "Audience", "decide_audience",
    # configuration
    "ConfigError", "check_range",
    # storage
    "Reader", "Row", "Transaction",
    # events
    "emit_tx", "Event", "EVENT_TYPES", "EventKind",
    # acting for a user, writing to repos
    "UserMethod", "prove_acting_user", "Actor", "MemberStatus", "pds", "roll_back", "WriteKind", "Intent",
    "KeyedLocks", "Command", "Plan", "Run", "KEEP", "DROP_UNWRITTEN", "ROLL_BACK",
    # a community's own account: its repo on the PDS, and its rows when it is deleted
    "community_repo", "delete_account_tx",
    # services of the built-in plugins
    "CommunitiesService", "Community", "Capability", "AppsService", "WebhooksService", "OAuthService", "WebService",
    "RecordsService",
    # background clean-up in bounded batches
    "prune_in_batches", "PRUNE_BATCH", "PRUNE_PAUSE_SECONDS",
    # time
    "Clock", "FakeClock", "iso",
    # the command line
    "fail", "progress", "add_json_flag", "print_rows",
    # tests
    "TESTING_PLUGIN",
]
