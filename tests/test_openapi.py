"""The OpenAPI document (/api/v1/openapi.json) and its reference page (/api/v1/docs):
generated from the routes the app serves, valid OpenAPI 3.1, and complete: a JSON route
without a declaration fails here."""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate

from daemon.http.openapi import undocumented
from tests.plugin_testroutes import plugin as testroutes


async def test_document_is_served_and_valid_openapi_3_1(app, client):
    resp = await client.get("/api/v1/openapi.json")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    doc = resp.json()
    assert doc["openapi"] == "3.1.0"
    validate(doc)  # raises on an invalid document


async def test_every_json_route_of_every_plugin_is_documented(app):
    assert undocumented(app.routes) == []


async def test_document_holds_every_route_method_the_app_serves(app, client):
    doc = (await client.get("/api/v1/openapi.json")).json()
    operations = {(m.upper(), p) for p, methods in doc["paths"].items() for m in methods}
    assert ("POST", "/api/v1/communities/{did}/members/join") in operations
    assert ("GET", "/api/v1/communities/{did}/membership/check") in operations
    assert ("DELETE", "/communities/{did}/members/{memberDid}") in operations
    # a group of alternatives is one path per alternative
    assert {("POST", "/api/v1/communities/{did}/members/approve"),
            ("POST", "/api/v1/communities/{did}/members/reject")} <= operations
    assert ("POST", "/api/v1/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver") in operations
    # the owner's webhook routes name every path parameter after what it is (issue 24)
    owner = "/api/v1/apps/{appId}/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver"
    assert ("POST", owner) in operations
    assert [p["name"] for p in doc["paths"][owner]["post"]["parameters"] if p["in"] == "path"] == \
        ["appId", "webhookId", "deliveryId"]
    assert not [p for p in doc["paths"] if "{param" in p]
    # the HTML home page is left out by its declaration; the API document itself is in
    assert ("GET", "/") not in operations
    assert ("GET", "/api/v1/openapi.json") in operations
    if app.pm.has_plugin("hello"):  # the example plugin, when the tests installed it
        assert ("GET", "/hello") in operations
    ids = [op["operationId"] for methods in doc["paths"].values() for op in methods.values()]
    assert len(ids) == len(set(ids))


