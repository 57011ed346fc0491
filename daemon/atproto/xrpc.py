"""XRPC: ``/xrpc/<nsid>``, the API's actions and reads as atproto methods (docs/xrpc.md).

A client calls the service through the user's own PDS: ``POST <pds>/xrpc/<nsid>`` with
``atproto-proxy: <service DID>#commonroom``; the PDS forwards the call here with a
service-auth token (``Authorization: Bearer <jwt>``, ``iss`` the user, ``aud`` this service,
``lxm`` the method id) that `daemon.atproto.proofs.Proofs.verify` checks. The call then acts
as that user, as their own browser session would: no API key, rate limited per user DID,
audited with ``actorProven: true``.

Each method is a route of ``/api/v1`` (or a plugin's) and is served by that route's own
handler, unchanged: the call becomes an in-process request to the route (`_Capture` stands
in for the HTTP connection), with the user as its principal. So there is one
implementation of every action. Which routes are methods:

* every (route, HTTP method) that declares a user method (`user_methods`, the method ids
  of docs/identity.md; a plugin's keep the plugin's own NSID authority);
* the reads a handler lists in ``xrpc_reads`` (``{"GET": "community.get"}``), named as
  user methods are (a two-part name joins `atproto.namespace`, a full NSID stays as it is).

A GET is a ``query`` (its parameters: the path's fields, then the route's query
parameters); anything else a ``procedure`` (its JSON input: the path's fields and the
route's body, or its query parameters when it has no body). The first path field, the
community's DID, is called ``community``. Parameters, input and output are checked against
the method's lexicon (``lexicons/``, or the plugin's `cr_lexicons`): a call that breaks it
is 400 ``InvalidRequest`` naming the field, an unknown method 501 ``MethodNotImplemented``.
Errors keep their status and code, in XRPC's shape ``{"error", "message"}``.

The fields that name the acting user (``userDid``, ``adminDid``, ``currentOwnerDid``,
``creatorDid`` and the method's own user field) may be left out: the method's user field
(and a read's ``userDid``) is the token's issuer; one that names anybody else is 401
``proof_wrong_user``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import tornado.httputil

from daemon.atproto.lexicons import LexiconError, Lexicons
from daemon.atproto.proofs import UserMethod
from daemon.http.base import ApiError, BaseHandler, Principal, encode_json
from daemon.http.openapi import Operation, declared, implemented_methods, path_templates

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.xrpc")

#: Body and query fields that name the acting user on the API routes.
ACTING_FIELDS = frozenset({"userDid", "adminDid", "currentOwnerDid", "creatorDid"})
#: The XRPC name of the path field holding the community's DID (``did`` on the routes).
COMMUNITY = "community"
#: The response headers of the route that the XRPC answer passes on.
_PASSED_HEADERS = ("WWW-Authenticate", "Retry-After", "RateLimit-Limit", "RateLimit-Remaining",
                   "RateLimit-Reset")


@dataclass(frozen=True)
class Route:
    """One route a method calls: its handler, HTTP method, path (text and field names)."""

    handler: type
    http_method: str
    parts: tuple[tuple[str, str], ...]   # ("text", literal) or ("field", xrpc name)
    operation: Operation | None

    @property
    def fields(self) -> list[str]:
        return [value for kind, value in self.parts if kind == "field"]

    def path(self, values: dict[str, Any]) -> str:
        return "".join(value if kind == "text" else quote(str(values[value]), safe=":@")
                       for kind, value in self.parts)

    @property
    def takes_body(self) -> bool:
        return self.http_method != "GET" and self.operation is not None and self.operation.body is not None


@dataclass(frozen=True)
class XrpcMethod:
    id: str
    kind: str                 # "query" or "procedure"
    user_field: str | None    # the field naming the acting user (None for a read)
    description: str
    routes: tuple[Route, ...]

    def route_for(self, values: dict[str, Any]) -> Route | None:
        """The route whose path fields the call gives, the most specific first (a record's
        read takes ``rkey``; without it, the collection's list)."""
        fitting = [r for r in self.routes if all(f in values for f in r.fields)]
        return max(fitting, key=lambda r: len(r.fields), default=None)


# ------------------------------------------------------------------ the method table


def methods(app: "Application") -> dict[str, XrpcMethod]:
    """The XRPC methods of the routes `app` serves, by id (built once per app)."""
    if app.xrpc_methods is None:
        app.xrpc_methods = build_methods(app.routes, app.config.atproto.namespace)
    return app.xrpc_methods


def build_methods(routes: list[tuple], namespace: str) -> dict[str, XrpcMethod]:
    found: dict[str, dict[str, Any]] = {}
    for route in routes:
        pattern, handler = route[0], route[1]
        declared_users = getattr(handler, "user_methods", None) or {}
        reads = getattr(handler, "xrpc_reads", None) or {}
        for name in implemented_methods(handler):
            verb = name.upper()
            spec: Any = declared_users.get(verb)
            if spec is None and verb in reads:
                spec = UserMethod(reads[verb], "", "")
            if spec is None:
                continue
            choices = spec.items() if isinstance(spec, dict) else [(None, spec)]
            for action, method in choices:
                parts = _parts(pattern, handler, name, action)
                if parts is None:
                    continue
                user_field = method.field or None
                mid = method.id(namespace)
                entry = found.setdefault(mid, {"kind": "query" if verb == "GET" else "procedure",
                                               "user_field": user_field, "description": method.description,
                                               "routes": []})
                if (verb == "GET") != (entry["kind"] == "query"):
                    continue  # membership/check answers GET and POST: the GET is the method
                entry["routes"].append(Route(handler, verb, parts, declared(handler, name)))
    return {mid: XrpcMethod(mid, e["kind"], e["user_field"], e["description"], tuple(e["routes"]))
            for mid, e in sorted(found.items())}


def _parts(pattern: str, handler: type, method: str, action: str | None) -> tuple[tuple[str, str], ...] | None:
    """The path of a route as text and fields; the alternatives group fixed to `action`."""
    for path, params in path_templates(pattern, handler, method):
        if action is not None and not re.search(rf"/{re.escape(action)}(/|$)", path):
            continue
        out: list[tuple[str, str]] = []
        names = [p["name"] for p in params]
        pos = 0
        for match in re.finditer(r"\{([^}]+)\}", path):
            out.append(("text", path[pos:match.start()]))
            name = match.group(1)
            out.append(("field", COMMUNITY if name == "did" and name == names[0] else name))
            pos = match.end()
        out.append(("text", path[pos:]))
        return tuple(p for p in out if p != ("text", ""))
    return None


def lexicons(app: "Application") -> Lexicons:
    """The service's lexicons with the plugins' (`cr_lexicons`) beside them."""
    if app.xrpc_lexicons is None:
        app.xrpc_lexicons = Lexicons({**app.declarations.lexicons, **app.lexicons.docs})
    return app.xrpc_lexicons


# ------------------------------------------------------------------ errors


def xrpc_error(status: int, error: str, message: str) -> ApiError:
    return ApiError(status, error, message)


def invalid(exc: LexiconError) -> ApiError:
    """400 ``InvalidRequest`` naming each field that breaks the lexicon."""
    text = "; ".join(f"{p}: {m}" if p else m for p, m in exc.problems)
    return ApiError(400, "InvalidRequest", f"Input does not match the lexicon {exc.nsid}: {text}")


# ------------------------------------------------------------------ the route


class _Capture(tornado.httputil.HTTPConnection):
    """Stands in for the HTTP connection of a route called in-process: keeps the answer."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.status = 500
        self.headers: tornado.httputil.HTTPHeaders = tornado.httputil.HTTPHeaders()
        self.chunks: list[bytes] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def set_close_callback(self, callback: Any) -> None:
        pass

    def write_headers(self, start_line: Any, headers: tornado.httputil.HTTPHeaders,
                      chunk: bytes | None = None) -> "asyncio.Future[None]":
        self.status = start_line.code
        self.headers = headers
        return self.write(chunk or b"")

    def write(self, chunk: bytes) -> "asyncio.Future[None]":
        if chunk:
            self.chunks.append(chunk)
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        written.set_result(None)
        return written

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        self.finish()


class XrpcHandler(BaseHandler):
    """``GET``/``POST /xrpc/<nsid>``: one of the methods, as the user a service-auth token
    proves (the module docstring). Left out of the OpenAPI document: each method is
    described by its lexicon instead."""

    auth = None  # the service-auth token is the credential, checked in `_user`
    described_by_lexicons = True

    async def get(self, nsid: str) -> None:
        await self._call(nsid, "query")

    async def post(self, nsid: str) -> None:
        await self._call(nsid, "procedure")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """XRPC's error shape: ``{error, message}``, nothing more."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        from daemon.http.base import error_for
        err = error_for(exc, status_code, self.request_id)
        for k, v in err.headers.items():
            self.set_header(k, v)
        self.put_header("Content-Type", "application/json; charset=utf-8")
        self.finish(encode_json({"error": err.code, "message": err.message}))

    async def _call(self, nsid: str, kind: str) -> None:
        method = methods(self.app).get(nsid)
        if method is None:
            raise xrpc_error(501, "MethodNotImplemented", f"This service has no XRPC method {nsid[:200]}.")
        if method.kind != kind:
            verb = "GET" if method.kind == "query" else "POST"
            raise xrpc_error(400, "InvalidRequest", f"{nsid} is a {method.kind}: call it with {verb}.")
        lex = lexicons(self.app)
        if lex.method(nsid) is None:
            raise xrpc_error(501, "MethodNotImplemented", f"{nsid} has no lexicon here.")
        user = await self._user(nsid)
        # Path fields and the user field a plugin's lexicon leaves out are still taken: the
        # route checks them (and the user field is the token's issuer).
        path_fields = {f for r in method.routes for f in r.fields} | {method.user_field} - {None}
        try:
            raw = {k: [v.decode("utf-8") for v in vs] for k, vs in self.request.query_arguments.items()}
            if kind == "query":
                self._act_as(method, user, raw, text=True)
                undeclared = {k: v[-1] for k, v in raw.items() if k in path_fields
                              and k not in lex.declared(nsid, "parameters")}
                values = lex.parse_params(nsid, {k: v for k, v in raw.items() if k not in undeclared})
                values.update(undeclared)
            else:
                values = lex.parse_params(nsid, raw)
                body = self.json_body(required=False)
                self._act_as(method, user, body)
                undeclared = {k: v for k, v in body.items() if k in path_fields
                              and k not in lex.declared(nsid, "input")}
                lex.validate_input(nsid, {k: v for k, v in body.items() if k not in undeclared})
                values.update(body)
        except LexiconError as exc:
            raise invalid(exc) from None
        except UnicodeDecodeError:
            raise xrpc_error(400, "InvalidRequest", "A parameter is not UTF-8.") from None
        except ApiError as exc:
            if exc.code.startswith("proof_"):
                raise
            raise xrpc_error(exc.status, "InvalidRequest", exc.message) from None  # not a JSON object; 415
        route = method.route_for(values)
        if route is None:
            missing = [f for f in method.routes[0].fields if f not in values]
            raise xrpc_error(400, "InvalidRequest", f"Input must include {', '.join(missing)}.")
        status, headers, answer = await self._run(route, user, values)
        passed = {name: headers[name] for name in _PASSED_HEADERS if name in headers}
        if status >= 300:
            code, message = "InternalServerError", "The method failed."
            if isinstance(answer, dict):
                code = str(answer.get("error") or code)
                message = str(answer.get("message") or message)
            raise ApiError(status, code, message, headers=passed)   # an error answer keeps only these
        for name, value in passed.items():
            self.set_header(name, value)
        try:
            lex.validate_output(nsid, answer)
        except LexiconError as exc:
            log.error("the answer of %s does not match its lexicon: %s", nsid, exc)
            raise ApiError(500, "InternalServerError", f"The answer does not match the lexicon of {nsid}; "
                                                       f"quote request id {self.request_id}.") from None
        self.send_json(answer)

    async def _user(self, nsid: str) -> str:
        """The user the service-auth token proves (401 AuthRequired without one; the proof
        codes of docs/identity.md for a bad one, counted against the caller's address as
        failed credentials are)."""
        sent = self.request.headers.get("Authorization", "")
        scheme, _, token = sent.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "AuthRequired", "Call this method through your PDS (atproto-proxy: "
                           f"{self.app.proofs.did}#commonroom), or send a service-auth token for it "
                           f"(aud {self.app.proofs.did}, lxm {nsid}) in Authorization: Bearer.",
                           headers={"WWW-Authenticate": "Bearer"})
        try:
            return await self.app.proofs.verify(token.strip(), user_did=None, lxm=nsid)
        except ApiError as exc:
            if exc.status == 401:
                limits = self.app.config.rate_limits.failed_auth
                decision = self.app.ratelimiter.hit(f"authfail:{self.client_ip()}", limits.requests,
                                                    limits.window_seconds)
                if not decision.allowed:
                    self.app.metrics.record_rate_limited("failed_auth")
                    raise ApiError(429, "RateLimitExceeded", "Too many failed authentication attempts; try "
                                   f"again in {decision.retry_after_seconds} s.",
                                   headers=decision.headers()) from None
            raise

    @staticmethod
    def _act_as(method: XrpcMethod, user: str, values: dict[str, Any], text: bool = False) -> None:
        """The fields naming the acting user are the token's issuer (the method's user
        field filled in where it is left out); one naming anybody else is 401. `text`:
        `values` are query parameters (lists of strings)."""
        for name in ACTING_FIELDS | ({method.user_field} if method.user_field else set()):
            given = values.get(name)
            if given is not None and given != ([user] if text else user):
                raise ApiError(401, "proof_wrong_user",
                               f"{name} names {str(given)[:200]!r}, but the token was issued by {user}: "
                               "over XRPC a call acts only as the user whose PDS sent it.")
        if method.user_field:
            values.setdefault(method.user_field, [user] if text else user)

    async def _run(self, route: Route, user: str, values: dict[str, Any]) -> tuple[int, Any, Any]:
        """Serve the call with the route's own handler, in-process; its (status, headers,
        JSON answer)."""
        if method_reads_viewer(route) and "userDid" not in values:
            values["userDid"] = user
        path_fields = set(route.fields)
        rest = {k: v for k, v in values.items() if k not in path_fields}
        query, body = "", b""
        if route.takes_body:
            body = encode_json(rest)
        elif rest:
            query = "?" + urlencode([(k, _query_text(item)) for k, v in rest.items()
                                     for item in (v if isinstance(v, list) else [v])])
        uri = route.path(values) + query
        headers = tornado.httputil.HTTPHeaders({"X-Request-Id": self.request_id,
                                                "Host": self.request.host or "localhost"})
        if body:
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(body))
        capture = _Capture(self.request.connection.context)
        start = tornado.httputil.RequestStartLine(route.http_method, uri, "HTTP/1.1")
        request = tornado.httputil.HTTPServerRequest(headers=headers, connection=capture, start_line=start)
        request.xrpc_principal = Principal(kind="session", did=user, extra={"xrpc": True})  # type: ignore[attr-defined]
        delegate = self.app.find_handler(request)
        pending = delegate.headers_received(start, headers)
        if pending is not None:
            await pending
        if body:
            pending = delegate.data_received(body)
            if pending is not None:
                await pending
        delegate.finish()
        await capture.done
        raw = b"".join(capture.chunks)
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = None
        return capture.status, capture.headers, answer


def method_reads_viewer(route: Route) -> bool:
    """Whether the route is a read that takes the viewing user as ``userDid``."""
    op = route.operation
    return route.http_method == "GET" and op is not None and any(p.name == "userDid" for p in op.params)


def _query_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def routes() -> list[tuple]:
    return [(r"/xrpc/([A-Za-z0-9.-]{1,317})", XrpcHandler)]

