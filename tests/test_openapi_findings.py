"""Bugs the schemathesis run (tests/test_openapi_conformance.py) found, each pinned by the
behaviour a client notices."""

from __future__ import annotations

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures

config_overrides, extra_plugins = devnet_module_fixtures()


async def test_a_login_form_with_no_input_is_a_400_page_not_a_500(app, client):
    resp = await client.post("/login", body=b"returnTo=%2F",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status == 400, resp.text
    assert resp.headers["Content-Type"].startswith("text/html")
    assert "Login failed" in resp.text


@pytest.mark.pds
async def test_members_refuses_a_public_flag_that_is_not_a_boolean(app, client, devnet, people):
    api = await Api.make(app, client)
    community = await api.create(people("alice"), "Flags club")
    bad = await api.get(api.path(community["did"], "/members"), public="maybe")
    assert bad.status == 400, bad.text
    assert bad.json()["error"] == "invalid_request"
    assert (await api.get(api.path(community["did"], "/members"), public="true")).status == 200
