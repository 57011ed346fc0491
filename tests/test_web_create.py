"""Creating a community from the form, against the devnet PDS: bringing an existing
account with an app password, the errors a person can make there, and the form when the
operator does not let the service create accounts."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import pytest

from plugins.communities import store as communities_store
from tests.fixtures_communities import devnet_module_fixtures, pds_record
from tests.helpers import login_as

pytestmark = pytest.mark.pds

_, extra_plugins = devnet_module_fixtures()


@pytest.fixture
def config_overrides(communities_config: dict[str, Any], request: Any) -> dict[str, Any]:
    """The devnet settings, plus a test's own (``indirect`` parametrization)."""
    return {**communities_config, **getattr(request, "param", {})}


def form(session: Any, fields: dict[str, str]) -> dict[str, Any]:
    return {"body": urlencode({**fields, "_csrf": session.csrf}), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


async def test_bring_an_existing_account_with_an_app_password(app, client, devnet, new_handle, people):
    alice = people("alice")
    owner = devnet.create_account(new_handle("club"))
    app_password = devnet.create_app_password(owner, "commonroom")
    session = await login_as(app, alice["did"], alice["handle"])
    fields = {"displayName": "Chess club", "description": "", "type": "open", "account": "existing",
              "identifier": owner["handle"]}

    # a wrong app password: said next to that field; the rest kept, the password not shown
    resp = await client.post("/new", **form(session, {**fields, "appPassword": "aaaa-bbbb-cccc-dddd"}))
    assert resp.status == 400
    page = resp.text
    assert '<a href="#appPassword">' in page and 'id="appPassword-error"' in page
    assert f'value="{owner["handle"]}"' in page and 'value="Chess club"' in page
    assert "aaaa-bbbb-cccc-dddd" not in page
    assert await communities_store.get_community(app.db, owner["did"]) is None

    resp = await client.post("/new", **form(session, {**fields, "appPassword": app_password}))
    assert resp.status == 303, resp.text
    assert resp.headers["Location"] == f"/c/{owner['handle']}?done=created"
    row = await communities_store.get_community(app.db, owner["did"])
    assert row["state"] == "active" and row["account_kind"] == "brought"
    assert (await pds_record(app, owner["did"], "profile"))["displayName"] == "Chess club"
    page = (await client.get(resp.headers["Location"], headers={"Cookie": f"sid={session.sid}"})).text
    assert "<h1>Chess club</h1>" in page and "You are its primary admin" in page


@pytest.mark.parametrize("config_overrides", [{"communities": {"allow_provision": False}}], indirect=True)
async def test_without_provisioning_the_form_offers_only_an_existing_account(app, client, people):
    alice = people("alice")
    session = await login_as(app, alice["did"], alice["handle"])
    page = (await client.get("/new", headers={"Cookie": f"sid={session.sid}"})).text
    assert 'id="account-new"' not in page
    assert re.search(r'id="account-existing" name="account" value="existing" checked', page)
    # a hand-made post asking for a new account anyway is refused in words, nothing made
    resp = await client.post("/new", **form(session, {"displayName": "Sneaky", "type": "open",
                                                      "account": "new"}))
    assert resp.status == 400
    assert '<a href="#account">Choose whether to create a new account or use one you have</a>' in resp.text
