"""The noticeboard as Commonroom loads it, without the network: its entry point, what it
declares, its config section's range checks, its routes in the OpenAPI document."""

from __future__ import annotations

import pytest

from commonroom_testing.app import build_config
from daemon.plugin import ConfigError


async def test_the_plugin_is_loaded_from_its_entry_point_with_its_declarations(app):
    assert app.pm.has_plugin("noticeboard"), ("install the plugin before running its tests: pip install -e . "
                                              "(in the Commonroom repository: PYTHONPATH=.test-plugins, see the README)")
    assert app.event_kinds["notice.posted"].label == "A notice was posted"
    assert app.declarations.capabilities["notices.remove"].moderator
    assert app.config.plugin("noticeboard").max_length == 500


async def test_its_routes_and_method_ids_are_published(client):
    doc = (await client.get("/api/v1/openapi.json")).json()
    post = doc["paths"]["/api/v1/communities/{did}/notices"]["post"]
    assert post["x-atproto-method-id"] == "com.example.noticeboard.post"
    # grouped and named by the plugin's name, not its package's (commonroom_noticeboard)
    assert post["tags"] == ["noticeboard"] and post["operationId"] == "noticeboard.Notices.post"
    webhooks = doc["paths"]["/api/v1/webhooks"]["post"]["requestBody"]["content"]["application/json"]
    assert "notice.posted" in webhooks["schema"]["properties"]["events"]["items"]["enum"]
    listed = {m["id"]: m for m in (await client.get("/api/v1/method-ids")).json()["methods"]}
    assert listed["com.example.noticeboard.post"]["userField"] == "authorDid"
    assert listed["com.example.noticeboard.remove"]["httpMethod"] == "DELETE"


@pytest.mark.parametrize(("section", "message"), [
    ({"max_length": 0}, r"noticeboard\.max_length: must be from 1 to 5000"),
    ({"page_size": 101}, r"noticeboard\.page_size: must be from 1 to 100"),
    ({"posts_per_minute": "many"}, r"noticeboard\.posts_per_minute"),
])
def test_a_setting_out_of_range_is_refused_naming_its_key(tmp_path, section, message):
    with pytest.raises(ConfigError, match=message):
        build_config(tmp_path, {"noticeboard": section})


@pytest.mark.parametrize("config_overrides", [{"noticeboard": {"max_length": 40}}])
async def test_settings_come_from_the_noticeboard_section(app):
    assert app.config.plugin("noticeboard").max_length == 40


async def test_an_unknown_community_has_no_board(client):
    page = await client.get("/c/nobody.test/notices", headers={"Accept": "text/html"})
    assert page.status == 404 and "Page not found" in page.text