async def test_operations_carry_auth_parameters_and_the_error_shape(app, client):
    doc = (await client.get("/api/v1/openapi.json")).json()
    join = doc["paths"]["/api/v1/communities/{did}/members/join"]["post"]
    assert join["security"] == [{"apiKey": []}]
    assert [p["name"] for p in join["parameters"] if p["in"] == "path"] == ["did"]
    assert join["requestBody"]["content"]["application/json"]["schema"]["required"] == ["userDid"]
    assert {"201", "202", "400", "401", "404", "413", "415", "429"} <= set(join["responses"])
    error = join["responses"]["404"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/Error"}
    assert doc["components"]["schemas"]["Error"]["required"] == ["error", "message"]
    # a state-changing session route needs the CSRF header too; a session read does not
    assert doc["paths"]["/communities/{did}/join"]["post"]["security"] == [{"session": [], "csrf": []}]
    assert doc["paths"]["/users/me"]["get"]["security"] == [{"session": []}]
    members = doc["paths"]["/api/v1/communities/{did}/members"]["get"]
    assert {"limit", "cursor", "userDid"} <= {p["name"] for p in members["parameters"]}
    assert doc["paths"]["/health"]["get"]["security"] == []


class TestAnUndeclaredRoute:
    @pytest.fixture
    def extra_plugins(self):
        return (testroutes,)

    async def test_is_reported(self, app, client):
        missing = undocumented(app.routes)
        assert any(m.startswith("POST /test/echo ") for m in missing), missing
        # the document still serves what is declared
        doc = (await client.get("/api/v1/openapi.json")).json()
        assert "/test/echo" not in doc["paths"] and "/health" in doc["paths"]


async def test_reference_page_is_rendered_on_the_service_with_a_strict_csp(app, client):
    resp = await client.get("/api/v1/docs")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/html")
    csp = resp.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert resp.headers["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in csp
    page = resp.text
    assert "<script" not in page and "http://" not in page.replace("http://127.0.0.1", "") \
        and "https://" not in page
    # no inline style or script: the one stylesheet is the service's own file
    assert "<style" not in page and " style=" not in page and "'unsafe-inline'" not in csp
    assert "style-src 'self'" in csp and re.search(r"<link rel=stylesheet href='/api/v1/docs/style\.[0-9a-f]{12}\.css'>",
                                                   page)
    doc = (await client.get("/api/v1/openapi.json")).json()
    for path, methods in doc["paths"].items():
        for op in methods.values():
            assert f"id='{op['operationId']}'" in page, path
            assert f"<code class=path>{path.replace('/', '/<wbr>').replace('.', '.<wbr>')}</code>" in page, path
    assert "/api/v1/openapi.json" in page


def test_reference_page_renders_a_lexicon_s_output_with_its_refs_as_rows():
    """The XRPC section reads whatever a method lexicon holds: parameters, input, output,
    refs to other definitions (in the same lexicon or another), arrays of them, errors."""
    from daemon.http.apidocs import render

    doc = {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {},
           "components": {"schemas": {"Error": {"type": "object", "properties": {"error": {"type": "string"}}}}}}
    lexicons = {
        "com.example.list": {"lexicon": 1, "id": "com.example.list", "defs": {
            "main": {"type": "query", "parameters": {"type": "params", "properties": {
                         "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}},
                     "output": {"encoding": "application/json", "schema": {
                         "type": "object", "required": ["items"], "properties": {
                             "items": {"type": "array", "items": {"type": "ref", "ref": "#item"}},
                             "owner": {"type": "ref", "ref": "com.example.defs#person"}}}},
                     "errors": [{"name": "NotFound", "description": "No such <list>"}]},
            "item": {"type": "object", "properties": {"kind": {"type": "string", "knownValues": ["a", "b"]}}}}},
        "com.example.defs": {"lexicon": 1, "id": "com.example.defs", "defs": {
            "person": {"type": "object", "properties": {"did": {"type": "string", "format": "did"},
                                                        "self": {"type": "ref", "ref": "#person"}}}}},
    }
    page = render(doc, lexicons)
    entry = page.split("id='xrpc-com.example.list'", 1)[1]
    assert "<code class=path>com.<wbr>example.<wbr>list</code>" in entry
    assert "GET /<wbr>xrpc/<wbr>com.<wbr>example.<wbr>list" in entry
    for row in ("limit", "items", "items[].<wbr></span>kind", "owner", "owner.<wbr></span>did", "owner.<wbr></span>self"):
        assert f"<td class=name><code>{row}" in entry or f"<span class=depth>{row}" in entry, row
    assert "owner.self.did" not in entry        # a ref to itself is followed once
    assert "Known values: <code>a</code>, <code>b</code>" in entry and "Default <code>20</code>" in entry
    assert "No such &lt;list&gt;" in entry      # escaped
    assert "id='xrpc-com.example.defs'" not in page   # not a method


async def test_reference_page_is_rendered_once_and_sent_gzipped_to_who_asks(app, client):
    import gzip

    from tornado.httpclient import AsyncHTTPClient

    http = AsyncHTTPClient(force_instance=True)
    try:
        def fetch(encoding: str):
            return http.fetch(client.base_url + "/api/v1/docs", headers={"Accept-Encoding": encoding},
                              decompress_response=False)
        plain, packed = await fetch("identity"), await fetch("br, gzip;q=0.5")
        refused = await fetch("gzip;q=0, identity")
    finally:
        http.close()
    assert plain.headers.get("Content-Encoding") is None and "Accept-Encoding" in plain.headers["Vary"]
    assert packed.headers["Content-Encoding"] == "gzip" and refused.headers.get("Content-Encoding") is None
    assert gzip.decompress(packed.body) == plain.body and len(packed.body) < len(plain.body) / 4
    assert b"<h1" in plain.body and app.reference_page[0] == plain.body


def test_reference_page_shows_a_lexicon_it_cannot_read_as_written():
    from daemon.http.apidocs import render

    doc = {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {},
           "components": {"schemas": {"Error": {"type": "object", "properties": {}}}}}
    odd = {"lexicon": 1, "id": "com.example.odd", "defs": {"main": {
        "type": "procedure", "input": {"encoding": "application/json", "schema": {"type": "object", "required": 3,
                                                                                    "properties": {"a": "<b>"}}}}}}
    page = render(doc, {"com.example.odd": odd, "com.example.none": {"lexicon": 1, "id": "x", "defs": {"main": 1}}})
    entry = page.split("id='xrpc-com.example.odd'", 1)[1]
    assert "could not be read" in entry and "&lt;b&gt;" in entry and "<b>" not in entry
    assert "com.example.none" not in page      # not a method, not a record: not listed
