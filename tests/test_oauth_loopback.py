"""The atproto loopback development client (plain http://127.0.0.1 base_url, no TLS, no
keys) against the devnet, with granular scopes only (no transition:generic)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.http.base import ApiError, Principal
from daemon.security.sessions import hash_sid
from plugins.oauth.grants import oauth_state
from plugins.oauth.userrepo import user_repo
from tests.fixtures_oauth import callback_path, pds_authorize
from tests.helpers import Session

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(pds_config_overrides: dict[str, Any]) -> dict[str, Any]:
    return {**pds_config_overrides,
            "oauth": {"scope": "atproto repo:community.commonroom.membership"}}


async def loopback_login(client: Any, account: dict[str, str]) -> Session:
    started = await client.post("/login", json={"input": account["did"]})
    assert started.status == 200, started.text
    flow_cookie = started.headers.get("Set-Cookie")
    assert flow_cookie.startswith("oauth-flow=") and "secure" not in flow_cookie.lower()
    redirect = await pds_authorize(started.json()["redirectUrl"], account["handle"], account["password"])
    assert redirect.startswith("http://127.0.0.1:8080/oauth/callback?")
    # base_url says port 8080; the test server listens elsewhere, so deliver it by hand,
    # with the flow cookie as the browser that started the login would send it.
    done = await client.get(callback_path(redirect),
                            headers={"Cookie": flow_cookie.split(";", 1)[0]})
    assert done.status == 302, done.text
    cookies = {}
    for line in done.headers.get_list("Set-Cookie"):
        name, _, value = line.split(";", 1)[0].partition("=")
        cookies[name] = value
    assert "secure" not in " ".join(done.headers.get_list("Set-Cookie")).lower()
    return Session(account["did"], account["handle"], cookies["sid"], cookies["csrf-token"])


async def test_loopback_client_logs_in_and_writes_only_what_the_scope_allows(app, client, oauth_account):
    assert oauth_state(app).client.loopback
    session = await loopback_login(client, oauth_account)
    me = await client.get("/users/me", session=session)
    assert me.status == 200 and me.json()["did"] == oauth_account["did"]

    principal = Principal(kind="session", did=session.did, session_id=hash_sid(session.sid))
    repo = await user_repo(app, principal)
    membership = "community.commonroom.membership"
    ref = await repo.create_record(membership, {"$type": membership, "community": "did:plc:x",
                                                "joinedAt": "2026-11-22T00:00:00.000Z"})
    assert ref["uri"] and ref["cid"]
    await repo.delete_record(membership, ref["uri"].rsplit("/", 1)[1])

    with pytest.raises(ApiError) as err:
        await repo.create_record("community.commonroom.other", {"$type": "community.commonroom.other"})
    assert err.value.status == 403 and err.value.code == "scope_missing"
    # The PDS enforces the same boundary on its side.
    grants = oauth_state(app).grants
    grant = await grants.load(principal.session_id)
    _, resp = await grants.pds_request(grant, "POST", "com.atproto.repo.createRecord", json={
        "repo": session.did, "collection": "community.commonroom.other",
        "record": {"$type": "community.commonroom.other"}})
    assert resp.status_code == 403 and resp.json()["error"] == "ScopeMissingError", resp.text
