"""HTTP conventions shared by every route.

* Errors are JSON ``{"error": "<machine_code>", "message": "<sentence>"}`` (plus
  ``details`` for validation problems), never an HTML page or a traceback.
* Every response carries ``X-Request-Id``; log lines carry it too.
* Bodies are capped (`max_body` per handler class; uploads set their own). A small body
  declared by Content-Length is read whole before the handler starts; any other is
  streamed, so one over the limit is refused before it is read (`BaseHandler.serving_class`).
* A request refused before its body is read keeps its connection usable: a small body is
  read and thrown away before the refusal is sent; a large, unsized or over-the-limit one
  is not read, and the refusal says ``Connection: close``.
* The ``Server`` header names the service, not the framework or its version.
* Authentication goes through the `cr_authenticate` hook; browser sessions must send the
  CSRF token on state-changing methods; API-key requests are exempt.
* API-key requests are rate limited per app, auth endpoints per client address.
* Lists use `limit` (1..100, default 20) and an opaque keyset `cursor`.
"""

from __future__ import annotations

import base64
import contextvars
import hmac
import inspect
import ipaddress
import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from types import MappingProxyType, SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import tornado.web

from daemon.base import ApiError, Principal
from daemon.http.openapi import STRING, arr, obj, operation

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.http")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# One decoder and one encoder for every request: json.loads/json.dumps with non-default
# arguments build a new one on each call.
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_JSON_CT = "application/json; charset=utf-8"

#: The ``Server`` header of every response: no framework name or version to fingerprint.
SERVER_HEADER = "commonroom"

#: A request refused before its body was read (401, 403, 429 ...) has the body read and
#: thrown away, up to this declared size, so the connection can carry the next request. A
#: larger or unsized body is not read: the refusal closes the connection instead.
DRAIN_LIMIT = 64 * 1024

#: The browser session cookie (daemon/security/sessions.py issues it).
SID_COOKIE = "sid"


# ------------------------------------------------------------------ cursors


