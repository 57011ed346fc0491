"""Who may create a community (issue 38, item 2): `instance.creation` and its allowlist of
DIDs and handle domains, asked through the platform's `cr_check_action` hook before any
account is made; a refusal is 403 `creation_not_allowed` naming the policy."""

from __future__ import annotations

from typing import Any

import pytest

from commonroom_testing.app import deep_merge
from commonroom_testing.communities import Api
from daemon.plugin import ConfigError
from plugins.instance.settings import InstanceConfig

pytestmark = pytest.mark.pds


@pytest.fixture
def policy() -> dict[str, Any]:
    return {}


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(communities_config, {"instance": policy})


@pytest.mark.parametrize("policy", [{"creation": "allowlist", "creation_allowlist": ["did:plc:someoneelse"]}])
async def test_outside_the_allowlist_creation_is_refused_naming_the_policy(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    alice = people("alice")
    resp = await api.post("/api/v1/communities", {"creatorDid": alice["did"], "displayName": "Refused club",
                                                  "type": "open"})
    assert resp.status == 403, resp.text
    body = resp.json()
    assert body["error"] == "creation_not_allowed" and "'allowlist'" in body["message"]
    assert "Ask the instance's operators" in body["message"]
    # nothing was made: no community, not even an unfinished one
    assert await app.db.fetchval("SELECT COUNT(*) FROM communities") == 0


@pytest.mark.parametrize("policy", [{"creation": "allowlist", "creation_allowlist": ["*.test"]}])
async def test_a_handle_domain_on_the_allowlist_may_create(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    created = await api.create(people("alice"), "Allowed club")
    assert created["displayName"] == "Allowed club"


@pytest.mark.parametrize("policy", [{"creation": "operators"}])
async def test_under_operators_only_a_person_is_refused(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    resp = await api.post("/api/v1/communities", {"creatorDid": people("bob")["did"], "displayName": "Nope",
                                                  "type": "open"})
    assert resp.status == 403 and resp.json()["error"] == "creation_not_allowed"
    assert "'operators'" in resp.json()["message"]


def test_the_allowlist_takes_dids_and_handle_domains() -> None:
    config = InstanceConfig(creation="allowlist", creation_allowlist=("*.example.org", "ann.example.net"))
    assert config.allows_handle("bob.example.org") and config.allows_handle("ann.example.net")
    assert not config.allows_handle("example.org.evil.test") and not config.allows_handle("bob.example.net")
    with pytest.raises(ConfigError, match="not a DID or a handle domain"):
        InstanceConfig(creation_allowlist=("nodots",))
