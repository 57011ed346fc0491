"""Checks for request bodies: each raises a 400 ApiError naming the field."""

from __future__ import annotations

import re
from typing import Any

from daemon.base.types import ApiError

_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")

#: Invisible characters that make a name look like another one: the bidirectional
#: embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069: "admin" written
#: backwards shows as "admin") and the zero-width spaces (U+200B, the word joiner U+2060,
#: U+FEFF). Not the zero-width joiner U+200D (emoji sequences and several scripts need it),
#: nor the non-joiner U+200C (Persian and Indic spelling), nor the LRM/RLM marks.
SPOOFING_CHARS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u2060\ufeff")
_STRIP_SPOOFING = {ord(c): None for c in SPOOFING_CHARS}


def strip_spoofing(text: str) -> str:
    """`text` without `SPOOFING_CHARS`: for names from the network (profiles), shown as
    they are otherwise."""
    return text.translate(_STRIP_SPOOFING)


def invalid(field: str, message: str) -> ApiError:
    return ApiError(400, "invalid_request", f"{field}: {message}",
                    details=[{"field": field, "message": message}])


def string(body: dict[str, Any], field: str, *, required: bool = True, min_len: int = 0,
           max_len: int | None = None, default: str | None = None, strip: bool = True,
           name: bool = False) -> str | None:
    """A string field. `name`: a name people read (a community's, an app's ...), which must
    not hold `SPOOFING_CHARS` (400 naming the character)."""
    if field not in body or body[field] is None:
        if required:
            raise invalid(field, "is required")
        return default
    value = body[field]
    if not isinstance(value, str):
        raise invalid(field, f"must be a string, not {type(value).__name__}")
    if strip:
        value = value.strip()
    if len(value) < min_len:
        raise invalid(field, "must not be empty" if min_len == 1 else f"must be at least {min_len} characters")
    if max_len is not None and len(value) > max_len:
        raise invalid(field, f"must be at most {max_len} characters")
    if name and not SPOOFING_CHARS.isdisjoint(value):
        found = next(c for c in value if c in SPOOFING_CHARS)
        raise invalid(field, f"must not hold invisible direction or zero-width characters "
                             f"(U+{ord(found):04X}): they make one name look like another")
    return value


def boolean(body: dict[str, Any], field: str, *, default: bool | None = None) -> bool | None:
    if field not in body or body[field] is None:
        return default
    if not isinstance(body[field], bool):
        raise invalid(field, "must be true or false")
    return body[field]


def integer(body: dict[str, Any], field: str, *, required: bool = True, minimum: int | None = None,
            maximum: int | None = None) -> int | None:
    if field not in body or body[field] is None:
        if required:
            raise invalid(field, "is required")
        return None
    value = body[field]
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, f"must be a whole number, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise invalid(field, f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise invalid(field, f"must be at most {maximum}")
    return value


def string_list(body: dict[str, Any], field: str, *, required: bool = True,
                allowed: tuple[str, ...] | None = None, min_items: int = 0,
                max_items: int = 100) -> list[str] | None:
    if field not in body or body[field] is None:
        if required:
            raise invalid(field, "is required")
        return None
    value = body[field]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(field, "must be a list of strings")
    if len(value) < min_items:
        raise invalid(field, f"must have at least {min_items} item(s)")
    if len(value) > max_items:
        raise invalid(field, f"must have at most {max_items} items")
    if allowed is not None:
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise invalid(field, f"unknown value(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return list(dict.fromkeys(value))


def hostname(value: str, field: str = "domain") -> str:
    """A DNS host name (no scheme, port or path), lower-cased."""
    host = value.strip().lower().rstrip(".")
    labels = host.split(".")
    if not host or len(host) > 253 or len(labels) < 2 or not all(_HOST_LABEL.fullmatch(l) for l in labels) \
            or labels[-1].isdigit():
        raise invalid(field, "must be a host name such as app.example.com (no scheme, port or path)")
    return host
