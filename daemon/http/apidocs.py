"""``/api/v1/openapi.json`` and ``/api/v1/docs``: the OpenAPI document and a reference page
for people rendered from it, and from the loaded lexicons, on the server.

The page has no script and nothing from elsewhere; its stylesheet (``apidocs.css`` beside
this module) is served by the service under a name carrying its hash, so the page's
Content-Security-Policy allows styles from ``'self'`` only: no ``'unsafe-inline'``, and no
``style`` attribute anywhere. Operations are grouped by tag, each with its parameters, body
and answer as tables of fields (nested objects flattened to ``a.b`` and ``a[].b`` rows),
the errors it can answer and one curl example; then the XRPC methods and record types of
the lexicons (``lexicons/`` and the plugins' ``cr_lexicons``). Decisions in docs/api.md,
"The reference page"."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from html import escape
from http import HTTPStatus
from pathlib import Path
from typing import Any, Iterator

from daemon.http.base import ApiError, BaseHandler
from daemon.http.openapi import JSON, STRING, html, obj, operation

STYLE = (Path(__file__).parent / "apidocs.css").read_bytes()
STYLE_URL = f"/api/v1/docs/style.{hashlib.sha256(STYLE).hexdigest()[:12]}.css"
CSP = ("default-src 'none'; style-src 'self'; img-src 'none'; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")
ONE_YEAR = 365 * 24 * 3600

_AUTH_TEXT = {"apiKey": "API key (X-Api-Key header)", "session": "browser session (sid cookie)",
              "csrf": "x-csrf-token header"}
#: Example values by string format (a lexicon's) or by what a schema's description says.
_EXAMPLES = {"did": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "handle": "alice.example.com",
             "datetime": "2026-01-01T12:00:00.000Z", "uri": "https://example.com",
             "at-uri": "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.example.post/3kabc",
             "nsid": "com.example.thing", "record-key": "3kabc", "tid": "3kabcdefghi22",
             "cid": "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm", "language": "en", "at-identifier": "alice.example.com"}
_MAX_DEPTH = 4


class OpenApiHandler(BaseHandler):
    @operation("The OpenAPI 3.1 document of this service", responses={
        200: obj({"openapi": STRING, "info": obj({}), "paths": obj({})}, ["openapi", "info", "paths"])})
    async def get(self) -> None:
        self.send_json(self.app.openapi_document())


class ApiDocsHandler(BaseHandler):
    """The human-readable reference, rendered from the document and the lexicons."""

    serves_html = True

    @operation("The API reference as an HTML page", responses={200: html("The reference page")})
    async def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("Referrer-Policy", "no-referrer")
        # Not to be framed (clickjacking), as the site's own pages: for browsers that do not
        # read the CSP's frame-ancestors.
        self.set_header("X-Frame-Options", "DENY")
        if self.app.reference_page is None:   # rendered once, like the document it shows
            lexicons = {**self.app.lexicons.docs, **self.app.declarations.lexicons}
            page = render(self.app.openapi_document(), lexicons, getattr(self.app.proofs, "did", None)).encode()
            self.app.reference_page = (page, gzip.compress(page, 6, mtime=0))
        plain, packed = self.app.reference_page
        self.set_header("Vary", "Accept-Encoding")
        if _takes_gzip(self.request.headers.get("Accept-Encoding", "")):
            self.set_header("Content-Encoding", "gzip")   # ~600 KB of HTML, a tenth of it packed
            self.finish(packed)
        else:
            self.finish(plain)


def _takes_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header takes gzip (named, and not with ``q=0``)."""
    for part in accept_encoding.lower().split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() in ("gzip", "x-gzip"):
            q = params.replace(" ", "").partition("q=")[2]
            try:
                return not q or float(q) > 0
            except ValueError:
                return False
    return False


class ApiDocsStyleHandler(BaseHandler):
    """GET /api/v1/docs/style.<hash>.css: the page's stylesheet (only the current one)."""

    serves_html = True  # the reference page's stylesheet: not part of the API document

    async def get(self, digest: str) -> None:
        if self.request.path != STYLE_URL:
            raise ApiError(404, "not_found", "No such stylesheet (it may be from an older release).")
        self.set_header("Content-Type", "text/css; charset=utf-8")
        self.set_header("Cache-Control", f"public, max-age={ONE_YEAR}, immutable")
        self.finish(STYLE)


