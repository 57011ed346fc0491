"""The public plugin API: everything a Commonroom plugin imports, from one module.

    from daemon.plugin import hookimpl, BaseHandler, ApiError, operation, obj, STRING

What this module exports (its ``__all__``) is the promise made to plugin authors: names
stay, and a change to them is announced in the changelog. Every other module of
``daemon`` and ``store`` is internal and may change between releases without notice;
the built-in plugins are held to the same rule (``tests/test_plugin_api.py``) and import
nothing else of the core. The reference is docs/plugins.md, "The plugin API".

This module sits above the core's layers (it re-exports from all of them); nothing in
the core imports it.
"""

from __future__ import annotations

from daemon import __version__, hookimpl
from daemon.atproto.accounts import (CommunityAccount, bring_own_account, community_repo, delete_account_tx,
                                     fetch_handle_domain, forget_account, provision_account)
from daemon.atproto.identity import DidInfo, require_known_did, resolve_did, resolve_identity
from daemon.atproto.pds import blob_cid, blob_url, get_record, read_user_profile
from daemon.atproto.proofs import UserMethod, prove_acting_user
from daemon.atproto.syntax import (nsid_problem, is_at_uri, is_cid, is_datetime, is_did, is_handle, is_nsid, is_rkey, is_tid,
                                   new_tid, normalize_handle, require_at_uri, require_did, require_handle,
                                   require_nsid, require_rkey)
from daemon.atproto.writes import (DROP_UNWRITTEN, KEEP, ROLL_BACK, Command, Intent, Plan, Run, WriteKind, pds,
                                   roll_back)
from daemon.base import Alarm, ApiError, Clock, FakeClock, KeyedLocks, Principal, iso
from daemon.http.base import (SERVER_HEADER, SID_COOKIE, BaseHandler, RequestLogic, decode_cursor, encode_cursor,
                              encode_json, error_for, invalid, strip_spoofing, validate)
from daemon.http.lean import LeanHandler
from daemon.http.openapi import (ANY, BOOLEAN, CURSOR, EVENT_KIND, DATETIME, DATETIME_OR_NULL, DID, INTEGER, NO_CONTENT,
                                 STRING, STRING_OR_NULL, Response, arr, enum_of, error_or_page, header, html, nullable,
                                 obj, operation, page, query, redirect)
from daemon.runtime.app import Application
from daemon.runtime.cli import add_json_flag, fail, print_rows, progress
from daemon.runtime.config import ConfigError, check_range
from daemon.runtime.declarations import SLOTS, Capability, EventKind, Link, WebFolders, declared
from daemon.runtime.events import (EVENT_TYPES, AppSet, Audience, Event, Outbox, decide_audience, emit_tx,
                                   event_data_for)
from daemon.runtime.dates import moment, when
from daemon.runtime.pages import CSRF_FIELD, FORM_TYPE, PageHandler, PageNameError, SignInRequired, safe_next
from daemon.runtime.retention import BATCH as PRUNE_BATCH, PAUSE_SECONDS as PRUNE_PAUSE_SECONDS, prune_in_batches
from daemon.runtime.services import (DID_PATTERN, AppsService, CommunitiesService, Community, OAuthService, Visibility,
                                     RecordsService, WebhooksService, WebService)
from daemon.security.access import APP_NOT_TRUSTED, NOT_FOUND, ROSTER_HIDDEN, Actor, MemberStatus
from daemon.security.netguard import AddressRefused, Guard, GuardedTransport, RequestRefused, Target, TargetRefused
from daemon.security.sessions import (NewSession, authenticate_session, clear_session_cookies, create_session,
                                      end_session, set_session_cookies)
from daemon.sync.events import Interest, RecordOp, SyncEvent
from store.apps import AppsTable
from store.db import Reader, Row, Transaction, VersionedCache, narrowed
from store.sync import record_account_status_tx

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
    # an answer that is JSON to an API client and an HTML page to a browser's form post
    "error_or_page",
    # a route called on every page view, without a Tornado RequestHandler (membership/check)
    "LeanHandler",
    # a handler's request logic outside BaseHandler (e.g. a WebSocket handler) and its answers
    "RequestLogic", "SERVER_HEADER", "encode_json", "error_for",
    # pages for people (the web plugin draws them in the site's layout)
    "PageHandler", "PageNameError", "SignInRequired", "CSRF_FIELD", "FORM_TYPE", "safe_next", "WebFolders", "Link", "SLOTS",
    "when", "moment",
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
    "Reader", "Row", "Transaction", "narrowed",
    # events
    "emit_tx", "Event", "EVENT_TYPES", "EventKind",
    # acting for a user, writing to repos
    "UserMethod", "prove_acting_user", "Actor", "MemberStatus", "pds", "roll_back", "WriteKind", "Intent",
    "KeyedLocks", "Command", "Plan", "Run", "KEEP", "DROP_UNWRITTEN", "ROLL_BACK",
    # a community's own account: its repo on the PDS, and its rows when it is deleted
    "community_repo", "delete_account_tx",
    # services of the built-in plugins
    "CommunitiesService", "Community", "Visibility", "Capability", "AppsService", "WebhooksService", "OAuthService", "WebService",
    "RecordsService",
    # identities and public repo reads: any DID's document and handle, a person's profile, records, blobs
    "DidInfo", "resolve_identity", "resolve_did", "require_known_did", "read_user_profile", "get_record",
    "blob_cid", "blob_url",
    # browser sessions: the `sid` and `csrf-token` cookies (the oauth plugin signs people in with them)
    "SID_COOKIE", "NewSession", "create_session", "authenticate_session", "end_session",
    "set_session_cookies", "clear_session_cookies",
    # outbound requests through the SSRF guard (`app.http` is a guarded client; these build another)
    "Guard", "Target", "GuardedTransport", "TargetRefused", "AddressRefused", "RequestRefused",
    # background clean-up in bounded batches
    "prune_in_batches", "PRUNE_BATCH", "PRUNE_PAUSE_SECONDS",
    # time
    "Clock", "FakeClock", "Alarm", "iso",
    # the command line
    "fail", "progress", "add_json_flag", "print_rows",
    # tests
    "TESTING_PLUGIN",
    # core tables plugins may read (docs/plugins.md, "Storage"), and a cache of rarely changing rows
    "AppsTable", "Outbox", "VersionedCache",
    # following the network: what a plugin subscribes to, what it receives, the accounts it reports gone
    "Interest", "SyncEvent", "RecordOp", "record_account_status_tx",
    # accounts a plugin owns on the PDS (a community's): create, bring, forget
    "CommunityAccount", "provision_account", "bring_own_account", "fetch_handle_domain", "forget_account",
]