def encode_cursor(values: Sequence[Any]) -> str:
    raw = json.dumps(list(values), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_INT64 = 2 ** 63


def decode_cursor(text: str, arity: int, kinds: str | None = None) -> list[Any]:
    """The values of a cursor from `encode_cursor`. `kinds` declares each position: ``i`` for
    an integer (64-bit), ``s`` for a string; without it, each value may be either. Anything
    else (empty, not unpadded base64url, tampered, floats, huge numbers, lone surrogates) is
    a 400, never a 500 further down."""
    bad = ApiError(400, "invalid_cursor", "The cursor is not one this service issued.")
    if len(text) > 4096 or not _CURSOR_RE.fullmatch(text):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        values = _JSON_DECODER.decode(raw.decode("utf-8"))
    except (ValueError, TypeError, RecursionError):
        raise bad from None
    if not isinstance(values, list) or len(values) != arity:
        raise bad
    for i, v in enumerate(values):
        kind = kinds[i] if kinds else None
        is_int = isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64
        is_str = isinstance(v, str) and len(v) <= 1024 and _encodable(v)
        if (kind == "i" and not is_int) or (kind == "s" and not is_str) or not (is_int or is_str):
            raise bad
    return values


# What `encode_cursor` writes: unpadded base64url, nothing else (ASCII only: no `\w`).
_CURSOR_RE = re.compile(r"[A-Za-z0-9_-]+")


def _encodable(text: str) -> bool:
    """False for a string holding a lone surrogate (which JSON's ``\\ud800`` escapes can make,
    and which UTF-8, SQLite and every PDS refuse)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: JSON text, but no number any encoder will write back
        raise ValueError(f"{text[:40]} is too large a number")
    return value


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice. JSON (RFC 8259) leaves the meaning open: Python keeps
    the last, other parsers (a proxy in front, say) the first, so two readers of one body
    could see two different actors. Every body parser refuses it instead."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key[:100]!r} appears more than once in one object")
        self.key = key


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


_JSON_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float,
                                 object_pairs_hook=_object_without_duplicates)


def strict_json_loads(text: str | bytes) -> Any:
    """JSON text decoded by the rules of request bodies: no NaN/Infinity, no number too large
    for a float, no key twice in one object (each a ValueError; `DuplicateKeyError` for the
    last). For JSON a client sends inside something else (a token's claims, say)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _JSON_DECODER.decode(text)

# A Content-Length as HTTP defines it: ASCII digits only (str.isdigit also takes "²").
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")


def small_body_length(headers: Any) -> int | None:
    """The length of a request's body when it is small and declared: none (0) or a valid
    ``Content-Length`` within `DRAIN_LIMIT`, not chunked (no ``Transfer-Encoding``) and not
    held back by the client (``Expect: 100-continue`` asks to be refused unread); else None.
    Such a body may be read before the request is judged (`RequestLogic.can_drain_body`,
    `BaseHandler.serving_class`)."""
    # `in` before reading a header: HTTPHeaders.get raises and catches a KeyError when it is absent
    if "Transfer-Encoding" in headers or "Expect" in headers and headers["Expect"].lower() == "100-continue":
        return None
    try:
        length = content_length(headers.get("Content-Length"))
    except ValueError:
        return None
    if length is None:
        return 0
    return length if length <= DRAIN_LIMIT else None


def content_length(value: str | None) -> int | None:
    """The Content-Length header's value; None when absent. Raises ValueError when it is
    not a number HTTP allows."""
    if value is None:
        return None
    if not _CONTENT_LENGTH.fullmatch(value):
        raise ValueError("Content-Length is not a number")
    return int(value)

# A ``\uD800``-``\uDFFF`` escape: the only way a lone surrogate gets into decoded JSON (raw
# UTF-8 cannot carry one). Bodies without such an escape skip the check for lone surrogates.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_json_object(raw: bytes, content_type: str | None, *, required: bool = True) -> dict[str, Any]:
    """A request body as a JSON object, by the rules every route shares (docs/api.md,
    "Bodies"): an empty body is `{}` when not `required` (400 otherwise); any other body must
    be sent as ``application/json`` (a ``charset`` parameter may only say UTF-8), else 415;
    it must be UTF-8 JSON text holding an object, with no NaN/Infinity, no lone surrogate
    (``"\\ud800"``) and no key twice in one object (at any depth), else 400 ``invalid_json``."""
    if not raw:
        if required:
            raise ApiError(400, "invalid_json", "A JSON object is required as the request body.")
        return {}
    if not _is_json_type(content_type):
        raise ApiError(415, "unsupported_media_type",
                       "Send the body with Content-Type: application/json (UTF-8).")
    if not raw.strip():
        if required:
            raise ApiError(400, "invalid_json", "A JSON object is required as the request body.")
        return {}
    try:
        value = _JSON_DECODER.decode(raw.decode("utf-8"))
    except DuplicateKeyError as exc:
        raise ApiError(400, "invalid_json", f"The body is ambiguous: {exc}.",
                       details=[{"field": exc.key[:100], "message": "appears more than once"}]) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "The body is nested too deeply.") from None
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_json", "The body must be a JSON object.")
    if _SURROGATE_ESCAPE.search(raw) and not _json_encodable(value):
        raise ApiError(400, "invalid_json",
                       "The body holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), "
                       "which is not a character.")
    return value


# What clients send nearly always; checked first because membership/check is a hot path.
_PLAIN_JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8",
                               "application/json;charset=utf-8"})


def _is_json_type(content_type: str | None) -> bool:
    """``application/json``, with no charset parameter or a UTF-8 one."""
    if not content_type:
        return False
    if content_type.lower() in _PLAIN_JSON_TYPES:
        return True
    main, params = media_type(content_type)
    if main != "application/json":
        return False
    charset = params.get("charset")
    return charset is None or charset.lower() in ("utf-8", "utf8")


