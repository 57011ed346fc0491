"""``/api/v1/openapi.json`` and ``/api/v1/docs``: the OpenAPI document and a reference page
rendered from it on the server (no script, no CDN; the one inline style is allowed by its
hash in a strict Content-Security-Policy)."""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from typing import Any

from daemon.http.base import BaseHandler
from daemon.http.openapi import JSON, STRING, html, obj, operation

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.45}"
    "code,pre{font-family:ui-monospace,monospace;font-size:.9em}"
    "pre{background:#f4f4f4;padding:.6em;overflow-x:auto}"
    "section.op{border-top:1px solid #ccc;padding:.4em 0}"
    ".m{display:inline-block;min-width:4.5em;font-weight:bold}"
    "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left;vertical-align:top}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; img-src 'none'; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")

_AUTH_TEXT = {"apiKey": "API key (X-Api-Key)", "session": "browser session (sid cookie)",
              "csrf": "x-csrf-token header"}


class OpenApiHandler(BaseHandler):
    @operation("The OpenAPI 3.1 document of this service", responses={
        200: obj({"openapi": STRING, "info": obj({}), "paths": obj({})}, ["openapi", "info", "paths"])})
    async def get(self) -> None:
        self.send_json(self.app.openapi_document())


class ApiDocsHandler(BaseHandler):
    """The human-readable reference, rendered from the document."""

    serves_html = True

    @operation("The API reference as an HTML page", responses={200: html("The reference page")})
    async def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("Referrer-Policy", "no-referrer")
        # Not to be framed (clickjacking), as the site's own pages: for browsers that do not
        # read the CSP's frame-ancestors.
        self.set_header("X-Frame-Options", "DENY")
        self.finish(render(self.app.openapi_document()))


def _schema_text(schema: Any) -> str:
    return escape(json.dumps(schema, indent=2, ensure_ascii=False))


def _auth(security: list[dict[str, list[str]]]) -> str:
    if not security:
        return "none (public)"
    return " or ".join(" + ".join(_AUTH_TEXT.get(k, k) for k in req) for req in security)


def _operation(path: str, method: str, op: dict[str, Any]) -> str:
    anchor = escape(op["operationId"])
    out = [f"<section class=op id='{anchor}'><h3><span class=m>{method.upper()}</span> "
           f"<code>{escape(path)}</code></h3><p>{escape(op.get('summary', ''))}</p>"]
    if op.get("description"):
        out.append(f"<p>{escape(op['description'])}</p>")
    out.append(f"<p>Authentication: {escape(_auth(op.get('security', [])))} · "
               f"operation id <code>{anchor}</code></p>")
    params = op.get("parameters", [])
    if params:
        out.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>schema</th></tr>")
        for p in params:
            out.append(f"<tr><td><code>{escape(p['name'])}</code></td><td>{escape(p['in'])}</td>"
                       f"<td>{'yes' if p.get('required') else 'no'}</td>"
                       f"<td><code>{escape(json.dumps(p.get('schema', {}), ensure_ascii=False))}</code>"
                       f"{' ' + escape(p['description']) if p.get('description') else ''}</td></tr>")
        out.append("</table>")
    body = op.get("requestBody")
    if body:
        types = ", ".join(body["content"])
        out.append(f"<p>Request body ({escape(types)}{', required' if body.get('required') else ', optional'}):</p>")
        schema = body["content"].get(JSON, {}).get("schema")
        if schema:
            out.append(f"<pre>{_schema_text(schema)}</pre>")
    out.append("<table><tr><th>status</th><th>response</th></tr>")
    for status, resp in op["responses"].items():
        content = resp.get("content", {})
        cell = escape(resp.get("description", ""))
        for media, value in content.items():
            schema = value.get("schema", {})
            if schema.get("$ref") == "#/components/schemas/Error":
                cell += " — <a href='#error-shape'>error</a>"
            elif media == JSON:
                cell += f"<details><summary>{escape(media)}</summary><pre>{_schema_text(schema)}</pre></details>"
            else:
                cell += f" ({escape(media)})"
        out.append(f"<tr><td>{escape(status)}</td><td>{cell}</td></tr>")
    out.append("</table></section>")
    return "".join(out)


def render(doc: dict[str, Any]) -> str:
    """The reference page of an OpenAPI document (every value escaped)."""
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            by_tag.setdefault(op.get("tags", ["other"])[0], []).append((path, method, op))
    title = escape(f"{doc['info']['title']} API {doc['info']['version']}")
    out = [f"<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport "
           f"content='width=device-width'><title>{title}</title><style>{_STYLE}</style><body>"
           f"<h1>{title}</h1><p>{escape(doc['info'].get('description', ''))}</p>"
           "<p>The machine-readable document: <a href='/api/v1/openapi.json'>/api/v1/openapi.json</a> "
           "(OpenAPI 3.1).</p><nav><ul>"]
    for tag in sorted(by_tag):
        out.append(f"<li><a href='#tag-{escape(tag)}'>{escape(tag)}</a> ({len(by_tag[tag])})</li>")
    out.append("</ul></nav><h2 id=error-shape>Errors</h2><p>Every error answers JSON of this shape:</p>"
               f"<pre>{_schema_text(doc['components']['schemas']['Error'])}</pre>")
    for tag in sorted(by_tag):
        out.append(f"<h2 id='tag-{escape(tag)}'>{escape(tag)}</h2>")
        out.extend(_operation(path, method, op) for path, method, op in by_tag[tag])
    out.append("</body></html>")
    return "".join(out)