def routes() -> list[tuple]:
    return [(r"/api/v1/openapi\.json", OpenApiHandler), (r"/api/v1/docs", ApiDocsHandler),
            (r"/api/v1/docs/style\.([0-9a-f]{12})\.css", ApiDocsStyleHandler)]


# ------------------------------------------------------------------ schemas as rows of fields


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _code(value: Any) -> str:
    return f"<code>{_e(value)}</code>"


def _value(value: Any) -> str:
    """An allowed value: as written, but an empty string (or one with spaces) in quotes."""
    text = str(value)
    return _code(json.dumps(value) if not isinstance(value, str) or not text.strip() or text != text.strip() else text)


@dataclass
class Field:
    name: str
    type: str
    required: bool
    notes: list[str]      # HTML, escaped


class Schemas:
    """Reads JSON Schema (OpenAPI) or lexicon schemas as rows of fields. Where a method takes
    `base`, it is the id of the lexicon a schema comes from (its ``#def`` refs resolve there)."""

    def __init__(self, lexicons: dict[str, dict[str, Any]] | None = None) -> None:
        self.lexicons = lexicons or {}

    def resolve(self, ref: str, base: str) -> tuple[str, dict[str, Any]] | None:
        """A lexicon ref (``#def``, ``nsid``, ``nsid#def``) as (its full id, its schema)."""
        nsid, _, name = ref.partition("#")
        nsid = nsid or base
        doc = self.lexicons.get(nsid)
        schema = (doc or {}).get("defs", {}).get(name or "main")
        return (f"{nsid}#{name}" if name else nsid, schema) if isinstance(schema, dict) else None

    def type_of(self, s: dict[str, Any], base: str = "") -> str:
        if "$ref" in s:
            return s["$ref"].rsplit("/", 1)[-1]
        for key in ("anyOf", "oneOf"):
            if key in s:
                return " or ".join(dict.fromkeys(self.type_of(x, base) for x in s[key]))
        kind = s.get("type")
        if isinstance(kind, list):
            return " or ".join(self.type_of({**s, "type": k}, base) for k in kind)
        if kind == "array":
            items = s.get("items") or {}
            inner = self.type_of(items, base)
            return "array of objects" if inner == "object" else f"array of {inner}"
        if kind == "ref":
            return str(s.get("ref", "ref"))
        if kind == "union":
            return "union of " + ", ".join(s.get("refs", []))
        if kind == "string" and s.get("format"):
            return f"string ({s['format']})"
        if kind == "blob":
            return "blob"
        if kind is None:
            return "null" if s == {"type": "null"} else "any"
        return str(kind)

    def notes(self, s: dict[str, Any]) -> list[str]:
        out = []
        if s.get("description"):
            out.append(_e(s["description"]))
        values = s.get("enum") or (s.get("items") or {}).get("enum")
        if values:
            out.append("<span class=values>One of " + ", ".join(_value(v) for v in values) + "</span>")
        if s.get("knownValues"):
            out.append("<span class=values>Known values: " + ", ".join(_value(v) for v in s["knownValues"])
                       + "</span>")
        if "const" in s:
            out.append("Always " + _code(json.dumps(s["const"])))
        limits = []
        for key, text in (("minLength", "at least {} character(s)"), ("maxLength", "at most {} characters"),
                          ("maxGraphemes", "at most {} graphemes"), ("minimum", "at least {}"),
                          ("maximum", "at most {}"), ("minItems", "at least {} items"),
                          ("maxItems", "at most {} items"), ("maxSize", "at most {} bytes")):
            if key in s and not (key == "maxItems" and values):
                limits.append(text.format(s[key]))
        if s.get("accept"):
            limits.append("accepts " + ", ".join(s["accept"]))
        if limits:
            text = "; ".join(limits).replace("at least 1 character(s)", "not empty").replace("(s)", "s")
            out.append(_e(text[0].upper() + text[1:] + "."))
        if "default" in s:
            out.append("Default " + _code(json.dumps(s["default"])))
        if s.get("pattern") and not s.get("description"):
            out.append("Pattern " + _code(s["pattern"]))
        return out

    def _inner(self, s: dict[str, Any], base: str, seen: frozenset[str]) -> tuple[str, dict[str, Any], str] | None:
        """The object whose fields a field's rows go on with: (suffix, object, base)."""
        for key in ("anyOf", "oneOf"):
            objects = [x for x in s.get(key, []) if x.get("type") != "null"]
            if len(objects) == 1:
                return self._inner(objects[0], base, seen)
        if s.get("type") == "array" or (isinstance(s.get("type"), list) and "array" in s["type"]):
            found = self._inner(s.get("items") or {}, base, seen)
            return ("[]" + found[0], found[1], found[2]) if found else None
        if s.get("type") == "ref" and s.get("ref"):
            resolved = self.resolve(s["ref"], base)
            if resolved and resolved[0] not in seen:
                return self._inner(resolved[1], resolved[0].split("#")[0], seen | {resolved[0]})
        if s.get("properties"):
            return ("", s, base)
        return None

    def fields(self, s: dict[str, Any], base: str = "", prefix: str = "", depth: int = 0,
               seen: frozenset[str] = frozenset()) -> Iterator[Field]:
        required = set(s.get("required") or ())
        nullable = set(s.get("nullable") or ())
        for name, sub in (s.get("properties") or {}).items():
            sub = sub if isinstance(sub, dict) else {}
            kind = self.type_of(sub, base)
            if name in nullable:
                kind += " or null"
            yield Field(prefix + name, kind, name in required, self.notes(sub))
            found = self._inner(sub, base, seen) if depth < _MAX_DEPTH else None
            if found:
                suffix, inner, inner_base = found
                yield from self.fields(inner, inner_base, f"{prefix}{name}{suffix}.", depth + 1, seen)

    def table(self, s: dict[str, Any], base: str = "", label: str = "Field") -> str:
        """A schema as a table of its fields, or one sentence if it has none."""
        if s.get("type") == "ref" and s.get("ref"):
            resolved = self.resolve(s["ref"], base)
            if resolved:
                return f"<p>A {_code(resolved[0])}:</p>" + self.table(resolved[1], resolved[0].split("#")[0])
        rows = list(self.fields(s, base))
        lead = f"<p class=note>{_e(s['description'])}</p>" if rows and s.get("description") else ""
        if not rows:
            found = self._inner(s, base, frozenset())
            if found and found[0]:
                return (f"<p>{_e(self.type_of(s, base).capitalize())}, each:</p>"
                        + self.table(found[1], found[2]))
            text = self.type_of(s, base)
            notes = self.notes(s)
            return f"<p>{_e(text.capitalize())}{'. ' + ' '.join(notes) if notes else ''}</p>"
        out = [lead, f"<table><thead><tr><th scope=col>{label}</th><th scope=col>Type</th>"
               "<th scope=col>Required</th><th scope=col>Description</th></tr></thead><tbody>"]
        for f in rows:
            out.append(f"<tr><td class=name>{_name(f.name)}</td><td class=type data-label=Type>{_e(f.type)}</td>"
                       f"<td data-label=Required>{_required(f.required)}</td>"
                       f"<td class=desc>{''.join(f'<p>{n}</p>' for n in f.notes)}</td></tr>")
        out.append("</tbody></table>")
        return "".join(out)


