"""commonroom-hello's own tests, written the way an outside plugin's tests are: on the
fixtures Commonroom ships (`commonroom_testing`), against a real app on a real socket."""

from __future__ import annotations

import pytest

from commonroom_testing.app import build_config
from daemon.plugin import ConfigError


async def test_the_plugin_is_loaded_from_its_entry_point(app):
    assert app.pm.has_plugin("hello"), "install the plugin before running its tests: pip install -e ."


async def test_hello_greets_and_has_seen_no_events_yet(client):
    resp = await client.get("/hello")
    assert resp.status == 200, resp.text
    assert resp.json() == {"greeting": "hello", "events": []}


@pytest.mark.parametrize("config_overrides", [{"hello": {"greeting": "hi"}}])
async def test_the_greeting_comes_from_the_hello_section_of_the_config(client):
    assert (await client.get("/hello")).json()["greeting"] == "hi"


def test_a_greeting_that_is_not_text_is_refused_with_its_key_path(tmp_path):
    with pytest.raises(ConfigError, match=r"hello\.greeting"):
        build_config(tmp_path, {"hello": {"greeting": 5}})


@pytest.mark.parametrize("config_overrides", [{"plugins": {"disabled": ["hello"]}}])
async def test_disabling_the_plugin_removes_its_route(app, client):
    assert not app.pm.has_plugin("hello")
    resp = await client.get("/hello")
    assert resp.status == 404 and resp.json()["error"] == "not_found", resp.text


async def test_a_follower_greets_from_its_copy_and_sends_writes_to_the_primary(app, follower_app):
    """On a follower (`server.role: follower`) the plugin serves its read; its database is
    read-only, so a write anywhere would fail the request, and a write request goes to the
    primary before any handler runs."""
    key = await follower_app.app_key(owner="did:plc:helloowner")    # on the primary, its own way
    follower = await follower_app.start()
    resp = await follower.client.get("/hello")
    assert resp.status == 200 and resp.json() == {"greeting": "hello", "events": []}
    moved = await follower.client.post("/hello", api_key=key["apiKey"], json={})
    assert moved.status == 307 and moved.json()["error"] == "use_primary"
