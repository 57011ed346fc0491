"""Route lookup by path prefix and suffix.

Tornado tries every rule's regular expression in order; with the ~50 routes of the
built-in plugins that was ~7% of a request's CPU. `RouteTable` buckets the rules by their
first three literal path segments, so a lookup tries only the rules that can match (plus
the few whose pattern has no such literal prefix, where their literal start allows the
bucket), in their original order: the same result as a linear scan. Within a bucket, a rule whose pattern ends in literal text
(``.../membership/check``) is skipped without running its expression when the path does
not end with that text, and one with plain text between two groups (``/records/``) when
the path does not hold it: under ``/api/v1/communities/<did>/...`` each expression would
otherwise scan the DID again. A path outside every bucket (the web pages under ``/c/...`` and
``/apps/...``, an unknown path) tries only the bucketless rules whose literal start allows its
first segment: ``/c/(...)`` is not tried for ``/apps/...``.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from tornado.routing import PathMatches

# An escape (`\d`, `\.`) is one token, so the text after it starts after its letter.
_META = re.compile(r"\\.|[.^$*+?{}\[\]|()]")
_SEGMENTS = 3


def _key_of_path(path: str) -> str:
    parts = path.split("/", _SEGMENTS + 1)
    return "/".join(parts[: _SEGMENTS + 1])


def _key_of_pattern(pattern: str) -> str | None:
    """The bucket of a pattern, or None if it can match paths in several buckets."""
    body = _unanchored(pattern)
    start = _literal_start(body)
    if start is None:
        return None
    if start == body:  # all literal
        return _key_of_path(start)
    # the literal part must hold the first three segments completely
    complete = start.split("/")[:-1]  # the last part may continue into the regex
    if len(complete) >= _SEGMENTS + 1:
        return "/".join(complete[: _SEGMENTS + 1])
    return None


def _first_of_path(path: str) -> str | None:
    """The first segment of `path` ("c" for ``/c/x``), None when it does not start with "/"."""
    parts = path.split("/", 2)
    return parts[1] if len(parts) > 1 and not parts[0] else None


def _first_segment(pattern: str) -> str | None:
    """The first path segment every path matching `pattern` has, when its literal start
    holds that segment and the "/" after it; None when it cannot be told."""
    start = _literal_start(_unanchored(pattern))
    if start is None or not start.startswith("/"):
        return None
    parts = start.split("/", 2)
    return parts[1] if len(parts) > 2 else None


def _unanchored(pattern: str) -> str:
    """`pattern` without its closing `$` (Tornado adds one anyway)."""
    return pattern[:-1] if pattern.endswith("$") and not pattern.endswith("\\$") else pattern


def _literal_start(pattern: str) -> str | None:
    """The text every path matching `pattern` starts with; None when the pattern's shape
    (flags, comments, lookarounds, top-level `/a|/b`) leaves it unknown."""
    if _opaque(pattern):
        return None
    meta = _META.search(pattern)
    if meta is None:
        return pattern
    literal = pattern[: meta.start()]
    return literal[:-1] if pattern[meta.start()] in "?*{" else literal  # `s?`: may be absent


def _opaque(pattern: str) -> bool:
    """Whether the shortcuts should not read `pattern`'s literal text: flags, comments and
    lookarounds (`(?i)`, `(?#...)`, `(?=...)`), and top-level alternatives (`/a|/b`)."""
    return bool(_SPECIAL_GROUP.search(pattern)) or _top_level_alternatives(pattern)


_SPECIAL_GROUP = re.compile(r"\(\?(?!:|P<)")


def _top_level_alternatives(pattern: str) -> bool:
    """Whether `pattern` has a `|` outside every group and character class."""
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1 if pattern[i + 1:i + 2] == "^" else 0    # `[^]...]` and `[]...]` hold a `]`
            i += 1 if pattern[i + 1:i + 2] == "]" else 0
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
        i += 1
    return False


def _may_start_with(pattern: str, key: str) -> bool:
    """Whether a path of bucket `key` (it starts with `key`) may match `pattern`: false only
    when the pattern's literal start and `key` differ before either ends."""
    start = _literal_start(pattern)
    return start is None or start.startswith(key) or key.startswith(start)


def _literal_suffix(pattern: str) -> str:
    """Text every path matching `pattern` must end with ("" if none can be told)."""
    if _opaque(pattern):
        return ""
    body = _unanchored(pattern)
    last = max((m.end() for m in _META.finditer(body)), default=0)
    return body[last:]


def pattern_groups(pattern: str) -> list[tuple[int, int]]:
    """(start, end) of each top-level capturing group of a route pattern (the metrics'
    route templates and the OpenAPI paths are made from them)."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "(":
            if depth == 0:
                start = i
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                out.append((start, i + 1))
        i += 1
    return out


def pattern_literal(text: str) -> str:
    """The text between a pattern's groups, unescaped and without anchors."""
    return re.sub(r"\\(.)", r"\1", text.lstrip("^").rstrip("$"))


def _literal_inner(pattern: str) -> str:
    """The longest plain text between two of a pattern's top-level groups, which every
    matching path holds (``/records/`` in ``.../(did)/records/(nsid)``); "" if none can be
    told."""
    if _opaque(pattern):
        return ""
    groups = pattern_groups(pattern)
    between = (pattern[end:start] for (_, end), (start, _) in zip(groups, groups[1:]))
    return max((text for text in between if not _META.search(text)), key=len, default="")


class RouteTable:
    def __init__(self, routes: Sequence[tuple]) -> None:
        entries = []
        for index, route in enumerate(routes):
            pattern, handler = route[0], route[1]
            kwargs = route[2] if len(route) > 2 else {}
            entries.append((index, _key_of_pattern(pattern), PathMatches(pattern), handler, kwargs,
                            _literal_suffix(pattern), _literal_inner(pattern)))
        generic = [e for e in entries if e[1] is None]
        self._generic = [e[2:] for e in generic]
        # Bucketless rules by the first path segment their literal start names in full
        # (`/c/(...)`: "c"); a rule naming none (`/c(...)`, `(?i)...`) is tried for every path.
        firsts = {index: _first_segment(routes[index][0]) for index, *_ in generic}
        self._open = [e[2:] for e in generic if firsts[e[0]] is None]
        self._by_first = {seg: [e[2:] for e in generic if firsts[e[0]] in (seg, None)]
                          for seg in {s for s in firsts.values() if s is not None}}
        self._buckets: dict[str, list[tuple]] = {}
        for key in {e[1] for e in entries if e[1] is not None}:
            # A rule without a bucket joins those whose paths its literal start allows:
            # `/c/(...)` can never match under `/api/v1/communities`.
            fitting = [e for e in generic if _may_start_with(routes[e[0]][0], key)]
            merged = sorted([e for e in entries if e[1] == key] + fitting, key=lambda e: e[0])
            self._buckets[key] = [e[2:] for e in merged]

    def match(self, request: Any) -> tuple[Any, dict, list, dict] | None:
        """(handler class, handler kwargs, path args, path kwargs) or None."""
        path = request.path
        candidates = self._buckets.get(_key_of_path(path))
        if candidates is None:
            candidates = self._by_first.get(_first_of_path(path), self._open)
        for matcher, handler, kwargs, suffix, inner in candidates:
            if suffix and not path.endswith(suffix) or inner and inner not in path:
                continue
            params = matcher.match(request)
            if params is not None:
                return handler, kwargs, params.get("path_args", []), params.get("path_kwargs", {})
        return None