def _name(dotted: str) -> str:
    """``a.b[].c`` with the parents muted, so the field's own name stands out."""
    head, sep, last = dotted.rpartition(".")
    if not sep:
        return _code(dotted)
    return f"<code><span class=depth>{_e(head + sep).replace('.', '.<wbr>')}</span>{_e(last)}</code>"


def _required(required: bool) -> str:
    return "<span class='badge badge-required'>required</span>" if required else "<span class=badge>optional</span>"


# ------------------------------------------------------------------ examples


def example(s: dict[str, Any], depth: int = 0, schemas: Schemas | None = None, base: str = "") -> Any:
    """A small value that fits `s`: its example, else its first enum value, else the
    required fields of an object (all of them if none is required) filled the same way.
    With `schemas`, a lexicon's refs are followed (from the lexicon `base`)."""
    if "example" in s:
        return s["example"]
    if s.get("type") == "ref" and schemas is not None and depth < _MAX_DEPTH:
        resolved = schemas.resolve(s.get("ref", ""), base)
        return example(resolved[1], depth + 1, schemas, resolved[0].split("#")[0]) if resolved else None
    if s.get("enum"):
        return s["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in s:
            return example(next((x for x in s[key] if x.get("type") != "null"), {}), depth, schemas, base)
    kind = s.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or s.get("properties"):
        props = s.get("properties") or {}
        names = [n for n in props if n in set(s.get("required") or ())] or list(props)
        return {n: example(props[n], depth + 1, schemas, base) for n in names} if depth < _MAX_DEPTH else {}
    if kind == "array":
        return [example(s.get("items") or {}, depth + 1, schemas, base)] if depth < _MAX_DEPTH else []
    if kind == "integer" or kind == "number":
        return s.get("default", s.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "string":
        text = (s.get("description") or "").lower()
        if s.get("format") in _EXAMPLES:
            return _EXAMPLES[s["format"]]
        if "did" in text.split() or "a did" in text or s.get("pattern", "").startswith("^did:"):
            return _EXAMPLES["did"]
        if "iso 8601" in text:
            return _EXAMPLES["datetime"]
        if s.get("pattern", "").startswith("^[0-9]"):
            return "20"
        return "text"
    return None


def _shell(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def curl(base_url: str, path: str, method: str, op: dict[str, Any]) -> str:
    """One curl call of the operation: path parameters filled, the required query
    parameters, the credentials it takes and a JSON body from the schema."""
    url = path
    query = []
    for p in op.get("parameters", []):
        value = example(p.get("schema") or {})
        if p["in"] == "path":
            url = url.replace("{" + p["name"] + "}", str(value if value not in (None, "text") else p["name"]))
        elif p["in"] == "query" and p.get("required"):
            query.append(f"{p['name']}={value}")
    line = [" ".join(["curl", *([f"-X {method.upper()}"] if method != "get" else []),
                      _shell(base_url + url + ("?" + "&".join(query) if query else ""))])]
    schemes = {k for req in op.get("security", []) for k in req}
    if "apiKey" in schemes:
        line.append("-H \"X-Api-Key: $COMMONROOM_API_KEY\"")
    elif "session" in schemes:
        line.append("-b \"sid=$SID\"")
        if "csrf" in schemes:
            line.append("-H \"x-csrf-token: $CSRF_TOKEN\"")
    body = op.get("requestBody")
    if body:
        types = list(body.get("content", {}))
        if JSON in types:
            line.append("-H 'Content-Type: application/json'")
            line.append("-d " + _shell(json.dumps(example(body["content"][JSON].get("schema") or {}))))
        elif types:
            line.append(f"-H 'Content-Type: {types[0]}' --data-binary @file")
    return " \\\n  ".join(line)


def xrpc_curl(nsid: str, main: dict[str, Any], schemas: Schemas, service_did: str) -> str:
    """One call of a method through the user's own PDS, which proves the user to this
    service (``atproto-proxy``; docs/xrpc.md)."""
    query = ""
    params = main.get("parameters") or {}
    if params.get("properties"):
        values = example({**params, "type": "object"}, 0, schemas, nsid)
        query = "?" + "&".join(f"{k}={v}" for k, v in values.items())
    post = main.get("type") == "procedure"
    line = [f"curl {'-X POST ' if post else ''}\"$PDS/xrpc/{nsid}{query}\"",
            "-H \"Authorization: Bearer $ACCESS_JWT\"", "-H " + _shell(f"atproto-proxy: {service_did}#commonroom")]
    schema = (main.get("input") or {}).get("schema")
    if post and isinstance(schema, dict):
        line.append("-H 'Content-Type: application/json'")
        line.append("-d " + _shell(json.dumps(example(schema, 0, schemas, nsid))))
    return " \\\n  ".join(line)


# ------------------------------------------------------------------ the page


def _auth(security: list[dict[str, list[str]]]) -> str:
    if not security:
        return "none (public)"
    return " or ".join(" + ".join(_AUTH_TEXT.get(k, k) for k in req) for req in security)


def _method(name: str) -> str:
    return f"<span class='method method-{_e(name.lower())}'>{_e(name.upper())}</span>"


def _path(path: str) -> str:
    """A path or a method id, with the places a line may break after (a slash, a dot)."""
    return _e(path).replace("/", "/<wbr>").replace(".", ".<wbr>")


def _status_text(status: str, text: str) -> str:
    """A status's description, or its HTTP reason phrase where the declaration gave none."""
    if text in ("", "Error") and status.isdigit():
        try:
            return HTTPStatus(int(status)).phrase
        except ValueError:
            pass
    return text


def _params(params: list[dict[str, Any]], schemas: Schemas) -> str:
    out = ["<table><thead><tr><th scope=col>Name</th><th scope=col>In</th><th scope=col>Type</th>"
           "<th scope=col>Required</th><th scope=col>Description</th></tr></thead><tbody>"]
    for p in params:
        schema = p.get("schema") or {}
        notes = ([_e(p["description"])] if p.get("description") else []) + schemas.notes(schema)
        out.append(f"<tr><td class=name>{_code(p['name'])}</td><td data-label=In>{_e(p['in'])}</td>"
                   f"<td class=type data-label=Type>{_e(schemas.type_of(schema))}</td>"
                   f"<td data-label=Required>{_required(bool(p.get('required')))}</td>"
                   f"<td class=desc>{''.join(f'<p>{n}</p>' for n in notes)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _operation(path: str, method: str, op: dict[str, Any], base_url: str, schemas: Schemas,
               lexicons: dict[str, dict[str, Any]]) -> str:
    anchor = _e(op["operationId"])
    out = [f"<section class=op id='{anchor}' aria-labelledby='{anchor}-h'>"
           f"<h3 class=op-head id='{anchor}-h'>{_method(method)} <code class=path>{_path(path)}</code></h3>"
           f"<p class=summary>{_e(op.get('summary', ''))}</p>"]
    if op.get("description"):
        out.append(f"<p>{_e(op['description'])}</p>")
    facts = [f"<li><strong>Authentication:</strong> {_e(_auth(op.get('security', [])))}</li>"]
    mid = op.get("x-atproto-method-id")
    if mid:
        link = f"<a href='#xrpc-{_e(mid)}'>{_code(mid)}</a>" if mid in lexicons else _code(mid)
        facts.append(f"<li><strong>Acts for the user in</strong> {_code(op.get('x-atproto-user-field', ''))}"
                     f" (method id {link})</li>")
    facts.append(f"<li><strong>Operation id:</strong> {_code(op['operationId'])}</li>")
    out.append(f"<ul class=facts>{''.join(facts)}</ul>")
    if op.get("parameters"):
        out.append("<h4>Parameters</h4>" + _params(op["parameters"], schemas))
    body = op.get("requestBody")
    if body:
        types = ", ".join(body.get("content", {}))
        out.append(f"<h4>Request body</h4><p class=note>{_e(types)}, "
                   f"{'required' if body.get('required') else 'optional'}</p>")
        schema = body.get("content", {}).get(JSON, {}).get("schema")
        if schema is not None:
            out.append(schemas.table(schema))
    errors = []
    answers: dict[str, list[str]] = {}   # the same answer under several statuses is shown once
    for status, resp in op.get("responses", {}).items():
        content = resp.get("content", {})
        if status.startswith(("4", "5")) and all(v.get("schema", {}).get("$ref") for v in content.values()):
            errors.append((status, resp))
        else:
            answers.setdefault(json.dumps(resp, sort_keys=True), []).append(status)
    for statuses in answers.values():
        resp = op["responses"][statuses[0]]
        content = resp.get("content", {})
        label = "Responses" if len(statuses) > 1 else "Response"
        out.append(f"<h4>{label} " + ", ".join(f"<span class='status status-ok'>{_e(s)}</span>" for s in statuses)
                   + "</h4>")
        text = resp.get("description", "")
        media = [m for m in content if m != JSON]
        if media or text not in ("", "OK") or not content:
            out.append(f"<p class=note>{_e(text)}{' (' + _e(', '.join(media)) + ')' if media else ''}</p>")
        if JSON in content:
            schema = content[JSON].get("schema") or {}
            out.append("<p class=note>The error shape.</p>" if schema.get("$ref") else schemas.table(schema))
    if errors:
        out.append("<h4>Errors</h4><table class=errors><thead><tr><th scope=col>Status</th>"
                   "<th scope=col>Meaning</th></tr></thead><tbody>")
        out.extend(f"<tr><td class=name><span class='status status-error'>{_e(s)}</span></td>"
                   f"<td class=desc>{_e(_status_text(s, r.get('description', '')))}</td></tr>" for s, r in errors)
        out.append("</tbody></table><p class=note>Each answers the <a href='#errors'>error shape</a>.</p>")
    out.append(f"<h4>Example</h4><pre><code>{_e(curl(base_url, path, method, op))}</code></pre></section>")
    return "".join(out)


def _lexicon(nsid: str, doc: dict[str, Any], schemas: Schemas, by_method: dict[str, tuple[str, str, str]],
             service_did: str | None) -> str:
    """A lexicon's entry; one whose shape this page cannot read is shown as its JSON (a
    plugin's lexicon is data: the page must not fail on it)."""
    try:
        return _lexicon_entry(nsid, doc, schemas, by_method, service_did)
    except (AttributeError, TypeError, KeyError, ValueError):
        anchor = _e(f"xrpc-{nsid}")
        return (f"<section class=op id='{anchor}' aria-labelledby='{anchor}-h'><h3 class=op-head id='{anchor}-h'>"
                f"<code class=path>{_path(nsid)}</code></h3><p class=note>This lexicon's shape could not be read "
                f"into tables; here it is as written:</p><pre><code>{_e(json.dumps(doc, indent=2, ensure_ascii=False))}"
                "</code></pre></section>")


def _lexicon_entry(nsid: str, doc: dict[str, Any], schemas: Schemas, by_method: dict[str, tuple[str, str, str]],
                   service_did: str | None) -> str:
    main = doc["defs"]["main"]
    kind = main.get("type", "")
    anchor = _e(f"xrpc-{nsid}")
    out = [f"<section class=op id='{anchor}' aria-labelledby='{anchor}-h'>"
           f"<h3 class=op-head id='{anchor}-h'>{_method(kind)} <code class=path>{_path(nsid)}</code></h3>"]
    if main.get("description"):
        out.append(f"<p>{_e(main['description'])}</p>")
    facts = []
    if kind in ("query", "procedure"):
        facts.append(f"<li><strong>Call:</strong> <code>{'GET' if kind == 'query' else 'POST'} "
                     f"{_path('/xrpc/' + nsid)}</code></li>")
    if nsid in by_method:
        anchor_op, method, path = by_method[nsid]
        facts.append(f"<li><strong>Same as</strong> <a href='#{_e(anchor_op)}'>{_e(method.upper())} "
                     f"{_path(path)}</a></li>")
    if kind == "record":
        facts.append(f"<li><strong>Record key:</strong> {_code(main.get('key', 'any'))}</li>")
    if facts:
        out.append(f"<ul class=facts>{''.join(facts)}</ul>")
    if kind in ("query", "procedure", "subscription") and (main.get("parameters") or {}).get("properties"):
        out.append("<h4>Parameters</h4>" + schemas.table(main["parameters"], nsid, "Name"))
    for key, title in (("input", "Input"), ("output", "Output")):
        part = main.get(key)
        if isinstance(part, dict):
            out.append(f"<h4>{title}</h4><p class=note>{_e(part.get('encoding', ''))}"
                       f"{' — ' + _e(part['description']) if part.get('description') else ''}</p>")
            if isinstance(part.get("schema"), dict):
                out.append(schemas.table(part["schema"], nsid))
    if kind == "record" and isinstance(main.get("record"), dict):
        out.append("<h4>Fields</h4>" + schemas.table(main["record"], nsid))
    if main.get("errors"):
        out.append("<h4>Errors</h4><table><thead><tr><th scope=col>Error</th><th scope=col>Meaning</th>"
                   "</tr></thead><tbody>")
        out.extend(f"<tr><td class=name>{_code(e.get('name', ''))}</td><td class=desc>{_e(e.get('description', ''))}"
                   f"</td></tr>" for e in main["errors"] if isinstance(e, dict))
        out.append("</tbody></table>")
    if kind in ("query", "procedure") and service_did:
        out.append("<h4>Example, through the user's PDS</h4><pre><code>"
                   f"{_e(xrpc_curl(nsid, main, schemas, service_did))}</code></pre>")
    out.append(f"<details><summary>The lexicon as JSON</summary><pre><code>"
               f"{_e(json.dumps(doc, indent=2, ensure_ascii=False))}</code></pre></details></section>")
    return "".join(out)


AUDIENCE_WORDS = {"community": "every app that may see the community",
                  "managers": "only the apps the community trusts to act for its admins"}


def _event(name: str, op: dict[str, Any], schemas: Schemas) -> str:
    """An event kind of the document's ``webhooks``: what it means, who receives it, and
    the body a webhook gets."""
    anchor = _e(f"event-{name}")
    facts = [f"<li><strong>Delivered to:</strong> "
             f"{_e(AUDIENCE_WORDS.get(op.get('x-event-audience', ''), op.get('x-event-audience', '')))}</li>"]
    if op.get("x-plugin"):
        facts.append(f"<li><strong>Declared by the plugin</strong> {_code(op['x-plugin'])}</li>")
    schema = op.get("requestBody", {}).get("content", {}).get(JSON, {}).get("schema") or {}
    return (f"<section class=op id='{anchor}' aria-labelledby='{anchor}-h'>"
            f"<h3 class=op-head id='{anchor}-h'><code class=path>{_path(name)}</code></h3>"
            f"<p class=summary>{_e(op.get('description') or op.get('summary', ''))}</p>"
            f"<ul class=facts>{''.join(facts)}</ul><h4>Body</h4>{schemas.table(schema)}</section>")


def _main_type(doc: Any) -> Any:
    main = doc.get("defs", {}).get("main") if isinstance(doc, dict) and isinstance(doc.get("defs"), dict) else None
    return main.get("type") if isinstance(main, dict) else None


def render(doc: dict[str, Any], lexicons: dict[str, dict[str, Any]] | None = None,
           service_did: str | None = None) -> str:
    """The reference page of an OpenAPI document and of the lexicons (every value escaped);
    with `service_did`, each XRPC method has a curl example through the user's PDS."""
    lexicons = lexicons or {}
    schemas = Schemas(lexicons)
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    by_method: dict[str, tuple[str, str, str]] = {}
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
            if op.get("x-atproto-method-id"):
                by_method.setdefault(op["x-atproto-method-id"], (op["operationId"], method, path))
    kinds = {n: _main_type(d) for n, d in lexicons.items()}
    methods = {n: d for n, d in sorted(lexicons.items()) if kinds[n] in ("query", "procedure", "subscription")}
    records = {n: d for n, d in sorted(lexicons.items()) if kinds[n] == "record"}
    base_url = (doc.get("servers") or [{}])[0].get("url") or "https://commonroom.example"
    info = doc["info"]
    title = f"{info['title']} API reference"
    count = sum(len(v) for v in by_tag.values())

    toc = ["<nav class=toc aria-label='Contents'><h2>Contents</h2><ul>",
           "<li><a href='#overview'>Overview</a></li>"]
    for tag in sorted(by_tag):
        toc.append(f"<li><a href='#tag-{_e(tag)}'>{_e(tag)}</a> <span class=count>{len(by_tag[tag])}</span>"
                   "<ul class=toc-ops>")
        toc.extend(f"<li><a href='#{_e(op['operationId'])}'>{_method(m)}<span class=path>{_path(p)}</span></a></li>"
                   for p, m, op in by_tag[tag])
        toc.append("</ul></li>")
    if methods:
        toc.append(f"<li><a href='#xrpc'>XRPC methods</a> <span class=count>{len(methods)}</span></li>")
    if records:
        toc.append(f"<li><a href='#records'>Record types</a> <span class=count>{len(records)}</span></li>")
    events = {n: w["post"] for n, w in sorted((doc.get("webhooks") or {}).items()) if "post" in w}
    if events:
        toc.append(f"<li><a href='#events'>Event kinds</a> <span class=count>{len(events)}</span></li>")
    toc.append("</ul></nav>")

    error_rows = "".join(f"<tr><td class=name>{_code(n)}</td><td class=desc>{_e(s.get('description', ''))}</td></tr>"
                         for n, s in doc["components"]["schemas"]["Error"]["properties"].items())
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8>"
           f"<meta name=viewport content='width=device-width, initial-scale=1'><title>{_e(title)}</title>"
           f"<link rel=stylesheet href='{STYLE_URL}'></head><body>"
           "<a class=skip-link href='#main'>Skip to the reference</a>"
           f"<header class=top><div class=top-row><span class=brand>{_e(title)}</span>"
           f"<span class=version>version {_e(info['version'])} · OpenAPI {_e(doc.get('openapi', ''))}</span>"
           "<a href='/api/v1/openapi.json'>openapi.json</a></div></header>"
           "<div class=layout>", *toc, "<main id=main tabindex=-1>",
           f"<section class=intro id=overview aria-labelledby=overview-h><h1 id=overview-h>{_e(title)}</h1>"
           f"<p>{_e(info.get('description', ''))}</p><dl>"
           f"<dt>Base URL</dt><dd>{_code(base_url)}</dd>"
           "<dt>Apps</dt><dd>send their API key in the <code>X-Api-Key</code> header.</dd>"
           "<dt>Browsers</dt><dd>send the <code>sid</code> session cookie, and on a change the "
           "<code>x-csrf-token</code> header.</dd>"
           f"<dt>Operations</dt><dd>{count} in {len(by_tag)} groups; {len(methods)} XRPC methods.</dd>"
           "<dt>Machine-readable</dt><dd><a href='/api/v1/openapi.json'>/api/v1/openapi.json</a> "
           "(OpenAPI 3.1)</dd></dl>"
           "<h2 id=errors>Errors</h2><p>Every error answers JSON of one shape, "
           "<code>{\"error\": \"not_found\", \"message\": \"…\"}</code>:</p>"
           f"<table><thead><tr><th scope=col>Field</th><th scope=col>Meaning</th></tr></thead><tbody>{error_rows}"
           "</tbody></table></section>"]
    for tag in sorted(by_tag):
        ops = by_tag[tag]
        out.append(f"<section class=tag id='tag-{_e(tag)}' aria-labelledby='tag-{_e(tag)}-h'>"
                   f"<h2 id='tag-{_e(tag)}-h'>{_e(tag)}</h2><ul class=tag-index>")
        out.extend(f"<li><a href='#{_e(op['operationId'])}'>{_method(m)}<span class=path>{_path(p)}</span>"
                   f"<span class=summary>{_e(op.get('summary', ''))}</span></a></li>" for p, m, op in ops)
        out.append("</ul>")
        out.extend(_operation(p, m, op, base_url, schemas, lexicons) for p, m, op in ops)
        out.append("</section>")
    if methods:
        out.append("<section class=tag id=xrpc aria-labelledby=xrpc-h><h2 id=xrpc-h>XRPC methods</h2>"
                   "<p>The lexicons of the methods this service knows (its own and its plugins'): a query is "
                   "called as <code>GET /xrpc/&lt;method id&gt;</code> with its parameters in the query string, "
                   "a procedure as <code>POST /xrpc/&lt;method id&gt;</code> with its input as the body. The "
                   "method id is also the <code>lxm</code> of a service-auth token acting for a user. A person's "
                   "client calls them through the person's own PDS, naming this service in the "
                   "<code>atproto-proxy</code> header: the PDS adds the token.</p>"
                   "<ul class=tag-index>")
        out.extend(f"<li><a href='#xrpc-{_e(n)}'>{_method(d['defs']['main']['type'])}"
                   f"<span class=path>{_path(n)}</span></a></li>" for n, d in methods.items())
        out.append("</ul>")
        out.extend(_lexicon(n, d, schemas, by_method, service_did) for n, d in methods.items())
        out.append("</section>")
    if records:
        out.append("<section class=tag id=records aria-labelledby=records-h><h2 id=records-h>Record types</h2>"
                   "<p>The records this service writes to repositories, and their lexicons.</p>")
        out.extend(_lexicon(n, d, schemas, by_method, None) for n, d in records.items())
        out.append("</section>")
    if events:
        out.append("<section class=tag id=events aria-labelledby=events-h><h2 id=events-h>Event kinds</h2>"
                   "<p>What webhooks (<code>events</code> of <code>POST /api/v1/webhooks</code>) and the event "
                   "stream deliver: the built-in kinds and those the plugins declare. A webhook receives each "
                   "as a signed <code>POST</code> of this body (the <code>webhooks</code> of the OpenAPI "
                   "document).</p><ul class=tag-index>")
        out.extend(f"<li><a href='#event-{_e(n)}'><span class=path>{_path(n)}</span>"
                   f"<span class=summary>{_e(op.get('summary', ''))}</span></a></li>" for n, op in events.items())
        out.append("</ul>")
        out.extend(_event(n, op, schemas) for n, op in events.items())
        out.append("</section>")
    out.append("<p class=footer>Rendered from this service's OpenAPI document and lexicons.</p>"
               "</main></div></body></html>")
    return "".join(out)