def media_type(value: str) -> tuple[str, dict[str, str]]:
    """A ``Content-Type`` value as (the media type, lower-case; its parameters, names
    lower-case, values unquoted): ``text/html; charset="UTF-8"`` → ``("text/html",
    {"charset": "UTF-8"})``. Parameters without ``=`` are ignored."""
    main, _, rest = value.partition(";")
    params: dict[str, str] = {}
    for part in rest.split(";"):
        name, eq, val = part.partition("=")
        if eq and name.strip():
            val = val.strip()
            if len(val) >= 2 and val[0] == val[-1] == '"':
                val = val[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            params[name.strip().lower()] = val
    return main.strip().lower(), params


def _json_encodable(value: Any) -> bool:
    """False if any string in `value` (a decoded JSON value), key or value, holds a lone
    surrogate. Iterative, so a deep document cannot overflow the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


# ------------------------------------------------------------------ return addresses


def same_site_path(value: Any) -> str | None:
    """`value` if it is a path on this site ("/c/x?y"), else None: never another origin
    (``//evil.example``, ``/\\evil``, ``https://...``), no control characters. Every
    return address a request carries (``next``, ``returnTo``) goes through this: no open
    redirect."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//") \
            or "\\" in value or len(value) > 1024 or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        return None
    return value


# ------------------------------------------------------------------ client address


def client_address(remote_ip: str, forwarded_for: str | None, trusted: Iterable[str]) -> str:
    """The client's address, honouring X-Forwarded-For only from trusted proxies."""
    nets = [ipaddress.ip_network(t, strict=False) for t in trusted]

    def is_trusted(ip: str) -> bool:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return any(addr in n for n in nets)

    if not forwarded_for or not is_trusted(remote_ip):
        return remote_ip
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not is_trusted(hop):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return remote_ip
    return hops[0] if hops else remote_ip


# ------------------------------------------------------------------ hooks on the hot path


class FirstResult:
    """Call a ``firstresult`` hook (`cr_authenticate`, on every authenticated request) as
    pluggy does, the last registered implementation first and the first answer that is not
    None winning, but without pluggy's per-call machinery (measured with callgrind: 18,600
    instructions a call through pluggy, 5,500 this way, the two built-in implementations
    included). Arguments are positional, in the hook specification's order. The
    implementations are re-read when they change (a plugin registered later); a hook with
    wrappers, or an implementation taking fewer arguments, goes through pluggy. Only pluggy's
    public API (`get_hookimpls`, `spec.argnames`, each implementation's `function`, `argnames`)."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self._argnames = tuple(hook.spec.argnames)
        self._impls: list[Any] | None = None
        self._functions: list[Any] | None = None

    def __call__(self, *args: Any) -> Any:
        impls = self.hook.get_hookimpls()
        if impls != self._impls:       # HookImpls compare by identity: a cheap check
            self._impls = impls
            direct = all(not impl.hookwrapper and not getattr(impl, "wrapper", False)
                         and tuple(impl.argnames) == self._argnames for impl in impls)
            self._functions = [impl.function for impl in reversed(impls)] if direct else None
        if self._functions is None:
            return self.hook(**dict(zip(self._argnames, args)))
        for function in self._functions:
            result = function(*args)
            if result is not None:
                return result
        return None


# ------------------------------------------------------------------ request logic

_ASK = object()   # `RequestLogic.authenticate_throttled`: ask the cr_authenticate hook


class RequestLogic:
    """What every route does around its method, however it is served: request id, capped
    body, authentication (with failed-attempt throttling), CSRF, rate limits and JSON input.
    `BaseHandler` (a Tornado RequestHandler) and `daemon.http.lean.LeanHandler` (the hot-path
    route class) both build on it, so the two behave alike. Subclasses set:

    * ``auth``: None (public), ``"app"`` (API key), ``"session"`` (browser) or ``"any"``;
    * ``rate_limit``: ``"auth"`` for login-like endpoints, ``"invites"`` for the invite
      pages and preview (each per client address, with its own budget);
    * ``max_body``: None for the configured limit, or a byte count (uploads);
    * ``serves_html``: True for pages for people, which the OpenAPI document leaves out
      (every other route declares its methods with `daemon.http.openapi.operation`).
    * ``read_route``: True for a route that only reads whatever its method (membership/check
      answers a POST): its successful answers are sampled in the access log like GETs
      (`daemon.http.accesslog`, ``access_log.successful_reads``).

    The serving class provides ``application``, ``request``, ``put_header``,
    ``get_cookie`` and ``get_query_argument`` (Tornado's, for `BaseHandler`).
    """

    application: "Application"
    request: Any
    auth: str | None = None
    rate_limit: str | None = None
    max_body: int | None = None
    serves_html: bool = False
    #: State-changing methods of this route that only read (membership/check's POST): a
    #: follower answers them itself instead of sending them to the primary.
    follower_serves: frozenset[str] = frozenset()
    #: Every method of this route goes to the primary from a follower (sign-in steps, whose
    #: GETs write and talk to other servers).
    primary_only: bool = False
    read_route: bool = False

    principal: Principal | None = None
    #: Whether the body may still be arriving when `admit` runs (then it checks the
    #: declared length against the limit); False where it was read whole first.
    streams_body = True

    # A request's state, defaults here and set on the instance only when it changes.
    _body_too_large = False
    _refusal: BaseException | None = None   # answered once the body is read
    close_connection = False                # say Connection: close, then close
    _extra_headers: Mapping[str, str] = MappingProxyType({})  # put back after `clear`
    _body: bytes | bytearray = b""          # the serving class sets it

    def start_request(self) -> None:
        """The request id (the client's when it sent a usable one), set on the response and
        on every log line of the request. The body's buffer is the serving class's."""
        headers = self.request.headers
        incoming = headers["X-Request-Id"] if "X-Request-Id" in headers else None
        self.request_id = incoming if incoming and _REQUEST_ID_RE.fullmatch(incoming) \
            else self.application.new_request_id()
        request_id_var.set(self.request_id)
        self.put_header("X-Request-Id", self.request_id)

    @property
    def app(self) -> "Application":
        return self.application

    # ---------------------------------------------------------------- body

    def body_limit(self) -> int:
        return self.max_body if self.max_body is not None else self.application.config.server.max_body_bytes

    def data_received(self, chunk: bytes) -> None:
        if self._body_too_large or self._refusal is not None:
            return
        if len(self._body) + len(chunk) > self.body_limit():
            self._body_too_large = True
            self._body = bytearray()
            return
        self._body += chunk

    @property
    def body(self) -> bytes:
        if self._body_too_large:
            raise self._too_large()
        return bytes(self._body)

    def _too_large(self) -> ApiError:
        return ApiError(413, "payload_too_large",
                        f"The request body is larger than {self.body_limit()} bytes.")

    def can_drain_body(self) -> bool:
        """Whether a request refused before its body arrived may have the body read and
        thrown away (keeping the connection) rather than left unread (closing it): only a
        body that is within the limit, declared small, and not held back by the client
        (``Expect: 100-continue`` asks the server to refuse without reading it)."""
        return not self._body_too_large and small_body_length(self.request.headers) is not None

    async def admit(self) -> None:
        """Everything before the route's method: query, body size, credentials, CSRF, rate limit.
        On a follower, a write goes to the primary first of all (307)."""
        if self.application.read_only and (self.primary_only or (
                self.request.method in STATE_CHANGING and self.request.method not in self.follower_serves)):
            raise to_primary(self)
        query = self.request.query
        if query and ("%" in query or not query.isprintable()) and _QUERY_CONTROL.search(query):
            # Tornado would silently turn them into spaces: a value that is not what was sent.
            raise ApiError(400, "invalid_query", "The query string holds a control character "
                                                 "(%00-%1F or %7F), which no parameter takes.")
        if self.streams_body:  # else it was read whole, within the limit (BaseHandler.serving_class)
            try:
                length = content_length(self.request.headers.get("Content-Length"))
            except ValueError:
                raise ApiError(400, "bad_request", "Content-Length is not a number.") from None
            if length is not None and length > self.body_limit():
                self._body_too_large = True
                raise self._too_large()
        proven = getattr(self.request, "xrpc_principal", None)
        if proven is not None and self.auth is not None:
            # an /xrpc call, its user proven by their PDS's service-auth token (daemon/atproto/xrpc.py):
            # no cookie, no CSRF token; rate limited per user as a browser session is
            self.principal = proven
        elif self.auth is not None:
            claimed = self.claim_credentials()   # a Principal known already: no await
            self.principal = claimed if isinstance(claimed, Principal) else await self.authenticate_throttled(claimed)
            self.check_principal_kind()
            if self.principal.kind == "session" and self.request.method in STATE_CHANGING:
                self.check_csrf()
        self.apply_rate_limit()

    # ---------------------------------------------------------------- auth

    async def authenticate_throttled(self, claimed: Any = _ASK) -> Principal:
        """`authenticate`, counting failures per client address: past the budget
        (`rate_limits.failed_auth`) a credential that a plugin claimed and refused gets 429
        instead of 401, whichever plugin's it is. Valid credentials always pass, so one
        broken client cannot lock out others behind the same address."""
        if claimed is _ASK:
            claimed = self.claim_credentials()
        try:
            return await self.authenticate(claimed)
        except ApiError as exc:
            if exc.status == 401 and claimed is not None:   # a credential was presented, and refused
                limits = self.app.config.rate_limits.failed_auth
                decision = self.app.ratelimiter.hit(f"authfail:{self.client_ip()}", limits.requests,
                                                    limits.window_seconds)
                if not decision.allowed:
                    self.app.metrics.record_rate_limited("failed_auth")
                    raise ApiError(429, "rate_limited",
                                   f"Too many failed authentication attempts; try again in "
                                   f"{decision.retry_after_seconds} s.",
                                   details={"retryAfter": decision.retry_after_seconds},
                                   headers=decision.headers()) from None
            raise

    def claim_credentials(self) -> Any:
        """What the ``cr_authenticate`` hook answers for this request: None (no plugin's
        credential), the `Principal` (known at once), an awaitable of one, or the
        `ApiError` a plugin raised at once (refused, and counted, by `authenticate_throttled`)."""
        try:
            return self.application.authenticators(self)
        except ApiError as exc:
            return exc

    async def authenticate(self, claimed: Any) -> Principal:
        """The request's principal from `claim_credentials`'s answer, or 401."""
        if isinstance(claimed, ApiError):
            raise claimed
        principal = claimed if claimed is None or isinstance(claimed, Principal) else await claimed
        if principal is None:
            raise ApiError(401, "unauthorized", self._credentials_hint())
        return principal

    def _credentials_hint(self) -> str:
        if self.auth == "app":
            return "This route needs an API key in the X-Api-Key header."
        if self.auth == "session":
            return "This route needs a logged-in browser session."
        return "This route needs an API key (X-Api-Key) or a logged-in session."

    def check_principal_kind(self) -> None:
        assert self.principal is not None
        if self.auth in ("app", "session") and self.principal.kind != self.auth:
            raise ApiError(401, "unauthorized", self._credentials_hint())

    def check_csrf(self) -> None:
        assert self.principal is not None
        sent = self.request.headers.get("x-csrf-token", "")
        expected = self.principal.csrf_token or ""
        if not sent or not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            raise ApiError(403, "csrf_failed",
                           "Missing or wrong CSRF token: send the csrf-token cookie's value "
                           "in the x-csrf-token header.")

    # ---------------------------------------------------------------- rate limits

    def client_ip(self) -> str:
        return client_address(self.request.remote_ip or "", self.request.headers.get("X-Forwarded-For"),
                              self.application.config.server.trusted_proxies)

    def apply_rate_limit(self) -> None:
        """One request taken from its budget: per client address on sign-in and invite
        routes (their own budgets), else per app or per signed-in user; 429 when none is
        left. The RateLimit-* headers say what is left, on every answer."""
        rate_limit, principal = self.rate_limit, self.principal
        if rate_limit == "auth" or rate_limit == "invites":
            limits = self.application.config.rate_limits
            bucket = limits.auth if rate_limit == "auth" else limits.invites
            decision = self.application.ratelimiter.hit(f"{rate_limit}:{self.client_ip()}", bucket.requests,
                                                        bucket.window_seconds)
        elif principal is None:
            return
        elif principal.kind == "app":
            if principal.rate_limit is not None:
                requests, window = principal.rate_limit
            else:
                api = self.application.config.rate_limits.api
                requests, window = api.requests, api.window_seconds
            decision = self.application.ratelimiter.hit(f"app:{principal.app_id}", requests, window)
        elif principal.kind == "session":
            session = self.application.config.rate_limits.session
            decision = self.application.ratelimiter.hit(f"user:{principal.did}", session.requests,
                                                        session.window_seconds)
        else:
            return
        self._extra_headers = headers = decision.headers()
        for k, v in headers.items():
            self.put_header(k, v)
        if not decision.allowed:
            self.app.metrics.record_rate_limited(rate_limit or (principal.kind if principal is not None else ""))
            raise ApiError(429, "rate_limited",
                           f"Too many requests; try again in {decision.retry_after_seconds} s.",
                           details={"retryAfter": decision.retry_after_seconds})

    # ---------------------------------------------------------------- input

    def json_body(self, *, required: bool = True) -> dict[str, Any]:
        """The request body as a JSON object: `parse_json_object`'s rules (415 for another
        type, 400 if malformed)."""
        return parse_json_object(self.body, self.request.headers.get("Content-Type"), required=required)

    def page_params(self, arity: int, kinds: str | None = None) -> tuple[int, list[Any] | None]:
        """`limit` (1..100, default 20 when absent) and the decoded keyset cursor, if any.
        Strict: a present but empty, padded or non-ASCII-digit `limit` is 400
        `invalid_limit`; a present `cursor` that `decode_cursor` refuses (an empty one too)
        is 400 `invalid_cursor`. `kinds` declares the type of each cursor position
        ("i" integer, "s" string), e.g. ``page_params(2, "si")``."""
        raw_limit = self.get_query_argument("limit", None, strip=False)
        if raw_limit is None:
            limit = 20
        else:
            # ASCII digits only: `\d` and int() also take other scripts' digits ("٥").
            if not _LIMIT_RE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= 100:
                raise ApiError(400, "invalid_limit", "limit must be a whole number from 1 to 100.")
            limit = int(raw_limit)
        cursor = self.get_query_argument("cursor", None, strip=False)
        return limit, (decode_cursor(cursor, arity, kinds) if cursor is not None else None)


_LIMIT_RE = re.compile(r"[0-9]{1,4}")
# A control character in a query, percent-encoded or raw (C0 and DEL).
_QUERY_CONTROL = re.compile(r"%(?:[01][0-9A-Fa-f]|7[Ff])|[\x00-\x1f\x7f]")


def error_for(exc: BaseException | None, status_code: int, request_id: str) -> ApiError:
    """The JSON error to answer for `exc` (an ApiError as it is; anything else by status)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, tornado.web.HTTPError) and status_code < 500:
        return ApiError(status_code, None, exc.log_message or None)
    err = ApiError(status_code, None, "Something went wrong on our side." if status_code >= 500 else None)
    if status_code >= 500:
        err.message += f" Quote request id {request_id} when reporting it."
    return err


def to_primary(handler: Any) -> ApiError:
    """The answer of a follower to a write: 307 to the same path on the primary
    (`follower.primary_url`), which keeps the method and body; pages render it as a page
    with a link there."""
    primary = (handler.application.config.follower.primary_url or "").rstrip("/")
    return ApiError(307, "use_primary",
                    f"This server is a read-only copy; send this request to the primary at {primary}.",
                    headers={"Location": primary + handler.request.uri})


def as_answer(handler: Any, exc: BaseException) -> BaseException:
    """A write that reached a follower's read-only database becomes `to_primary`'s 307
    (sign-ins, audit entries of refused actions: anything not caught by `admit`)."""
    from store.db import ReadOnlyDatabase
    return to_primary(handler) if isinstance(exc, ReadOnlyDatabase) else exc


def log_failure(request: Any, exc: BaseException) -> None:
    """Log a request's failure: a 5xx ApiError as a warning, anything unexpected with its
    traceback; 4xx answers are the client's business and are not logged."""
    if isinstance(exc, ApiError):
        if exc.status >= 500:
            log.warning("%s %s -> %d %s: %s", request.method, request.path, exc.status, exc.code, exc.message)
    elif not (isinstance(exc, tornado.web.HTTPError) and exc.status_code < 500):
        log.error("unhandled error in %s %s", request.method, request.path,
                  exc_info=(type(exc), exc, exc.__traceback__))


def encode_json(value: Any) -> bytes:
    return _JSON_ENCODER.encode(value).encode("utf-8")


# ------------------------------------------------------------------ the base handler


class HttpDate:
    """The ``Date`` header value, formatted once a second rather than once a request
    (Tornado formats it for every response: ~3 % of a small request's CPU)."""

    second = -1
    value = ""

    @classmethod
    def now(cls) -> str:
        now = time.time()
        if int(now) != cls.second:
            cls.second, cls.value = int(now), tornado.httputil.format_timestamp(now)
        return cls.value



def _is_form(content_type: str | None) -> bool:
    """Whether Tornado would parse a body of this type into arguments (a form post)."""
    kind = (content_type or "").lstrip().lower()
    return kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


class BaseHandler(RequestLogic, tornado.web.RequestHandler):
    """Base for every route served by Tornado's RequestHandler (all but the hottest, see
    `daemon.http.lean`). A request is served by the route's class itself when its body is
    small and declared, and so read whole before the handler starts, or else by the class's
    streaming twin, whose body is streamed into `RequestLogic.data_received`
    (`serving_class`)."""

    #: True on a route's streaming twin (`serving_class`).
    streams_body = False

    @classmethod
    def route_class(cls) -> type["BaseHandler"]:
        """The class the route table names (for a streaming twin, the class it twins):
        what metrics and page ownership are keyed by."""
        return cls.__dict__.get("_twin_of", cls)

    def initialize(self, **kwargs: Any) -> None:
        self.route_kwargs = kwargs
        self.start_request()  # set_default_headers ran before us
        # read whole, within the limit (`serving_class`): not copied; else streamed in
        self._body = bytearray() if self.streams_body else self.request.body

    @classmethod
    def serving_class(cls, headers: tornado.httputil.HTTPHeaders, default_limit: int) -> type["BaseHandler"]:
        """The class that serves a request for this route with these headers: the route's
        own when the body is absent or declared by Content-Length within both
        `DRAIN_LIMIT` and the route's limit (``max_body``, else `default_limit`), as
        most API calls are; then Tornado reads it whole and starts the handler once,
        with no wait for the body in between (Tornado's streaming costs two more trips
        round the event loop a request, docs/performance.md). Every other request (a
        chunked, compressed, ``Expect: 100-continue`` or larger body, or a route that
        computes its limit in `body_limit`, the uploads, and form posts, whose whole body
        Tornado would parse before `prepare` and refuse malformed with its own 400, before
        authentication) goes to the streaming twin:
        `prepare` runs as soon as the headers arrive, so a body over the limit is refused
        before it is read. The answers are the same either way: a small body is read
        before a refusal is sent in both (`refuse_before_body`)."""
        if "Content-Encoding" in headers or cls.body_limit is not RequestLogic.body_limit \
                or "Content-Type" in headers and _is_form(headers["Content-Type"]):
            return cls.streaming_twin()
        length = small_body_length(headers)   # None: chunked, held back, unreadable or large
        if length is None or length > (cls.max_body if cls.max_body is not None else default_limit):
            return cls.streaming_twin()
        return cls

    @classmethod
    def streaming_twin(cls) -> type["BaseHandler"]:
        """This class with its body streamed (Tornado's `stream_request_body`), made once."""
        twin = cls.__dict__.get("_streaming_twin")
        if twin is None:
            twin = tornado.web.stream_request_body(type(cls.__name__, (cls,), {
                "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
                "streams_body": True, "_twin_of": cls}))
            twin._streaming_twin = twin
            cls._streaming_twin = twin
        return twin

    # ---------------------------------------------------------------- plumbing

    def clear(self) -> None:
        """Tornado's `RequestHandler.clear` (headers, body and status reset, at the start and
        before an error page), with the ``Date`` value from `HttpDate` instead of formatted
        anew and our ``Server`` value from the start. `tests/test_http_conventions.py` holds
        it equal to Tornado's."""
        self._headers = tornado.httputil.HTTPHeaders(
            {"Server": SERVER_HEADER, "Content-Type": "text/html; charset=UTF-8", "Date": HttpDate.now()})
        self.set_default_headers()
        self._write_buffer: list[bytes] = []
        self._status_code = 200
        self._reason = "OK"

    def put_header(self, name: str, value: str) -> None:
        """`set_header` for values this service makes itself (constants, digits, hex, the
        checked request id): they cannot hold CR/LF, so Tornado's per-value check is skipped.
        Never use it for a value that came from the request or from a user."""
        self._headers[name] = value

    def set_default_headers(self) -> None:
        # Runs in __init__ (before initialize) and again when an error response clears the
        # headers: then the request id and rate-limit headers must be put back.
        headers = self._headers   # `clear` made them, with Server, Content-Type and Date
        headers["Cache-Control"] = "no-store"
        headers["X-Content-Type-Options"] = "nosniff"
        if hasattr(self, "request_id"):
            headers["X-Request-Id"] = self.request_id
            for k, v in self._extra_headers.items():
                headers[k] = v
            if self.close_connection:
                headers["Connection"] = "close"

    async def prepare(self) -> None:
        self._counted = True
        self.application.inflight_started()
        try:
            await self.admit()
        except Exception as exc:  # noqa: BLE001 - answered below or once the body is read
            self.refuse_before_body(exc)

    def refuse_before_body(self, exc: Exception) -> None:
        """A refusal found before the body was read (prepare runs as soon as the headers
        arrive). Answering now would leave the body unread, and Tornado then closes the
        connection, so the client's next request on it would go unanswered. A small body
        is read and thrown away first: the route's method is replaced by one that raises
        `exc`, which Tornado calls once the body is in. Otherwise the answer goes now,
        saying ``Connection: close``."""
        if not self.can_drain_body():
            self.close_connection = True
            raise exc
        self._refusal = exc
        setattr(self, self.request.method.lower(), self._answer_refusal)

    def _answer_refusal(self, *args: Any, **kwargs: Any) -> None:
        assert self._refusal is not None
        raise self._refusal

    def on_finish(self) -> None:
        self._release()

    def on_connection_close(self) -> None:
        self._release()
        super().on_connection_close()

    def _release(self) -> None:
        if getattr(self, "_counted", False):
            self._counted = False
            self.application.inflight_finished()

    # ---------------------------------------------------------------- output

    def send_json(self, value: Any, status: int = 200) -> None:
        self.send_json_bytes(encode_json(value), status)

    def send_json_bytes(self, body: bytes, status: int = 200) -> None:
        """Answer JSON already encoded (e.g. built by SQLite: store.members.member_page)."""
        if status != 200:
            self.set_status(status)
        self.put_header("Content-Type", _JSON_CT)
        if status != 200 or self.request.method not in ("GET", "HEAD"):
            # what Tornado's finish would count; a 200 to a GET may become a 304 there, with none
            self.put_header("Content-Length", str(len(body)))
        self.finish(body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        err = error_for(exc, status_code, self.request_id)
        for k, v in err.headers.items():
            self.set_header(k, v)
        self.put_header("Content-Type", _JSON_CT)
        self.finish(encode_json(err.body()))

    def _handle_request_exception(self, e: BaseException) -> None:
        e = as_answer(self, e)
        if isinstance(e, ApiError):
            log_failure(self.request, e)
            if not self._finished:
                self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        log_failure(self.request, value)


class NotFoundHandler(BaseHandler):
    """The default handler: JSON 404 for unknown routes, unless a plugin answers the
    request itself (`cr_not_found`: the web plugin's HTML page for browsers)."""

    async def admit(self) -> None:
        raise ApiError(404, "not_found", f"No route for {self.request.method} {self.request.path}.")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 404:
            answered = self.app.pm.hook.cr_not_found(handler=self)
            if inspect.isawaitable(answered):
                getattr(answered, "close", lambda: None)()  # a coroutine: never awaited
            elif answered is True and self._finished:
                return
        super().write_error(status_code, **kwargs)


class HealthHandler(BaseHandler):
    @operation("Liveness and readiness: the database answers; where the network sync stands", responses={200: obj(
        {"status": {"type": "string", "enum": ["ok"]}, "version": STRING, "plugins": arr(STRING),
         "role": {"type": "string", "enum": ["primary", "follower"]},
         "replicaLagSeconds": {"type": ["number", "null"]},
         "sync": obj({"state": {"type": "string", "enum": ["off", "connecting", "live", "backoff", "stopped"]},
                      "cursor": {"type": ["integer", "null"]}, "lagSeconds": {"type": ["number", "null"]}},
                     ["state", "cursor", "lagSeconds"])},
        ["status", "version", "plugins", "role", "replicaLagSeconds", "sync"])}, errors={503: "Not ready"})
    async def get(self) -> None:
        from daemon import __version__
        await self.app.db.fetchval("SELECT 1")
        plugins = sorted(name for name, _ in self.app.pm.list_name_plugin() if name is not None)
        self.send_json({"status": "ok", "version": __version__, "plugins": plugins,
                        "role": self.app.config.server.role,
                        "replicaLagSeconds": await self.app.replica_lag_seconds(),
                        "sync": self.app.sync.health()})


# ------------------------------------------------------------------ body checks
# The checks of a request body's fields, each raising a 400 ApiError naming the field:
# the handler's input, with `json_body` above. Plugins call them through one name,
# ``validate.string(body, "name", max_len=...)`` (`validate`, below; daemon.plugin exports it).

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


#: The body checks as one name, as plugins use them: ``validate.string(body, field, ...)``.
validate = SimpleNamespace(string=string, boolean=boolean, integer=integer, string_list=string_list,
                           hostname=hostname, invalid=invalid, strip_spoofing=strip_spoofing,
                           SPOOFING_CHARS=SPOOFING_CHARS)
