"""What plugins declare about themselves, collected once and checked before any migration
runs: the event kinds they emit (`cr_event_kinds`) and the capabilities they check
(`cr_capabilities`). A bad declaration (a name twice, a malformed name, the wrong type)
stops start-up with a `DeclarationError` naming the plugin and the thing, so a plugin that
cannot start never leaves half-applied migrations behind.

The registry is ``app.declarations``; the event kinds are one mapping, ``app.event_kinds``
(name → `EventKind`), which the webhooks plugin and anything else that offers events to
apps read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pluggy

from daemon import hookimpl
from daemon.runtime.plugins import PluginError, results_by_plugin

#: ``<prefix>.<what>``: lower-case words joined by dots, camelCase allowed after the first.
DOTTED_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-zA-Z0-9_]*)+")


#: Who an event kind goes to (`EventKind.audience`).
AUDIENCES = ("community", "managers")


class DeclarationError(PluginError):
    """A plugin declared something twice, or something malformed."""


@dataclass(frozen=True)
class EventKind:
    """A kind of domain event a plugin emits (with `emit_tx`), offered to apps.

    :param name: ``<prefix>.<what>`` (``notice.posted``): the event's ``type``.
    :param description: one sentence for the docs and the API (what happened).
    :param schema: JSON schema of the event's ``data`` (``communityDid`` is added to it).
    :param label: the words of the developer pages' checkbox ("A notice was posted");
        the description when empty.
    :param audience: which apps' webhooks receive it: ``"community"`` (every app that may
        see the community), or ``"managers"`` (only apps the community trusts to act for
        its admins: its creator app and apps granted management).
    :param person_keys: the keys of its ``data`` that name a person (``("authorDid",)``):
        an app that may not see the community's members gets the event without them.
    :param not_person_keys: keys that look like a person (a ``…Did`` name, a DID schema)
        but name something else (a community, a labeller): sent to every app that hears
        of the event. A ``…Did`` or DID-typed key of the schema in neither list stops
        start-up (`check_person_keys`); ``communityDid`` is never a person.
    :param about_people: the event exists to say who (``member.joined``): it goes only to
        the apps that may see the people it names, never stripped.
    """

    name: str
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    label: str = ""
    audience: str = "community"
    person_keys: tuple[str, ...] = ()
    not_person_keys: tuple[str, ...] = ()
    about_people: bool = False

    @property
    def words(self) -> str:
        return self.label or self.description

    def data_for(self, data: dict[str, Any], *, sees_people: bool) -> dict[str, Any] | None:
        """The event's `data` as an app receives it (`event_data_for`)."""
        return event_data_for(self, data, sees_people=sees_people)


#: The key every event of a community carries; it names the community, never a person.
COMMUNITY_KEY = "communityDid"


