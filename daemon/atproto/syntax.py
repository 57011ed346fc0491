"""Syntax of atproto identifiers: DIDs, handles, NSIDs, record keys, AT-URIs, TIDs.

The checks are the `atproto` SDK's own strict validators (the ones its models run with
``strict_string_format=True``). Importing ``atproto_client`` costs about a second because its
package imports every generated model, so the one module holding the validators is loaded on
its own, on first use, and the package import is only the fallback.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from daemon.base import ApiError
from daemon.http.base import invalid

_B32_SORTABLE = "234567abcdefghijklmnopqrstuvwxyz"


@functools.cache
def _formats() -> ModuleType:
    """``atproto_client.models.string_formats``, loaded without its package's heavy imports."""
    name = "atproto_client.models.string_formats"
    if name in sys.modules:
        return sys.modules[name]
    try:
        spec = importlib.util.find_spec("atproto_client")
        assert spec is not None and spec.submodule_search_locations
        path = Path(list(spec.submodule_search_locations)[0]) / "models" / "string_formats.py"
        mspec = importlib.util.spec_from_file_location("_commonroom_atproto_string_formats", path)
        assert mspec is not None and mspec.loader is not None
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
        return module
    except Exception:  # a layout change in the SDK: pay for the full import instead
        from atproto_client.models import string_formats
        return string_formats


def _strict(validator_name: str) -> Callable[[str], Any]:
    """The SDK validator with its opt-in gate removed (strict checking always on)."""
    fn = getattr(_formats(), validator_name)
    return getattr(fn, "__wrapped__", fn)


def _check(validator_name: str, value: Any) -> str | None:
    """None when `value` passes the strict validator, else the SDK's message."""
    if not isinstance(value, str):
        return "must be a string"
    if "\n" in value:  # the SDK's expressions end in `$`, which also matches before a final \n
        return "must not contain a line break"
    try:
        _strict(validator_name)(value, None)
    except ValueError as exc:
        return str(exc)
    return None


# The DID syntax of the atproto spec is exactly this expression plus a length limit; DID
# checks sit on the hottest routes, where the SDK validator costs ~20 µs a call.
_DID_RE = re.compile(r"did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]")


def is_did(s: Any) -> bool:
    return isinstance(s, str) and len(s) <= 2048 and _DID_RE.fullmatch(s) is not None


# The two DID methods atproto supports, in their strict forms. did:plc: 24 characters of
# lower-case base32. did:web: a lower-case host name only (no path; a port only on localhost,
# percent-encoded, for development); an IP address is no host name, so did:web:10.0.0.1 is
# refused before anything is sent to it.
_PLC_RE = re.compile(r"did:plc:[a-z2-7]{24}")
_WEB_HOST_RE = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_PORT_RE = re.compile(r"[0-9]{1,5}")
_WEB_ID_RE = re.compile(r"(?P<host>.*?)(%3[aA](?P<port>.*))?")


def did_problem(s: Any) -> tuple[str, str] | None:
    """Why `s` is not a DID this service can use for a person or a community, as
    ``(error code, reason)``: ``invalid_request`` (not a well-formed DID, e.g. an upper-cased
    did:plc) or ``unsupported_did`` (another method, or a did:web form atproto does not
    use); None for a strict did:plc or did:web. Syntax only: nothing is looked up."""
    if not is_did(s):
        return "invalid_request", "is not a valid DID (expected e.g. did:plc:abc123)"
    if s.startswith("did:plc:"):
        if _PLC_RE.fullmatch(s) is None:
            return "invalid_request", ("is not a valid did:plc (24 lower-case base32 characters "
                                       "after did:plc:; DIDs are case-sensitive)")
        return None
    if s.startswith("did:web:"):
        ident = s[len("did:web:"):]
        if ":" in ident:
            return "unsupported_did", "is a did:web with a path, which atproto does not use (host names only)"
        parts = _WEB_ID_RE.fullmatch(ident)
        assert parts is not None  # the pattern matches any string
        host, port = parts.group("host"), parts.group("port")
        if _WEB_HOST_RE.fullmatch(host.lower()) is None or (port is not None and _PORT_RE.fullmatch(port) is None):
            return "unsupported_did", "is not a did:web of a host name"
        if host != host.lower():
            return "invalid_request", "is not a valid did:web (the host name must be lower-case)"
        if host.rsplit(".", 1)[-1][0].isdigit():
            return "unsupported_did", ("names an IP address, not a host name: a did:web must name "
                                       "its host by a domain name")
        if port is not None and host != "localhost":
            return "unsupported_did", "has a port, which atproto allows only on localhost (development)"
        return None
    return "unsupported_did", f"uses the DID method {s.split(':')[1]!r}: only did:plc and did:web are supported"


def is_atproto_did(s: Any) -> bool:
    """A strict did:plc or did:web (see `did_problem`)."""
    return did_problem(s) is None


def is_handle(s: Any) -> bool:
    return _check("validate_handle", s) is None


def is_nsid(s: Any) -> bool:
    return _check("validate_nsid", s) is None


def is_rkey(s: Any) -> bool:
    return _check("validate_record_key", s) is None


def is_at_uri(s: Any) -> bool:
    return _check("validate_at_uri", s) is None


def is_tid(s: Any) -> bool:
    return _check("validate_tid", s) is None


def is_datetime(s: Any) -> bool:
    return _check("validate_datetime", s) is None


def is_cid(s: Any) -> bool:
    return _check("validate_cid", s) is None


