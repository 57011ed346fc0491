"""The OpenAPI 3.1 document, generated from the routes and their handlers' declarations.

One source of truth: each handler method that answers an API or JSON route carries an
`operation` declaration (summary, query parameters, request body and response schemas,
extra error statuses). `build_document` walks the routes the app serves (the core's and
every plugin's `cr_routes`) and turns each (pattern, handler, method) into an operation:

* the path template comes from the route's regular expression; path parameters are named
  after the method's arguments (``raw_did`` → ``did``, ``member_did`` → ``memberDid``) and
  typed from their group (a DID, an app id, one of the alternatives ...);
* security comes from the handler's `auth` (``app`` → API key, ``session`` → session
  cookie, plus the CSRF header on state-changing methods, ``any`` → either);
* the standard error shape ``{error, message, details?}`` is declared for the statuses
  the core answers by itself (400 on any input, 401/429 with credentials, 403 for the CSRF
  check, 404 with path parameters, 413/415 with a body, 500), plus the ones the
  declaration names.

A handler class that serves HTML pages to browsers sets ``serves_html = True`` and is
left out of the document (docs/api.md, "The OpenAPI document"). Every other route must
declare every method it implements: `undocumented` lists those that do not (a test fails
on any).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import tornado.web

from daemon.http.routing import pattern_groups, pattern_literal

METHODS = ("get", "post", "put", "patch", "delete")
STATE_CHANGING = frozenset({"post", "put", "patch", "delete"})
JSON = "application/json"

# ------------------------------------------------------------------ schema helpers


def obj(properties: dict[str, Any], required: Iterable[str] = (), **extra: Any) -> dict[str, Any]:
    """A JSON object schema."""
    out: dict[str, Any] = {"type": "object", "properties": properties}
    required = list(required)
    if required:
        out["required"] = required
    out.update(extra)
    return out


def arr(items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, **extra}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null (OpenAPI 3.1: a type list, or anyOf for a schema without a type)."""
    kind = schema.get("type")
    if isinstance(kind, str) and set(schema) <= {"type", "format", "description"}:
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def page(key: str, item: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A page of a list: ``{key: [item], cursor?}`` (cursor absent on the last page)."""
    return obj({key: arr(item), "cursor": CURSOR, **more}, [key, *more])


STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
ANY: dict[str, Any] = {}
DATETIME: dict[str, Any] = {"type": "string", "description": "ISO 8601 time (UTC)"}
DID: dict[str, Any] = {"type": "string", "pattern": r"^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$",
                       "maxLength": 2048, "description": "a DID (did:plc or did:web)"}
CURSOR: dict[str, Any] = {"type": "string", "description": "an opaque cursor from the previous page"}
STRING_OR_NULL = nullable(STRING)
DATETIME_OR_NULL = {"type": ["string", "null"], "description": "ISO 8601 time (UTC), or null"}

ERROR: dict[str, Any] = obj(
    {"error": {"type": "string", "description": "a machine-readable code"},
     "message": {"type": "string", "description": "a sentence for people"},
     "details": {"description": "validation problems ([{field, message}]) or {retryAfter}"}},
    ["error", "message"])

ERROR_TEXT = {
    400: "Bad input (malformed JSON, a wrong field, a bad limit or cursor ...)",
    401: "No or bad credentials",
    403: "Authenticated but not allowed (also: a missing or wrong CSRF token)",
    404: "No such resource (or not visible to the caller)",
    405: "Method not allowed",
    409: "Conflicts with the current state",
    413: "The body is larger than the limit",
    415: "The body is not of an accepted media type",
    429: "Rate limited",
    500: "A bug: the message quotes the request id",
    502: "The PDS (or another upstream) failed or could not be reached",
    503: "Not ready",
}


# ------------------------------------------------------------------ declarations


@dataclass(frozen=True)
class Param:
    name: str
    schema: dict[str, Any] = field(default_factory=lambda: dict(STRING))
    required: bool = False
    description: str = ""
    where: str = "query"


def query(name: str, schema: dict[str, Any] | None = None, *, required: bool = False,
          description: str = "") -> Param:
    return Param(name, schema or dict(STRING), required, description)


def header(name: str, schema: dict[str, Any] | None = None, *, required: bool = False,
           description: str = "") -> Param:
    return Param(name, schema or dict(STRING), required, description, "header")


PAGE_PARAMS = (
    query("limit", {"type": "string", "pattern": "^[0-9]{1,4}$", "description": "1 to 100, default 20"}),
    query("cursor", CURSOR),
)


@dataclass(frozen=True)
class Response:
    """A response other than JSON: `content` maps media types to schemas (empty: no body)."""

    description: str
    content: dict[str, dict[str, Any]] = field(default_factory=dict)
    headers: dict[str, dict[str, Any]] = field(default_factory=dict)


def html(description: str) -> Response:
    return Response(description, {"text/html": {"type": "string"}})


def redirect(description: str) -> Response:
    return Response(description, {}, {"Location": {"schema": STRING, "description": "where to go next"}})


NO_CONTENT = Response("Done; no body")
ERROR_REF: dict[str, Any] = {"$ref": "#/components/schemas/Error"}


def error_or_page(description: str) -> Response:
    """An error answered as JSON, or as an HTML page to a browser's form post."""
    return Response(description, {JSON: ERROR_REF, "text/html": {"type": "string"}})


@dataclass(frozen=True)
class Operation:
    summary: str
    responses: dict[int, Any]
    description: str = ""
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    body_required: bool = True
    body_types: tuple[str, ...] = (JSON,)
    errors: dict[int, str] = field(default_factory=dict)
    paged: bool = False
    operation_id: str | None = None


def operation(summary: str, *, responses: dict[int, Any], description: str = "",
              params: Sequence[Param] = (), body: dict[str, Any] | None = None,
              body_required: bool = True, body_types: Sequence[str] = (JSON,),
              errors: Iterable[int] | dict[int, str] = (), paged: bool = False,
              operation_id: str | None = None) -> Callable[[Any], Any]:
    """Declare a handler method's operation (see the module docstring).

    `responses` maps success statuses to a JSON schema (or a `Response` for anything else);
    `errors` names error statuses beyond the standard ones (a dict may describe them);
    `paged` adds the `limit` and `cursor` query parameters."""
    op = Operation(summary, dict(responses), description, tuple(params), body, body_required,
                   tuple(body_types), dict(errors) if isinstance(errors, dict) else {s: "" for s in errors},
                   paged, operation_id)

    def mark(method: Any) -> Any:
        method.__openapi__ = op
        return method
    return mark


def declared(handler: type, method: str) -> Operation | None:
    """The declaration of `handler`'s `method`, if it has one."""
    return getattr(getattr(handler, method, None), "__openapi__", None)


# ------------------------------------------------------------------ routes


def implemented_methods(handler: type) -> list[str]:
    out = []
    for name in METHODS:
        impl = getattr(handler, name, None)
        if impl is None:
            continue
        if issubclass(handler, tornado.web.RequestHandler) and impl is getattr(tornado.web.RequestHandler, name):
            continue
        out.append(name)
    return out


def documented_routes(routes: Sequence[tuple]) -> list[tuple[str, type]]:
    """(pattern, handler) of the routes the document covers: all but HTML pages and the XRPC
    route, whose methods their lexicons describe (``described_by_lexicons``, docs/xrpc.md)."""
    return [(r[0], r[1]) for r in routes
            if not getattr(r[1], "serves_html", False) and not getattr(r[1], "described_by_lexicons", False)]


def undocumented(routes: Sequence[tuple]) -> list[str]:
    """``METHOD pattern (handler)`` for every covered route method without a declaration."""
    return [f"{m.upper()} {pattern} ({handler.__module__}.{handler.__qualname__})"
            for pattern, handler in documented_routes(routes)
            for m in implemented_methods(handler) if declared(handler, m) is None]


def _camel(name: str) -> str:
    name = name.removeprefix("raw_")
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _group_schema(group: str) -> dict[str, Any]:
    inner = group[1:-1]
    if group.startswith("(did"):
        return dict(DID)
    return {"type": "string", "pattern": f"^{inner}$"}


def path_templates(pattern: str, handler: type, method: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The OpenAPI paths of a route with their path parameters, named after the method's
    arguments. A group of alternatives (``(approve|reject)``) becomes one path per
    alternative: ``/members/{memberDid}`` and ``/members/{decision}`` would be the same
    template to OpenAPI."""
    spans = pattern_groups(pattern)
    names = [p for p in inspect.signature(getattr(handler, method)).parameters if p != "self"]
    # a handler whose route has groups its methods do not receive (a mixin takes them off
    # the front, such as the app id of the owner's webhook routes) names them itself
    names = [*getattr(handler, "path_prefix_names", ()), *(_camel(n) for n in names)][:len(spans)]
    names += [f"param{i}" for i in range(len(names), len(spans))]
    variants: list[tuple[str, list[dict[str, Any]]]] = [("", [])]
    pos = 0
    for (start, end), name in zip(spans, names):
        literal, group = pattern_literal(pattern[pos:start]), pattern[start:end]
        alternatives = _alternatives(group)
        if alternatives:
            variants = [(path + literal + alt, params) for path, params in variants for alt in alternatives]
        else:
            param = {"name": name, "in": "path", "required": True, "schema": _group_schema(group)}
            variants = [(path + literal + "{" + name + "}", [*params, param]) for path, params in variants]
        pos = end
    return [(path + pattern_literal(pattern[pos:]), params) for path, params in variants]


def _alternatives(group: str) -> list[str]:
    inner = group[1:-1]
    return inner.split("|") if re.fullmatch(r"[\w-]+(\|[\w-]+)+", inner) else []


def _tag(handler: type, plugin: str | None = None) -> str:
    """The plugin that serves the route (its registered name: ``noticeboard``, not its
    package ``commonroom_noticeboard``); ``core`` for the daemon's own."""
    if plugin:
        return plugin
    parts = handler.__module__.split(".")
    if parts[0] == "plugins" and len(parts) > 1:
        return parts[1]
    return "core" if parts[0] == "daemon" else parts[0]


def _operation_id(handler: type, method: str, plugin: str | None = None) -> str:
    """``communities.api.Join.post``: the plugin's name, the module inside its package
    (without ``handlers``), the class (without ``Handler``), the method; a third-party
    plugin's ``commonroom_noticeboard.handlers.NoticesHandler`` is ``noticeboard.Notices``."""
    parts = [p for p in handler.__module__.split(".") if p != "plugins"]
    if plugin:
        parts = [plugin, *parts[1:]]
    parts = [p for p in parts if p != "handlers"]
    return ".".join([*parts, handler.__name__.removesuffix("Handler"), method])


def _media(schema: Any) -> dict[str, Any]:
    return {JSON: {"schema": schema}}


def _security(auth: str | None, method: str) -> list[dict[str, list[str]]]:
    session = {"session": [], "csrf": []} if method in STATE_CHANGING else {"session": []}
    return {"app": [{"apiKey": []}], "session": [session],
            "any": [{"apiKey": []}, session]}.get(auth or "", [])


def build_operation(path: str, path_params: list[dict[str, Any]], handler: type, method: str,
                    op: Operation, variant: str = "", plugin: str | None = None) -> dict[str, Any]:
    auth = getattr(handler, "auth", None)
    params = list(path_params)
    declared_params = [*(PAGE_PARAMS if op.paged else ()), *op.params]
    for p in declared_params:
        entry: dict[str, Any] = {"name": p.name, "in": p.where, "required": p.required, "schema": p.schema}
        if p.description:
            entry["description"] = p.description
        params.append(entry)
    responses: dict[str, Any] = {}
    for status, value in sorted(op.responses.items()):
        if isinstance(value, Response):
            entry = {"description": value.description}
            if value.content:
                entry["content"] = {t: {"schema": s} for t, s in value.content.items()}
            if value.headers:
                entry["headers"] = value.headers
        else:
            entry = {"description": "OK" if status < 300 else "", "content": _media(value)}
        responses[str(status)] = entry
    errors: dict[int, str] = {500: ""}
    if params or op.body is not None:
        errors[400] = ""
    if auth:
        errors.update({401: "", 429: ""})
    if getattr(handler, "rate_limit", None):
        errors[429] = ""
    if auth in ("session", "any") and method in STATE_CHANGING:
        errors[403] = ""
    if path_params:
        errors[404] = ""
    if op.body is not None:
        errors.update({413: "", 415: ""})
    errors.update(op.errors)
    for status, text in sorted(errors.items()):
        if str(status) in responses:
            continue
        responses[str(status)] = {"description": text or ERROR_TEXT.get(status, "Error"),
                                  "content": _media(ERROR_REF)}
    out: dict[str, Any] = {
        "operationId": (op.operation_id or _operation_id(handler, method, plugin)) + variant,
        "summary": op.summary,
        "tags": [_tag(handler, plugin)],
        "security": _security(auth, method),
        "responses": responses,
    }
    if op.description:
        out["description"] = op.description
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": op.body_required,
                              "content": {t: {"schema": op.body if t == JSON else {}} for t in op.body_types}}
    return out


def _user_method(handler: type, method: str, path: str) -> Any:
    """The `daemon.atproto.proofs.UserMethod` this (handler, method, concrete path) acts by, if any."""
    spec = (getattr(handler, "user_methods", None) or {}).get(method.upper())
    if isinstance(spec, dict):
        return spec.get(path.rsplit("/", 1)[-1])
    return spec


def enum_of(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (a string, or an array of strings) whose allowed values are a list the app
    knows only once its plugins are loaded, filled in by `build_document` from its
    `enums` (``"event_kinds"``: every declared event kind)."""
    return {**schema, "x-enum-of": name}


#: One of the app's declared event kinds (`cr_event_kinds`), as an enum in the document.
EVENT_KIND = enum_of("event_kinds", {"type": "string"})


def fill_enums(node: Any, enums: dict[str, list[str]]) -> Any:
    """A copy of `node` with every `enum_of` marker replaced by its values (an array gets
    its items' enum and a `maxItems` of all of them)."""
    if isinstance(node, list):
        return [fill_enums(n, enums) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: fill_enums(v, enums) for k, v in node.items() if k != "x-enum-of"}
    name = node.get("x-enum-of")
    if name is not None:
        values = list(enums.get(name, ()))
        if out.get("type") == "array":
            out["items"] = {"type": "string", "enum": values}
            out["maxItems"] = len(values)
        else:
            out["enum"] = values
    return out


def build_document(routes: Sequence[tuple], *, version: str, base_url: str | None = None,
                   namespace: str | None = None, enums: dict[str, list[str]] | None = None,
                   plugins: dict[str, str] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `routes` (as the app serves them); `plugins`: each
    route pattern's plugin (``app.route_plugins``), whose name tags its operations and
    begins their ids. With `namespace`,
    each operation that acts in a user's name names its method id
    (``x-atproto-method-id``: the ``lxm`` a proof of that user carries, docs/identity.md)
    and the body or query field that names the user (``x-atproto-user-field``)."""
    paths: dict[str, dict[str, Any]] = {}
    for pattern, handler in documented_routes(routes):
        for method in implemented_methods(handler):
            op = declared(handler, method)
            if op is None:
                continue
            variants = path_templates(pattern, handler, method)
            for path, path_params in variants:
                variant = "." + path.rsplit("/", 1)[-1] if len(variants) > 1 else ""
                built = build_operation(path, path_params, handler, method, op, variant,
                                        (plugins or {}).get(pattern))
                acting = _user_method(handler, method, path) if namespace else None
                if acting is not None:
                    built["x-atproto-method-id"] = acting.id(namespace)
                    built["x-atproto-user-field"] = acting.field
                paths.setdefault(path, {})[method] = built
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Commonroom",
            "version": version,
            "description": "A self-hostable community service for the AT Protocol. Conventions "
                           "(errors, pagination, rate limits, CSRF) are in docs/api.md.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key",
                           "description": "An app's API key (cr_<64 hex>)"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sid",
                            "description": "A browser session, set by the OAuth login"},
                "csrf": {"type": "apiKey", "in": "header", "name": "x-csrf-token",
                         "description": "The csrf-token cookie's value, on state-changing "
                                        "session requests"},
            },
        },
    }
    if base_url:
        doc["servers"] = [{"url": base_url.rstrip("/")}]
    return fill_enums(doc, enums or {})


def event_webhooks(kinds: Iterable[Any], owners: dict[str, str] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 ``webhooks`` of the declared event kinds (`EventKind`s, the plugins'
    own too): per kind, what a webhook subscribed to it receives, ``{type, timestamp,
    data}`` with `data` the kind's schema (``communityDid`` added), its description, its
    audience and the plugin that declares it (`owners`: kind -> plugin)."""
    out: dict[str, Any] = {}
    for kind in kinds:
        data = dict(kind.schema)
        data["properties"] = {**data.get("properties", {})}
        data["properties"].setdefault("communityDid", DID)
        data["required"] = list(dict.fromkeys([*data.get("required", []), "communityDid"]))
        body = {"type": "object", "required": ["type", "timestamp", "data"], "properties": {
            "type": {"type": "string", "const": kind.name, "description": "the event's kind"},
            "timestamp": {"type": "string", "format": "date-time",
                          "description": "when the change was recorded (ISO 8601, UTC)"},
            "data": data}}
        op: dict[str, Any] = {
            "operationId": f"event.{kind.name}", "summary": kind.words, "description": kind.description,
            "tags": ["events"], "x-event-audience": kind.audience,
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"2XX": {"description": "delivered (any 2xx); anything else is retried"}}}
        if owners and owners.get(kind.name):
            op["x-plugin"] = owners[kind.name]
        out[kind.name] = {"post": op}
    return out
