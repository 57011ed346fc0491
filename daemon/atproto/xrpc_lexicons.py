"""The lexicons of the XRPC methods (``lexicons/<ns>.<method>.json``), made from the routes'
OpenAPI declarations, so a method's lexicon and its route can never say two things.

`method_lexicon` turns one `daemon.atproto.xrpc.XrpcMethod` into a lexicon document: a
``query`` whose ``parameters`` are the path's fields and the route's query parameters, or a
``procedure`` whose JSON ``input`` holds the path's fields and the route's body (or its
query parameters, for a route without a body); the ``output`` is the route's 2xx answer.
JSON schemas become lexicon types: ``string`` (a DID pattern becomes ``format: did``; a
character limit ``maxGraphemes``, which every string within the limit meets), ``integer``,
``boolean``, ``array``, ``object`` (a ``["x", "null"]`` type becomes ``nullable``), and
anything else ``unknown``. The route's ``limit`` parameter is an ``integer`` (1 to 100).

The user field of a method (``userDid``, ``adminDid`` ...) stays in the lexicon: an app
with an API key sends it on ``/api/v1`` and proves it with a token for this method id
(docs/identity.md). Over XRPC it may be left out: it is the token's issuer.

``scripts/xrpc_lexicons.py`` writes the files; tests/test_xrpc.py checks they are current.
"""

from __future__ import annotations

from typing import Any

from daemon.http.openapi import DID, PAGE_PARAMS, Response

SOURCE_NAMESPACE = "community.commonroom"
_PARAM_TYPES = ("string", "integer", "boolean")


def method_lexicon(method: Any, namespace: str = SOURCE_NAMESPACE) -> dict[str, Any]:
    """The lexicon document of `method` (a `daemon.atproto.xrpc.XrpcMethod`), its ids in the
    source namespace."""
    routes = method.routes
    first = routes[0]
    op = first.operation
    where = ", ".join(f"{r.http_method} {_template(r)}" for r in routes)
    summary = (op.summary if op is not None else method.description) or method.description
    who = (f" Over XRPC the acting user ({method.user_field}) is the service-auth token's issuer and may be "
           f"left out; on the HTTP route an app names it and proves it with a token whose lxm is this id "
           f"(docs/identity.md)." if method.user_field else " Over XRPC it reads as the token's issuer.")
    main: dict[str, Any] = {"type": method.kind, "description": f"{summary}. Served at /xrpc/{method.id} "
                            f"and as {where} on a Commonroom service.{who}"}
    fields: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    required: list[str] = []
    for route in routes:
        for name in route.fields:
            fields.setdefault(name, {"type": "string", "format": "did", "description": "The community's DID."}
                              if name == "community" else _path_field(name))
    optional_path = {n for r in routes for n in r.fields} - {n for n in first.fields if all(
        n in r.fields for r in routes)}
    required.extend(n for n in fields if n not in optional_path)
    params_like = [*(PAGE_PARAMS if op is not None and op.paged else ()), *(op.params if op else ())]
    for param in params_like:
        if param.where != "query":
            continue
        converted = _param(param.name, param.schema)
        if param.description and "description" not in converted:
            converted["description"] = param.description
        fields.setdefault(param.name, converted)
        if param.required and param.name not in required:
            required.append(param.name)
    if method.user_field and method.user_field in required:
        required.remove(method.user_field)   # over XRPC: the token's issuer
    if method.kind == "query":
        params: dict[str, Any] = {"type": "params", "properties": fields}
        if required:
            params["required"] = required
        main["parameters"] = params
    else:
        body = op.body if op is not None and first.takes_body else None
        if body is not None:
            converted, _ = _schema(body, defs)
            for name, item in converted.get("properties", {}).items():
                fields.setdefault(name, item)
            for name in body.get("required", []):
                if name not in required and name != method.user_field:
                    required.append(name)
        schema: dict[str, Any] = {"type": "object", "properties": fields}
        if required:
            schema["required"] = required
        nullable = [n for n, item in (body or {}).get("properties", {}).items() if _is_nullable(item)]
        if nullable:
            schema["nullable"] = nullable
        main["input"] = {"encoding": "application/json", "schema": schema}
    answers = [a for a in (_answer(r.operation) for r in routes) if a is not None]
    outputs = [o for o in (_schema(a, defs)[0] for a in answers) if o.get("type") == "object"]
    if outputs:
        main["output"] = {"encoding": "application/json", "schema": _merged(outputs)}
    return {"lexicon": 1, "id": method.id.replace(namespace + ".", SOURCE_NAMESPACE + ".", 1)
            if not method.id.startswith(SOURCE_NAMESPACE + ".") else method.id, "defs": {"main": main, **defs}}


