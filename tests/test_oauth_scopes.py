"""What a login asks the person to approve, against the devnet's real authorization server:
the granular membership scope, and `transition:generic` only from a server that refuses it."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.oauth.grants import oauth_state
from tests.fixtures_oauth import oauth_login

pytestmark = pytest.mark.pds

MEMBERSHIP = "community.commonroom.membership"
# A permission set nobody published: the devnet's PDS cannot resolve it, so it refuses the
# pushed authorization request with invalid_scope, as a server without granular scopes
# refuses a scope it does not know.
REFUSED_SCOPE = "atproto include:community.commonroom.neverPublished"


@pytest.fixture
def oauth_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any], oauth_overrides: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "oauth": {**oauth_tls_config["oauth"], **oauth_overrides}}


async def granted_scope(app: Any, browser: Any) -> set[str]:
    grant = await oauth_state(app).grants.load(browser.session_id)
    assert grant is not None
    return set(grant.scope.split())


async def test_login_asks_only_for_the_membership_permission(app, service, oauth_account):
    client = oauth_state(app).client
    assert client.scope == f"atproto repo:{MEMBERSHIP}"
    # The metadata also declares the fallback, or the server could not grant it later.
    assert client.metadata()["scope"] == f"atproto repo:{MEMBERSHIP} transition:generic"
    browser = service()
    await oauth_login(browser, oauth_account)
    assert await granted_scope(app, browser) == {"atproto", f"repo:{MEMBERSHIP}"}


@pytest.mark.parametrize("oauth_overrides", [{"scope": REFUSED_SCOPE}])
async def test_a_server_that_refuses_the_scope_is_asked_for_the_fallback(app, service, oauth_account):
    browser = service()
    await oauth_login(browser, oauth_account)
    assert await granted_scope(app, browser) == {"atproto", "transition:generic"}


@pytest.mark.parametrize("oauth_overrides", [{"scope": REFUSED_SCOPE, "fallback_scope": None}])
async def test_without_a_fallback_a_refused_scope_is_reported(app, service, oauth_account):
    browser = service()
    resp = await browser.post("/login", json={"input": oauth_account["handle"]})
    assert resp.status == 502
    assert resp.json()["error"] == "authorization_server_refused"
    assert "invalid_scope" in resp.json()["message"]
    assert "transition:generic" not in oauth_state(app).client.metadata()["scope"]


async def test_a_server_that_grants_less_than_asked_gets_the_fallback_next_time(app, monkeypatch):
    """A stand-in for a server that accepts the granular request but grants only `atproto`
    (the devnet's PDS grants what it is asked): without this, the person would be sent
    round the same login whenever they try to join."""
    from plugins.oauth.client import ServerMeta
    client = oauth_state(app).client
    server = ServerMeta("https://as.example.com", "https://as.example.com/authorize",
                        "https://as.example.com/token", "https://as.example.com/par")
    asked: list[str] = []

    async def push(self, server, key, scope, state, challenge, login_hint):
        asked.append(scope)
        return None

    monkeypatch.setattr(type(client), "_push", push)
    membership = "community.commonroom.membership"
    await client.push_authorization(server, None, state="s", challenge="c", login_hint=None)
    assert client.note_grant(server, "atproto", membership) is False
    await client.push_authorization(server, None, state="s", challenge="c", login_hint=None)
    assert asked == [client.scope, client.fallback_scope]
    assert client.note_grant(server, client.scope, membership) is True  # a full grant changes nothing