def _looks_like_did(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("did:")


def event_data_for(kind: EventKind | None, data: dict[str, Any], *, sees_people: bool) -> dict[str, Any] | None:
    """An event's data as an app receives it, where `sees_people` says whether the app may
    see the people the event names (the event's recorded audience: ``Audience.shows_people_to``,
    decided by the communities service's roster rule). Webhooks, the pull stream and the
    WebSocket all send what this answers.

    All of it to an app that sees the people. Otherwise: None (not sent at all) for a kind
    `about_people`; else the data without the kind's `person_keys` and without any other
    key whose value is a DID or a list holding one (a person unless the kind says otherwise
    in `not_person_keys`: private by default). `kind` None (an event of a kind no loaded
    plugin declares any longer) keeps only what cannot name a person."""
    if sees_people:
        return dict(data)
    if kind is not None and kind.about_people:
        return None
    person = set(kind.person_keys) if kind is not None else set()
    other = set(kind.not_person_keys) if kind is not None else set()
    other.add(COMMUNITY_KEY)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in person:
            continue
        if key not in other and (_looks_like_did(value)
                                 or (isinstance(value, list) and any(map(_looks_like_did, value)))):
            continue
        out[key] = value
    return out


def _did_schema(schema: Any) -> bool:
    """Whether a property's JSON schema is a DID (or a list of them, or nullable one)."""
    if not isinstance(schema, dict):
        return False
    if schema.get("format") == "did" or str(schema.get("pattern", "")).startswith("^did:"):
        return True
    if schema.get("type") == "array" or "items" in schema:
        return _did_schema(schema.get("items"))
    return any(_did_schema(s) for key in ("anyOf", "oneOf") for s in schema.get(key) or ())


def check_person_keys(plugin: str, kind: EventKind) -> None:
    """Refuse a kind whose schema has a key that looks like a person (named ``…Did``, or a
    DID by its schema) declared neither in `person_keys` nor in `not_person_keys`, and
    keys declared in both."""
    for what in ("person_keys", "not_person_keys"):
        keys = getattr(kind, what)
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise DeclarationError(f"plugin {plugin!r} declares the event kind {kind.name!r} with "
                                   f"{what}={keys!r}: a tuple of key names")
    both = set(kind.person_keys) & set(kind.not_person_keys)
    if both:
        raise DeclarationError(f"plugin {plugin!r} declares the event kind {kind.name!r} with "
                               f"{sorted(both)[0]!r} both a person key and not one")
    properties = kind.schema.get("properties") or {}
    declared = {*kind.person_keys, *kind.not_person_keys, COMMUNITY_KEY}
    for key, schema in properties.items() if isinstance(properties, dict) else ():
        if key in declared:
            continue
        if key.endswith("Did") or _did_schema(schema):
            raise DeclarationError(
                f"plugin {plugin!r} declares the event kind {kind.name!r} whose data has the field "
                f"{key!r}, which looks like a person's DID: declare it in person_keys (apps that may "
                "not see the community's members get the event without it) or in not_person_keys")


@dataclass(frozen=True)
class Capability:
    """Something a member may be allowed to do in a community, checked with
    ``app.communities.holds(actor, community, name)``. Admins hold every capability;
    custom roles may grant it; `moderator` says whether the built-in moderator role holds it.

    :param name: ``<plugin>.<what>`` (``notices.pin``).
    :param description: what it allows, for the catalogue (``GET .../roles`` and the docs).
    """

    name: str
    description: str
    moderator: bool = False
    #: Granted per collection (`records.create:<collection>`): the records plugin's only.
    per_collection: bool = False


@dataclass(frozen=True)
class WebFolders:
    """A plugin's templates and static files (`cr_web_folders`), both optional.

    :param templates: a directory of Tornado templates; a page renders ``<name>.html`` of it
        (``PageHandler.render_page``), and a template extends the site's layout with
        ``{% extends "base.html" %}`` (other names of the site's: ``_card.html``...); its own
        files are named ``<plugin>/<file>``.
    :param static: a directory of ``.css``, ``.js``, ``.svg``, ``.png``, ``.ico`` files, served
        under cache-busting URLs: ``{{ static("<plugin>/<file>") }}`` in a template.
    """

    templates: str | None = None
    static: str | None = None


#: The named places where plugins add links (`cr_web_links`), with what each link's
#: `href` and `when` see besides ``me`` (the signed-in person: ``did``, ``handle``; or None).
SLOTS: dict[str, str] = {
    "site.nav": "the site's navigation, on every page",
    "community.page": "a community's page (`community`: its JSON, did, handle, displayName, type, ...; "
                      "`membership`: isMember, isAdmin, isPending, roles when any)",
    "community.settings": "a community's settings page and its section navigation (`community`)",
    "member.actions": "a member's row of actions on the members page (`community`, `member`: did, handle)",
    "person.home": "a signed-in person's home page",
    "person.reports": "a signed-in person's own reports (the reports plugin's /reports/mine)",
}


@dataclass(frozen=True)
class Link:
    """A link a plugin adds to a named place of the site's pages (`SLOTS`).

    :param slot: one of `SLOTS`.
    :param label: the link's words.
    :param href: a path on this site; ``{community[handle]}``, ``{community[did]}``,
        ``{member[did]}``, ``{me[did]}`` are filled in from the slot's values (URL-escaped),
        or a function of those values returning the path (None: no link).
    :param when: a function of the slot's values: show the link only when it returns True
        (None: always; ``lambda v: v["me"] is not None`` for signed-in people).
    """

    slot: str
    label: str
    href: Any
    when: Any = None


def declared(value: Any) -> Callable[[], Any]:
    """A hook implementation that only answers `value`, for the hooks that declare what a
    plugin is rather than do something (`cr_plugin_requires`, `cr_config_section`,
    `cr_migrations`, `cr_event_kinds`, `cr_capabilities`, `cr_lexicons`, `cr_web_folders`,
    `cr_web_links`): assign it to the hook's name in the plugin's module::

        cr_event_kinds = declared(EVENT_KINDS)
        cr_lexicons = declared(HERE / "lexicons")

    A path is answered as a string (in a tuple too); a list is copied on each call, so no
    caller can change the plugin's own."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    elif isinstance(value, tuple):
        value = tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)

    def declaration() -> Any:
        return list(value) if isinstance(value, list) else value
    declaration.__qualname__ = declaration.__name__ = f"declared({value!r:.60})"
    return hookimpl(declaration)


@dataclass
class Declarations:
    """Everything plugins declared, each with the plugin that declared it."""

    event_kinds: dict[str, EventKind] = field(default_factory=dict)
    capabilities: dict[str, Capability] = field(default_factory=dict)
    #: The lexicons plugins ship (`cr_lexicons`), by id: their methods' (and records') schemas.
    lexicons: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each plugin's template and static folders (`cr_web_folders`).
    web_folders: dict[str, WebFolders] = field(default_factory=dict)
    #: The links of each slot, in plugin order (`cr_web_links`).
    links: dict[str, list[Link]] = field(default_factory=lambda: {slot: [] for slot in SLOTS})
    owners: dict[tuple[str, str], str] = field(default_factory=dict)  # (what, name) -> plugin

    def method_lexicons(self) -> set[str]:
        """The ids of the shipped lexicons that describe a method (a query or procedure)."""
        return {nsid for nsid, doc in self.lexicons.items()
                if isinstance(doc.get("defs"), dict) and isinstance(doc["defs"].get("main"), dict)
                and doc["defs"]["main"].get("type") in ("query", "procedure")}

    def owner(self, what: str, name: str) -> str | None:
        return self.owners.get((what, name))

    def _add(self, what: str, plugin: str, name: str) -> None:
        if not isinstance(name, str) or not DOTTED_NAME.fullmatch(name):
            raise DeclarationError(f"plugin {plugin!r} declares the {what} {name!r}: a name must be "
                                   "dotted lower-case words, such as 'notice.posted'")
        other = self.owners.get((what, name))
        if other is not None:
            whose = " twice" if other == plugin else f", which plugin {other!r} declares too"
            raise DeclarationError(f"plugin {plugin!r} declares the {what} {name!r}{whose}")
        self.owners[(what, name)] = plugin


def _items(plugin: str, hook: str, result: Any, kind: type) -> list[Any]:
    if result is None:
        return []
    if isinstance(result, (str, bytes, dict)) or not all(isinstance(r, kind) for r in result):
        raise DeclarationError(f"{plugin}.{hook} must return a list of {kind.__name__}, not {result!r}"[:300])
    return list(result)


def collect(pm: pluggy.PluginManager) -> Declarations:
    """Call the declaration hooks, plugin by plugin, and check what they return."""
    out = Declarations()
    for plugin, result in results_by_plugin(pm, "cr_event_kinds"):
        for kind in _items(plugin, "cr_event_kinds", result, EventKind):
            out._add("event kind", plugin, kind.name)
            if kind.audience not in AUDIENCES:
                raise DeclarationError(f"plugin {plugin!r} declares the event kind {kind.name!r} for the "
                                       f"audience {kind.audience!r} (one of: {', '.join(AUDIENCES)})")
            if not isinstance(kind.schema, dict):
                raise DeclarationError(f"plugin {plugin!r} declares the event kind {kind.name!r} with a "
                                       "schema that is not a JSON schema object")
            check_person_keys(plugin, kind)
            out.event_kinds[kind.name] = kind
    for plugin, result in results_by_plugin(pm, "cr_capabilities"):
        for cap in _items(plugin, "cr_capabilities", result, Capability):
            out._add("capability", plugin, cap.name)
            out.capabilities[cap.name] = cap
    for plugin, result in results_by_plugin(pm, "cr_lexicons"):
        if result is None:
            continue
        folder = Path(result)
        if not folder.is_dir():
            raise DeclarationError(f"{plugin}.cr_lexicons names {str(folder)!r}, which is not a directory")
        for path in sorted(folder.glob("*.json")):
            try:
                doc = json.loads(path.read_text())
                nsid = doc["id"]
            except (ValueError, KeyError, TypeError):
                raise DeclarationError(f"plugin {plugin!r} ships {path.name}, which is not a lexicon "
                                       "(JSON with an id)") from None
            if path.stem != nsid:
                raise DeclarationError(f"plugin {plugin!r} ships the lexicon {nsid!r} in {path.name}: "
                                       "name the file after its id")
            out._add("lexicon", plugin, nsid)
            out.lexicons[nsid] = doc
    for plugin, result in results_by_plugin(pm, "cr_web_folders"):
        if result is None:
            continue
        if not isinstance(result, WebFolders):
            raise DeclarationError(f"{plugin}.cr_web_folders must return WebFolders, not {result!r}"[:300])
        for what, folder in (("templates", result.templates), ("static", result.static)):
            if folder is not None and not Path(folder).is_dir():
                raise DeclarationError(f"plugin {plugin!r} declares the {what} folder {str(folder)!r}, "
                                       "which is not a directory")
        out.web_folders[plugin] = result
    for plugin, result in results_by_plugin(pm, "cr_web_links"):
        for link in _items(plugin, "cr_web_links", result, Link):
            if link.slot not in SLOTS:
                raise DeclarationError(f"plugin {plugin!r} adds the link {link.label!r} to the unknown slot "
                                       f"{link.slot!r} (slots: {', '.join(SLOTS)})")
            key = f"{link.slot} {link.href if isinstance(link.href, str) else link.label}"
            if out.owners.get(("link", key)) == plugin:
                raise DeclarationError(f"plugin {plugin!r} adds the link {link.label!r} to the slot "
                                       f"{link.slot!r} twice")
            out.owners[("link", key)] = plugin
            out.links[link.slot].append(link)
    return out


def check_user_methods(app: Any, lexicon_ids: set[str]) -> None:
    """Refuse (at start-up) one method id declared by the routes of two plugins (one
    plugin's routes may share one, from any of its modules: GET and POST of
    membership/check, or reading a record and listing records as ``record.read``), and a
    plugin method id under an authority of its own without a method lexicon among
    `lexicon_ids` (`cr_lexicons`). A route's plugin is the one whose `cr_routes` gave it
    (``app.route_plugins``); the core's own routes are the core's."""
    namespace = app.config.atproto.namespace
    owners: dict[str, str] = getattr(app, "route_plugins", {})
    seen: dict[str, tuple[str, str]] = {}
    for route in app.routes:
        declared = getattr(route[1], "user_methods", None) or {}
        owner = owners.get(route[0], "core")
        for http_method, spec in declared.items():
            for method in (spec.values() if isinstance(spec, dict) else [spec]):
                where = f"{http_method} {route[0]} ({route[1].__module__}.{route[1].__name__})"
                mid = method.id(namespace)
                if mid in seen and seen[mid][0] != owner:
                    other, there = seen[mid]
                    raise DeclarationError(f"plugin {owner!r} declares the method id {mid!r} ({where}), "
                                           f"which plugin {other!r} declares too ({there})")
                seen.setdefault(mid, (owner, where))
                if not mid.startswith(namespace + ".") and mid not in lexicon_ids:
                    raise DeclarationError(f"plugin {owner!r} acts for a user as {mid!r} ({where}), but no "
                                           "plugin ships its lexicon (a query or procedure; cr_lexicons)")