def _merged(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """One output object for a method served by several routes (a record's read, or the
    list of a collection's records): every route's properties, required where all require
    them."""
    if len(objects) == 1:
        return objects[0]
    out: dict[str, Any] = {"type": "object", "properties": {}}
    for item in objects:
        for name, prop in item.get("properties", {}).items():
            out["properties"].setdefault(name, prop)
    required = [n for n in objects[0].get("required", []) if all(n in o.get("required", []) for o in objects)]
    nullable = sorted({n for o in objects for n in o.get("nullable", [])})
    if required:
        out["required"] = required
    if nullable:
        out["nullable"] = nullable
    out["description"] = "One of the routes' answers (see the method's description)."
    return out


def _template(route: Any) -> str:
    return "".join(v if k == "text" else "{" + ("did" if v == "community" else v) + "}" for k, v in route.parts)


def _path_field(name: str) -> dict[str, Any]:
    if name.endswith("Did"):
        return {"type": "string", "format": "did"}
    if name == "collection":
        return {"type": "string", "format": "nsid"}
    if name == "rkey":
        return {"type": "string", "format": "record-key"}
    return {"type": "string", "minLength": 1, "maxLength": 256}


def _answer(op: Any) -> dict[str, Any] | None:
    if op is None:
        return None
    for status in sorted(op.responses):
        value = op.responses[status]
        if 200 <= status < 300 and not isinstance(value, Response):
            return value
    return None


def _param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    if name == "limit":
        return {"type": "integer", "minimum": 1, "maximum": 100, "description": "1 to 100, default 20"}
    converted, _ = _schema(schema)
    if converted.get("type") not in _PARAM_TYPES:
        converted = {"type": "string"}
    return converted


def _is_nullable(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if isinstance(kind, list):
        return "null" in kind
    return any(isinstance(s, dict) and s.get("type") == "null" for s in schema.get("anyOf", []))


def _def_name(hint: str, defs: dict[str, Any], schema: dict[str, Any]) -> str:
    """A name in `defs` for an array's item object (``members`` -> ``member``)."""
    base = hint[:-3] + "y" if hint.endswith("ies") else hint[:-1] if hint.endswith("s") and len(hint) > 1 \
        else hint + "Item"
    name, n = base, 2
    while name in defs and defs[name] != schema:
        name, n = f"{base}{n}", n + 1
    return name


def _schema(schema: Any, defs: dict[str, Any] | None = None, hint: str = "item") -> tuple[dict[str, Any], bool]:
    """(lexicon schema, nullable) of a JSON schema. An object inside an array becomes a
    definition of its own in `defs` (lexicon arrays hold refs, not inline objects)."""
    defs = {} if defs is None else defs
    if not isinstance(schema, dict):
        return {"type": "unknown"}, True
    nullable = _is_nullable(schema)
    if "anyOf" in schema:
        inner = [s for s in schema["anyOf"] if not (isinstance(s, dict) and s.get("type") == "null")]
        if len(inner) == 1:
            converted, _ = _schema(inner[0], defs, hint)
            return converted, nullable
        return {"type": "unknown"}, nullable
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    out: dict[str, Any]
    if kind == "string":
        out = {"type": "string"}
        if schema.get("pattern") in (DID["pattern"],) or (schema.get("description") or "").startswith("a DID"):
            out["format"] = "did"
        if "enum" in schema:
            out["enum"] = [v for v in schema["enum"] if isinstance(v, str)]
        if "minLength" in schema:
            out["minGraphemes"] = schema["minLength"]
        if "maxLength" in schema and out.get("format") != "did":
            out["maxGraphemes"] = schema["maxLength"]
    elif kind == "integer":
        out = {"type": "integer"}
        for key in ("minimum", "maximum"):
            if key in schema:
                out[key] = schema[key]
    elif kind == "boolean":
        out = {"type": "boolean"}
    elif kind == "array":
        item, _ = _schema(schema.get("items", {}), defs, hint)
        if item.get("type") == "object":
            name = _def_name(hint, defs, item)
            defs[name] = item
            item = {"type": "ref", "ref": f"#{name}"}
        out = {"type": "array", "items": item}
    elif kind == "object" and not schema.get("properties"):
        out = {"type": "unknown"}   # any object (a record's value, metadata): lexicon's `unknown`
    elif kind == "object":
        props: dict[str, Any] = {}
        nullables: list[str] = []
        for name, item in (schema.get("properties") or {}).items():
            converted, is_null = _schema(item, defs, name)
            props[name] = converted
            if is_null:
                nullables.append(name)
        out = {"type": "object", "properties": props}
        if schema.get("required"):
            out["required"] = list(schema["required"])
        if nullables:
            out["nullable"] = nullables
    else:
        return {"type": "unknown"}, True
    text = schema.get("description")
    if text:
        out["description"] = text
    return out, nullable
