"""Every hook a Commonroom plugin can implement.

A plugin is a module (or object) with functions decorated by `daemon.hookimpl`. The
built-in features are plugins too (see `daemon.runtime.plugins.DEFAULT_PLUGINS`); third-party
plugins arrive through the entry-point group `commonroom.plugins`.

How asynchronous implementations are called
--------------------------------------------
pluggy calls implementations synchronously. An ``async def`` implementation therefore
returns a coroutine object, which is never None. The rules are:

* **Broadcast hooks** (every hook below except `cr_authenticate` and `cr_user_repo`): an implementation may
  return a plain value or an awaitable. The daemon awaits every awaitable result, in the
  order pluggy returns them (see `daemon.runtime.app.call_hook`). ``async def`` is fine.
* **First-result hooks** (`cr_authenticate`, `cr_user_repo`, `cr_settings_layout`): the implementation must decide
  *synchronously* whether the request is its kind of credential. It returns None to pass,
  or an awaitable that completes the check (`cr_authenticate` may instead return the
  `Principal` itself when it knows it at once, or raise its 401 at once; a hook wrapper
  sees whichever it returned). An ``async def`` implementation would claim
  every request, so plain ``def`` is required; the plugin manager rejects ``async def``
  implementations of this hook at start-up.

Ordering: pluggy calls the last registered plugin first. Use ``tryfirst=True`` /
``trylast=True`` where order matters; hooks that do network I/O should be ``trylast``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application
    from daemon.runtime.config import Config
    from daemon.runtime.declarations import Capability, EventKind, Link, WebFolders
    from daemon.runtime.events import Event
    from daemon.atproto.writes import WriteKind
    from daemon.base import Principal
    from daemon.http.base import BaseHandler
    from daemon.sync import Interest, SyncEvent
    from store.db import Transaction

hookspec = pluggy.HookspecMarker("commonroom")

# ------------------------------------------------------------------ configuration


@hookspec
def cr_config_section() -> tuple[str, type] | None:
    """Declare the plugin's own section of `config.yaml`.

    :return: ``(key, dataclass)``: the top-level key and a frozen dataclass whose fields
        (with defaults) describe the section, or None for no section. The parsed value is
        available as ``app.config.plugin(key)``. Every field must be documented in
        ``docs/configuration.md`` (a test checks the built-in plugins).
    """


# ------------------------------------------------------------------ plugins


@hookspec
def cr_plugin_requires() -> list[str] | None:
    """Name the plugins this plugin cannot work without.

    Called once per plugin while the plugin manager is built (each implementation on its
    own, so the loader knows whose requirements it reads). Declare a plugin you need when
    your tables reference its tables, your routes answer about its objects, or your code
    calls a service it registers; not for something merely nice to have.

    :return: plugin names (a built-in's name such as ``"communities"``, or another
        plugin's entry-point name), or None for none. Start-up fails, naming both
        plugins, when one of them is disabled in ``plugins.disabled`` or not installed,
        or when requirements form a cycle. Migrations of a required plugin are applied
        before yours (see `cr_migrations`).
    """


@hookspec
def cr_plugin_api_version() -> str | None:
    """Say which versions of the plugin API (`daemon.plugin.API_VERSION`, ``"MAJOR.MINOR"``)
    this plugin works with, as a range: ``">=1.0,<2"`` (comma-separated conditions, each
    ``>=``, ``>``, ``<=``, ``<``, ``==`` or ``!=`` and a version).

    Called once per plugin while the plugin manager is built. A minor version adds to the
    API; a major one may remove or change names (docs/plugins.md, "Compatibility"), so
    ``>=1.N,<2`` (N: the minor version whose additions you use) is the usual answer. Start-up
    fails, naming both versions, when the running Commonroom's API is outside the range.

    :return: the range, or None (no declaration: any version, at your plugin's risk).
    """


# ------------------------------------------------------------------ declarations


@hookspec
def cr_event_kinds() -> "list[EventKind] | None":
    """Declare the kinds of domain event the plugin emits (with `emit_tx`).

    Called once per plugin at start-up, before any migration runs. Declared kinds are
    what apps may subscribe to (webhooks: the API, the developer pages with each kind's
    label, the OpenAPI enum) and are delivered signed like the built-in ones; the built-in
    kinds (``member.*``, ``record.*``) are declared the same way by their plugins.

    :return: a list of `daemon.plugin.EventKind` (name ``<prefix>.<what>``, description,
        JSON schema of the event's ``data``, label), or None. A kind declared twice, by one
        plugin or two, or a malformed name stops start-up naming the plugin and the kind.
    """


@hookspec
def cr_capabilities() -> "list[Capability] | None":
    """Declare capabilities: things a member may be allowed to do in a community, which
    the plugin checks with ``app.communities.holds(actor, community, name)``.

    Called once per plugin at start-up, before any migration runs. Declared capabilities
    are in the catalogue (docs/communities.md, "Roles and capabilities"): admins hold all of
    them, custom roles may grant them, and those declared with ``moderator=True`` are held
    by the built-in moderator role.

    :return: a list of `daemon.plugin.Capability` (name ``<plugin>.<what>``, description,
        ``moderator``), or None. A capability declared twice or a malformed name stops
        start-up naming the plugin and the capability.
    """


@hookspec
def cr_lexicons() -> "str | None":
    """Ship the plugin's lexicons: the schemas of the methods it acts by for a user (and of
    the records it writes).

    Called once per plugin at start-up, before any migration runs. A route that acts in a
    user's name under the plugin's own NSID authority (``UserMethod("com.example.notices.post",
    "userDid")``) must have a lexicon of that id, a ``query`` or ``procedure``; the start-up
    refuses it otherwise, and two plugins shipping one id.

    :return: a directory of ``<nsid>.json`` lexicon files, or None.
    """


@hookspec
def cr_web_folders() -> "WebFolders | None":
    """Ship templates and static files for the plugin's pages (docs/plugins.md, "Pages").

    Called once per plugin at start-up, before any migration runs; the web plugin compiles
    the templates then (a broken template, or one naming a file outside the folders, stops
    start-up). A page (`daemon.plugin.PageHandler` with ``plugin = "<name>"``) renders only
    templates of its own folder.

    :return: `daemon.plugin.WebFolders` (``templates``, ``static``: directories), or None.
    """


@hookspec
def cr_web_links() -> "list[Link] | None":
    """Add links to named places of the site's pages (`daemon.plugin.pages.SLOTS`: the site's
    navigation, a community's page, its settings, a member's row of actions, a person's
    home). The built-in web plugin adds its own navigation the same way.

    Called once per plugin at start-up, before any migration runs. An unknown slot, or one
    link added to a slot twice, stops start-up naming the plugin.

    :return: a list of `daemon.plugin.Link` (slot, label, href, when), or None.
    """


# ------------------------------------------------------------------ storage


@hookspec
def cr_migrations() -> tuple[str, str] | None:
    """Declare the plugin's SQL migrations.

    :return: ``(component, directory)``: a component name unique to the plugin and a
        directory holding ``NNNN_description.sql`` files, applied in numeric order once
        each and recorded per component. A database that has a higher version of the
        component than the files know is refused at start-up. Return None for none.
        Components are applied core first, then plugin by plugin in dependency order
        (`cr_plugin_requires`): a migration may use the tables of the plugins its plugin
        requires, never those of others.
    """


# ------------------------------------------------------------------ HTTP


@hookspec
def cr_routes(app: "Application") -> list[tuple] | None:
    """Contribute HTTP routes.

    :param app: the application being built (config, store, clock, plugin manager).
    :return: a list of Tornado route tuples ``(pattern, HandlerClass[, kwargs])``. Handlers
        should subclass `daemon.http.base.BaseHandler` so errors, auth, CSRF, body limits and
        rate limits behave like every other route. Route patterns must be unique.
    """


@hookspec(firstresult=True)
def cr_authenticate(handler: "BaseHandler") -> "Principal | Awaitable[Principal | None] | None":
    """Claim and check the credentials on a request.

    Called once per request before the handler method. Stops at the first non-None result.

    :param handler: the request being served: a `daemon.http.base.BaseHandler`, or for the few
        lean routes a `daemon.http.lean.LeanHandler`. Use only what both offer:
        ``handler.request`` (headers, ``remote_ip``, method, path), ``handler.get_cookie(name)``
        and ``handler.app``.
    :return: None if the request does not carry this plugin's kind of credential (another
        plugin may claim it); the `daemon.http.base.Principal` when the plugin knows it at
        once (a credential it checked recently, from its cache: the request goes on without
        a coroutine); otherwise an awaitable that resolves to a `daemon.http.base.Principal`,
        or raises `daemon.http.base.ApiError` (401) when the credential is present but
        invalid (the hook may also raise it at once; either way it counts towards the
        client address's failed-authentication budget). Must be a plain ``def`` (see the
        module docstring).
    """


@hookspec(firstresult=True)
def cr_not_found(handler: "BaseHandler") -> bool | None:
    """Answer a request that no route matched, instead of the core's JSON 404.

    Called by the default handler (`daemon.http.base.NotFoundHandler`) as it answers 404, with
    the status already set. Stops at the first non-None result. The web plugin answers
    browsers (``Accept: text/html``) asking for a page path with an HTML page; API paths
    keep the JSON error.

    :param handler: the default handler; ``handler.request`` says what was asked for.
        No credentials have been checked.
    :return: True after writing the whole answer (``handler.finish(...)``, with its own
        headers); None to leave the JSON 404 to the core. Must be a plain ``def``: an
        awaitable result is ignored (and the JSON 404 sent).
    """


@hookspec(firstresult=True)
def cr_render_page(handler: "BaseHandler", page: str, title: str, status: int,
                   values: dict[str, Any]) -> bool | None:
    """Answer `handler` with one of the site's pages, in its layout (a plugin that serves
    a page of its own, such as the oauth plugin's login failure, asks for it by name).

    :param handler: the handler to finish.
    :param page: the page's name: one of the site's (the web plugin renders ``<page>.html`` of
        its templates: ``error``, ``signin``, ``login_failed``), or a plugin's own template,
        ``<plugin>/<file>.html`` of its `cr_web_folders` (what `daemon.plugin.PageHandler`
        asks for). `values` hold ``me`` and ``csrf`` for a page with a session.
    :param title: the page's title; `status`: the HTTP status; `values`: what the page shows.
    :return: True after writing the whole answer; None when no plugin knows the page (the
        caller then answers plainly). Stops at the first non-None result. Must be a plain
        ``def``.
    """


# ------------------------------------------------------------------ services


@hookspec
def cr_services(app: "Application") -> dict[str, Any] | None:
    """Register the services the plugin offers other plugins, and its own state.

    Called once, as the Application is built (before `cr_routes`). Plugins never import
    each other's modules: what one plugin offers the others is an object it registers
    here, reached as an attribute of the Application.

    :param app: the application being built (config, store, clock, plugin manager).
    :return: ``{name: service}`` or None. A name in `daemon.runtime.services.SERVICE_NAMES`
        (``communities``, ``apps``, ``webhooks``, ``oauth``, ``web``) sets that typed
        attribute of the Application (``app.communities``...), and the object must offer
        the interface `daemon.runtime.services` declares for it; any other name, which should be
        the plugin's own, is kept in ``app.extensions[name]`` (a third-party plugin's
        state). All results are collected; two plugins registering one name is an error.
    """


# ------------------------------------------------------------------ lifecycle


@hookspec
def cr_startup(app: "Application") -> Awaitable[None] | None:
    """Start background work, after migrations and before the server accepts requests.

    :return: None or an awaitable; all are awaited. Long-running loops must be started as
        tasks, not awaited here: ``app.spawn(coro, name)``, ``app.spawn_periodic(name,
        interval, work)`` or ``app.spawn_deadlines(name, work)`` (docs/plugins.md,
        "Background work"). It runs on a follower too, whose store is read-only
        (``app.read_only``): start no work that writes there (``spawn_deadlines`` skips it
        itself). Not called for an operator's command (`cr_cli_commands`).
    """


@hookspec
def cr_shutdown(app: "Application") -> Awaitable[None] | None:
    """Stop background work. Called after the server stopped accepting requests and the
    in-flight requests finished (or the shutdown timeout passed).

    :return: None or an awaitable; all are awaited, bounded by the shutdown timeout. Work
        not finished by then must be safe to pick up at the next start.
    """


# ------------------------------------------------------------------ writes to repos


@hookspec
def cr_write_kinds(app: "Application") -> "list[WriteKind] | None":
    """Register how each kind of PDS write the plugin makes is settled after a crash.

    Every write to a repo goes through the core's one write path, ``app.writes``
    (`daemon.atproto.writes`): an intent row before the PDS call, the subject's lock,
    one PDS-error policy, and one local transaction that deletes the intent. An intent no
    request finished is handed by the one reconciler to its kind's ``settle``.

    :param app: the application (read the plugin's config from it).
    :return: a list of `daemon.atproto.writes.WriteKind` (name ``<plugin>.<what>``, the
        ``settle`` coroutine, how old an intent must be before it is settled, the backoff
        limit, the other locks settling needs), or None. All results are collected once,
        at the first write or reconciliation; two kinds of the same name are an error.
    """


@hookspec(firstresult=True)
def cr_settings_layout(handler: "BaseHandler", community_did: str) -> "Awaitable[dict[str, Any]] | None":
    """What a community's settings layout needs (the sections the signed-in person may open,
    the community's name and address), so a plugin's page can be one of the settings pages:
    its template extends ``settings_base.html`` and fills ``{% block section %}``. Reached
    through ``await PageHandler.settings_layout(community_did)``.

    :return: None (no plugin draws the site's pages), or an awaitable resolving to the values
        to pass to `render_page`. A plain ``def`` (first result).
    """


@hookspec(firstresult=True)
def cr_user_repo(app: "Application", principal: "Principal") -> "Awaitable[Any] | None":
    """Open the repository of a signed-in user, to write records there with their grant
    (the browser's join and leave write the user's own membership record). Reached
    through ``app.writes.user_repo(principal)``.

    Stops at the first non-None result. Must be a plain ``def`` (see the module docstring).

    :param app: the application.
    :param principal: the browser session (``kind == "session"``, ``did``, ``session_id``).
    :return: None if this plugin holds no grants; otherwise an awaitable resolving to a
        repo object with ``did``, ``put_record(collection, rkey, value)`` and
        ``delete_record(collection, rkey)``, or raising `daemon.http.base.ApiError` (403) when
        the session has no grant that may write there.
    """


# ------------------------------------------------------------------ policy


@hookspec
def cr_check_action(app: "Application", action: str, actor_did: str | None, community_did: str | None,
                    app_id: str | None) -> Awaitable[None] | None:
    """Asked before a person acts on (or for) a community, so any plugin can apply an
    instance-wide policy without knowing which plugin carries the action out: raise
    ``ApiError`` (e.g. 403 with a code of your own) to refuse, return None to let it be.

    Callers ask through ``app.check_action(action, actor_did, community_did=..., app_id=...)``
    before they change anything. The actions asked (docs/plugins.md, "Actions asked"):
    ``session.sign_in`` (the OAuth callback, before the session is made), ``community.create``
    (``community_did`` None; before any account is made), ``community.join`` and
    ``community.request`` (a join of an open community or with an invite, and a request to
    join one that approves; the API, the pages and the sync), ``membership.sync`` (the sync,
    before a membership record a person wrote is applied), ``member.add`` (an admin approves
    a request: `actor_did` is the person added), ``community.update`` (profile, pictures,
    settings, roles, invites, app grants), ``record.write`` (a record created, changed or
    deleted in the community's repo) and ``report.create``. `app_id`: the app acting for the
    person, None for the site's own pages.

    :return: None or an awaitable; all are awaited, in plugin order; the first raise wins.
    """


@hookspec
def cr_hold_action(app: "Application", action: str, actor_did: str | None, app_id: str | None,
                   data: dict[str, Any]) -> Awaitable[dict[str, Any] | None] | None:
    """Asked after `cr_check_action` let an action be: a plugin may hold it for someone's
    approval instead of letting it happen now (the ``instance`` plugin's ``approval``
    creation policy keeps a creation request).

    Callers ask through ``app.hold_action(action, actor_did, app_id=..., data=...)``.
    Actions asked today: ``community.create`` (`data`: the creation's fields as
    ``CommunitiesService.create_fields`` gives them). A holder keeps what it needs of `data`
    and answers what the caller tells the person (the API answers 202 with it; the site's
    form goes to the home page).

    :return: None to let the action happen, or (an awaitable of) a dict describing the held
        action (``id``, ``state``, ``message``); the first such answer wins.
    """


@hookspec
def cr_community_notices(app: "Application", community_did: str, viewer_did: str | None,
                         admin: bool) -> "Awaitable[list[dict[str, str]]] | list[dict[str, str]] | None":
    """Notices shown at the top of a community's page and its settings (the web plugin), e.g.
    that an operator suspended it and why. `viewer_did`: the signed-in person (None: signed
    out); `admin`: they are one of its admins (tell them what they may do about it).

    :return: ``[{"title": ..., "text": ...}]`` (plain text; ``"closed": True`` too when the
        community takes no one now: the page offers no join), an awaitable of it, or None;
        all plugins' notices are shown, in plugin order.
    """


@hookspec
def cr_page_notes(app: "Application", page: str, person_did: str) -> Awaitable[list[dict[str, Any]] | None] | None:
    """What a plugin tells a signed-in person on one of the site's pages: ``home`` (things of
    theirs it holds; the ``instance`` plugin: the state of their creation requests) or
    ``new`` (before the creation form; the ``instance`` plugin: that a creation waits for
    approval).

    :param page: ``home`` or ``new``.
    :param person_did: the signed-in person.
    :return: None or (an awaitable of) a list of ``{"text": str, "href": str | None}``: one
        short sentence each, shown in order under the page's heading.
    """


@hookspec
def cr_withheld_communities(app: "Application") -> "Awaitable[Iterable[str]] | Iterable[str] | None":
    """Communities to leave out of discovery and search (``GET /api/v1/communities``, the
    site's /discover), e.g. while an operator suspends them; they stay reachable by DID,
    their pages show what the plugins that withhold them say. Asked on every listing:
    answer from an index (a few rows).

    :return: DIDs (or an awaitable of them), or None; the union of all answers is left out.
    """


# ------------------------------------------------------------------ domain events


@hookspec
def cr_event_tx(app: "Application", tx: "Transaction", event: "Event") -> Awaitable[None] | None:
    """Observe a domain event inside the transaction that records it.

    The event row is already written in ``tx``; anything written through ``tx`` commits or
    rolls back together with the change that caused the event (the webhook plugin writes
    its delivery rows here, so an event is never lost or invented). Raising aborts the
    whole change. Do no network I/O here.

    :return: None or an awaitable; all are awaited before the transaction commits.
    """


@hookspec
def cr_event(app: "Application", event: "Event") -> Awaitable[None] | None:
    """Observe a domain event after its transaction committed.

    For in-memory reactions (waking a delivery loop, metrics). Exceptions are logged and
    do not affect the request that caused the event.

    :return: None or an awaitable; all are awaited.
    """


@hookspec
def cr_events_needed(app: "Application") -> Awaitable[int | None] | None:
    """The lowest event ``seq`` this plugin still needs in the events outbox, or None.

    Retention (``events.retention_days``, docs/events.md) prunes old events in batches and
    never removes an event whose ``seq`` is at or above the lowest answer: the webhooks
    plugin answers with the oldest event a pending delivery still has to send. Keep it
    cheap (one indexed query); it runs once per pruning pass.

    :return: an int, None (nothing needed), or an awaitable of either; all are awaited.
    """


# ------------------------------------------------------------------ sync with the network


@hookspec
def cr_sync_interest(app: "Application") -> "Interest | None":
    """Say what the plugin wants from the network's event stream (docs/sync.md).

    Called once, when the sync starts (``sync.source`` is not ``off``). The sync keeps a
    frame only if its repo is a DID some plugin follows, or if one of its commit's op
    paths is in a collection some plugin names; everything else costs a set lookup and a
    path check.

    :param app: the application.
    :return: a `daemon.sync.Interest`: the plugin's name, ``load(db, mark)`` (the DIDs to
        follow that were added since `mark`, None meaning all, and the next mark; called
        at start and whenever the database changed before a frame is dropped), the
        collections that make any repo's commit relevant, and the collections whose
        records must be decoded. None for no interest. All results are combined.
    """


@hookspec
def cr_sync_events_tx(app: "Application", tx: "Transaction", events: "list[SyncEvent]") -> Awaitable[None] | None:
    """Apply a batch of relevant events of the stream, inside the transaction that saves
    the stream's cursor: a change written through `tx` and the cursor commit together,
    so after a crash the stream resumes exactly after the last applied event.

    Do no network I/O here (the single writer is held). Work that needs the network (a
    PDS write, re-resolving an identity) is made durable here (e.g. a write intent,
    ``app.writes.begin_tx``) and done in `cr_sync_events`, after the commit. Events with
    ``own`` set are commits this service made itself: leave them alone. Raising rolls the
    batch back; the sync tries it again after a backoff, and the cursor does not move.

    :param events: in stream order (`daemon.sync.SyncEvent`: commits, identity and
        account events, and gaps, after which state must be rebuilt from the repos).
    :return: None or an awaitable; all are awaited before the transaction commits.
    """


@hookspec
def cr_sync_events(app: "Application", events: "list[SyncEvent]") -> Awaitable[None] | None:
    """After the batch `events` and its cursor committed: do the work made durable in
    `cr_sync_events_tx` that needs the network. The next batch waits for it, so keep it
    bounded. Exceptions are logged (what was made durable is finished later, e.g. by the
    write reconciler).

    :return: None or an awaitable; all are awaited.
    """


# ------------------------------------------------------------------ handing a community over


@hookspec
def cr_handover_state(app: "Application",
                      community_did: str) -> "tuple[str, Any] | Awaitable[tuple[str, Any] | None] | None":
    """What a plugin keeps of the community `community_did` that is not in its repo and
    should travel with it when it is handed over to another Commonroom (the sealed bundle,
    docs/communities.md "Handing a community over"): e.g. the records index's authors.
    Called under the community's lock, before the bundle is sealed; do no PDS writes.

    :return: ``(name, state)``, `state` JSON-serialisable, `name` the plugin's own key
        (its config section's name), or None when it keeps nothing; or an awaitable of it.
        Every result is carried.
    """


@hookspec
def cr_handover_restore_tx(app: "Application", tx: "Transaction", community_did: str,
                           states: dict[str, Any]) -> Awaitable[list[str] | None] | list[str] | None:
    """Write back, in the importing instance's transaction `tx`, what `cr_handover_state`
    carried: `states` maps each name to its state (a plugin reads its own key, absent when
    the old instance did not run it). The community's index row exists (being rebuilt);
    its members, admins and roles are rebuilt from the repo after this commits. Do no
    network I/O. Raising refuses the import (nothing is written).

    :return: None, or sentences naming what was not restored and why (shown to the
        importer); or an awaitable of either.
    """


# ------------------------------------------------------------------ command line


@hookspec
def cr_metrics(app: "Application", registry: Any) -> Callable[[], Awaitable[None]] | None:
    """Add a plugin's metrics to ``/metrics``. Called once, after the routes are built and
    before ``cr_startup``.

    :param app: the application (keep what you need to update the metrics later).
    :param registry: the app's ``prometheus_client.CollectorRegistry``: pass it as
        ``registry=`` to the ``Counter``/``Gauge``/``Histogram`` you create. Name metrics
        ``commonroom_<plugin>_...``; keep label values bounded.
    :return: None, or an async function with no arguments that is awaited before every
        scrape (to set gauges from the database, for example). All results are collected.
    """


@hookspec
def cr_state_files(config: "Config") -> list[str] | None:
    """Name the files a plugin generates in the state directory that a backup must hold
    for the database to be usable elsewhere (keys, not caches).

    :param config: the loaded configuration (``config.state_dir`` is the directory).
    :return: plain file names inside ``config.state_dir``, or None. All results are
        collected; files that do not exist are skipped. ``commonroom backup`` copies them
        and ``commonroom restore`` puts them back.
    """


@hookspec
def cr_cli_commands() -> dict[str, Any] | None:
    """Add subcommands to the ``commonroom`` command line.

    :return: ``{name: (help, add_arguments(parser) | None, run(app, args) -> awaitable)}``.
        ``run`` gets an application that is built but not started: its store migrated
        (checked, on a follower), its services, routes and declarations in place, and no
        HTTP server, no `cr_startup` and no background work (nothing spawned, no
        reconciler, no sync, no webhook delivery), so a command never races the daemon's
        loops; it is shut down when ``run`` returns. Its result, if an int, is the exit
        status. On a follower the store is read-only: a command that writes fails there.
    """
