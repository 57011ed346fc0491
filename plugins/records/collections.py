"""Which collections apps may write through the records API (docs/records.md, "Writable
collections").

Three layers, checked in this order; the first that refuses answers 403:

1. **protected**, never writable: the protocol's and Bluesky's namespaces
   (:data:`PROTECTED`) and the service's own (``atproto.namespace``). A community's repo is
   also its Bluesky account; a record there is its public profile, its posts, its follows.
   → ``collection_protected``
2. **the operator's lists** (``records.denied_collections``, ``records.allowed_collections``)
   → ``collection_not_allowed``
3. **the community's allowlist**, set by its admins (none: any other collection)
   → ``collection_not_allowed``

A pattern is a collection NSID (``org.example.garden.note``) or a prefix of dotted
segments followed by ``.*`` (``org.example.*``: every NSID below it), in canonical form
(the authority lower-case: ``daemon.atproto.syntax.nsid_problem``), as every collection
the records routes take. NSID authorities are domain names, so the comparison still folds
their case (``App.Bsky.actor.profile`` is protected even where no route would take it);
the name segment of an exact pattern compares exactly, as the NSID spec says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from daemon.plugin.atproto import nsid_problem
from daemon.plugin import ApiError, Row
from plugins.records import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

#: Namespaces no app may write through the records API, whatever the configuration.
PROTECTED = ("com.atproto", "app.bsky", "chat.bsky", "tools.ozone")

_SEGMENT = re.compile(r"[A-Za-z0-9-]{1,63}")
MAX_PATTERNS = 100
MAX_PATTERN_CHARS = 317  # the longest NSID


def _key(nsid: str) -> str:
    """An NSID with its authority lower-cased (the name segment keeps its case)."""
    authority, _, name = nsid.rpartition(".")
    return f"{authority.lower()}.{name}"


@dataclass(frozen=True)
class Pattern:
    """A parsed collection pattern: `prefix` (lower-cased, for ``….*``) or `exact`."""

    text: str
    prefix: str | None = None
    exact: str | None = None

    def covers(self, nsid: str) -> bool:
        if self.prefix is not None:
            lowered = nsid.lower()
            return lowered == self.prefix or lowered.startswith(self.prefix + ".")
        return _key(nsid) == self.exact

    def within(self, prefix: str) -> bool:
        """True if every collection this pattern covers lies under `prefix`."""
        own = self.prefix if self.prefix is not None else (self.exact or "").lower()
        return own == prefix or own.startswith(prefix + ".")


def pattern_problem(text: object) -> str | None:
    """Why `text` is not a collection pattern (None: it is one)."""
    if not isinstance(text, str):
        return "must be a string"
    if len(text) > MAX_PATTERN_CHARS:
        return f"must be at most {MAX_PATTERN_CHARS} characters"
    if text.endswith(".*"):
        segments = text[:-2].split(".")
        if not all(_SEGMENT.fullmatch(s) for s in segments):
            return "must be a collection NSID or dotted segments followed by .* (org.example.*)"
        if text != text.lower():
            return f"must be written in lower case ({text.lower()}): a prefix is part of an NSID's authority"
        return None
    problem = nsid_problem(text)
    if problem is not None:
        return ("must be a collection NSID (org.example.garden.note) or a prefix such as org.example.*: "
                + problem)
    return None


def parse(text: str) -> Pattern:
    """A pattern from its text (checked with :func:`pattern_problem` first)."""
    if text.endswith(".*"):
        return Pattern(text, prefix=text[:-2].lower())
    return Pattern(text, exact=_key(text))


def parse_all(texts: Iterable[str]) -> tuple[Pattern, ...]:
    return tuple(parse(t) for t in texts)


def protected_prefixes(namespace: str) -> tuple[str, ...]:
    return (*PROTECTED, namespace.lower())


def protected_by(pattern: Pattern, namespace: str) -> str | None:
    """The protected namespace a pattern lies entirely inside, if any (such a pattern in an
    allowlist could never take effect, so it is refused where it is set)."""
    return next((p for p in protected_prefixes(namespace) if pattern.within(p)), None)


def _first(patterns: Iterable[Pattern], nsid: str) -> Pattern | None:
    return next((p for p in patterns if p.covers(nsid)), None)


class Policy:
    """The service-wide part (layers 1 and 2), built once from the configuration."""

    def __init__(self, namespace: str, allowed: Iterable[str] = (), denied: Iterable[str] = ()) -> None:
        self.namespace = namespace
        self.protected = tuple(Pattern(p + ".*", prefix=p) for p in protected_prefixes(namespace))
        self.allowed = parse_all(allowed)
        self.denied = parse_all(denied)

    def protected_refusal(self, nsid: str) -> ApiError | None:
        hit = _first(self.protected, nsid)
        if hit is None:
            return None
        if hit.prefix == self.namespace.lower():
            why = "it belongs to this service, which keeps the community's profile, admins and " \
                  "membership records there"
        else:
            why = "it is an AT Protocol or Bluesky namespace: records there are the community " \
                  "account's public profile, posts, follows and settings"
        return ApiError(403, "collection_protected",
                        f"{nsid} cannot be written through the records API: {why} ({hit.text}).")

    def refusal(self, nsid: str, community_allowed: tuple[Pattern, ...] | None) -> ApiError | None:
        """The 403 for writing `nsid` (create or update), or None if it is writable.
        `community_allowed`: the community's allowlist (None: no list, any collection)."""
        refused = self.protected_refusal(nsid)
        if refused is not None:
            return refused
        denied = _first(self.denied, nsid)
        if denied is not None:
            return ApiError(403, "collection_not_allowed",
                            f"{nsid} is not writable on this service (records.denied_collections: "
                            f"{denied.text}).")
        if self.allowed and _first(self.allowed, nsid) is None:
            return ApiError(403, "collection_not_allowed",
                            f"{nsid} is not writable on this service; the operator allows only "
                            f"{', '.join(p.text for p in self.allowed)}.")
        if community_allowed is not None and _first(community_allowed, nsid) is None:
            listed = ", ".join(p.text for p in community_allowed) or "no collection"
            return ApiError(403, "collection_not_allowed",
                            f"{nsid} is not writable in this community; its admins allow {listed}.")
        return None


# ------------------------------------------------------------------ for the handlers


def policy(app: "Application") -> Policy:
    """The service-wide policy from ``atproto.namespace`` and the ``records`` section."""
    cfg = app.config.plugin("records")
    return Policy(app.config.atproto.namespace, cfg.allowed_collections, cfg.denied_collections)


def stored_allowlist(row: Row | None) -> list[str] | None:
    return None if row is None else list(json.loads(row["allowed_collections"]))


async def community_allowlist(app: "Application", community_did: str) -> tuple[Pattern, ...] | None:
    """The community's allowlist (None: it has none, any collection the service allows)."""
    texts = stored_allowlist(await store.collection_settings(app.db, community_did))
    return None if texts is None else parse_all(texts)