def is_uri(s: Any) -> bool:
    return _check("validate_uri", s) is None


def is_language(s: Any) -> bool:
    return _check("validate_language", s) is None


def is_at_identifier(s: Any) -> bool:
    return is_did(s) or is_handle(s)


def normalize_handle(handle: str) -> str:
    """Handles compare case-insensitively; a leading ``@`` is what people type."""
    return handle.strip().removeprefix("@").lower()


# ------------------------------------------------------------------ request checks (-> 400)


def require_did(value: Any, field: str = "did") -> str:
    if not isinstance(value, str) or not value:
        raise invalid(field, "must be a DID such as did:plc:abc123")
    if not is_did(value):
        raise invalid(field, f"{value!r} is not a valid DID (expected e.g. did:plc:abc123)")
    return value


def require_atproto_did(value: Any, field: str = "did") -> str:
    """A strict did:plc or did:web, else a 400 naming the field: ``invalid_request`` for a
    malformed DID, ``unsupported_did`` for another method or a did:web form atproto does not
    use. Syntax only (``identity.require_known_did`` also resolves it)."""
    problem = did_problem(value)
    if problem is None:
        return value
    if not is_did(value):
        return require_did(value, field)  # raises, with the usual message
    code, reason = problem
    if code == "invalid_request":
        raise invalid(field, f"{value!r} {reason}")
    raise ApiError(400, code, f"{field}: {value} {reason}.", details=[{"field": field, "message": reason}])


def require_handle(value: Any, field: str = "handle") -> str:
    """A handle, lower-cased and without a leading ``@``."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(field, "must be a handle such as alice.example.com")
    handle = normalize_handle(value)
    if not is_handle(handle):
        raise invalid(field, f"{value!r} is not a valid handle (expected e.g. alice.example.com)")
    return handle


def canonical_nsid(s: str) -> str:
    """An NSID in its one canonical form: the authority (a domain name, so its case means
    nothing) lower-cased, the name segment exactly as given (it is case-sensitive)."""
    authority, _, name = s.rpartition(".")
    return f"{authority.lower()}.{name}"


def nsid_problem(s: Any) -> str | None:
    """Why `s` is not a collection NSID this service takes (None: it is one): not an NSID,
    or one whose authority is not lower-case. Every place that names a collection (records
    routes, permission rules, role grants, allowlists) refuses the second, so one collection
    never has two spellings that its rules would tell apart (docs/records.md)."""
    if not isinstance(s, str) or not s:
        return "must be an NSID such as com.example.thing"
    if not is_nsid(s):
        return f"{s!r} is not a valid NSID (expected e.g. com.example.thing)"
    if canonical_nsid(s) != s:
        return (f"{s!r} is not in canonical form: an NSID's authority is a domain name and is "
                f"written in lower case ({canonical_nsid(s)})")
    return None


def is_canonical_nsid(s: Any) -> bool:
    return nsid_problem(s) is None


def require_nsid(value: Any, field: str = "collection") -> str:
    """`value` if it is a canonical NSID (:func:`nsid_problem`), else 400 naming `field`."""
    problem = nsid_problem(value)
    if problem is not None:
        raise invalid(field, problem)
    return value


def require_rkey(value: Any, field: str = "rkey") -> str:
    if not isinstance(value, str) or not value:
        raise invalid(field, "must be a record key")
    if not is_rkey(value):
        raise invalid(field, f"{value!r} is not a valid record key (1-512 of A-Z a-z 0-9 . - _ : ~, "
                             "not '.' or '..')")
    return value


def require_at_uri(value: Any, field: str = "uri") -> str:
    if not isinstance(value, str) or not is_at_uri(value):
        raise invalid(field, "must be an at:// URI such as at://did:plc:abc/com.example.thing/3k2...")
    return value


# ------------------------------------------------------------------ TIDs


class _TidSource:
    """Strictly increasing TIDs for this process: 53 bits of microseconds since the epoch and a
    10-bit clock id, base32-sortable. Process-wide on purpose: two apps in one process (tests)
    must not hand out the same key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        self._clock_id = int.from_bytes(os.urandom(2), "big") & 0x3FF

    def next(self, micros: int) -> str:
        with self._lock:
            micros = max(micros, self._last + 1)
            self._last = micros
        value = ((micros & ((1 << 53) - 1)) << 10) | self._clock_id
        out = []
        for _ in range(13):
            out.append(_B32_SORTABLE[value & 31])
            value >>= 5
        return "".join(reversed(out))


_tids = _TidSource()


def new_tid(clock: Any = None) -> str:
    """A fresh TID record key. `clock` (daemon.base.Clock) supplies the time if given."""
    import time
    now = clock.time() if clock is not None else time.time()
    return _tids.next(int(now * 1_000_000))


def tid_timestamp(tid: str) -> float:
    """The time (seconds since the epoch) encoded in a TID."""
    value = 0
    for ch in tid:
        value = value * 32 + _B32_SORTABLE.index(ch)
    return (value >> 10) / 1_000_000


__all__ = [
    "is_did", "is_handle", "is_nsid", "is_canonical_nsid", "nsid_problem", "canonical_nsid", "is_rkey", "is_at_uri", "is_tid", "is_datetime", "is_cid",
    "is_uri", "is_language", "is_at_identifier", "normalize_handle", "require_did",
    "did_problem", "is_atproto_did", "require_atproto_did",
    "require_handle", "require_nsid", "require_rkey", "require_at_uri", "new_tid",
    "tid_timestamp",
]
