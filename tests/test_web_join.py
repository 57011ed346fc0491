"""Joining from the community page when the login cannot write to the person's repo
(a session without an OAuth grant, as after the grant was revoked): the page asks them
to sign in again and brings them back to the community; nothing is written."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.helpers import login_as

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


async def test_join_without_a_grant_asks_to_sign_in_again_and_returns_to_the_community(
        app: Any, client: Any, people: Any) -> None:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = await api.create(alice, "Quiet club")
    session = await login_as(app, bob["did"], bob["handle"])  # no OAuth grant behind it
    resp = await client.post(f"/c/{community['handle']}/join", body=urlencode({"_csrf": session.csrf}),
                             headers={"Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
                                      "Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status == 403 and resp.headers["Content-Type"].startswith("text/html")
    assert "Sign in again" in resp.text and 'action="/login"' in resp.text
    assert f'name="returnTo" value="/c/{quote(community["handle"], safe="")}"' in resp.text
    assert await api.check(community["did"], bob["did"]) == {"isMember": False, "isAdmin": False,
                                                               "isPending": False}
