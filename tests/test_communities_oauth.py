"""Browser join/leave with a real OAuth session: the user's own membership record is
written to and deleted from their repo on the devnet PDS, next to the community's proof."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.atproto.pds import get_record
from tests.fixtures_communities import Api, proofs_on_pds
from tests.fixtures_oauth import oauth_login

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}}


@pytest.fixture
def extra_plugins(recorder: Any) -> tuple:
    return (recorder,)


async def test_browser_join_and_leave_write_and_delete_the_users_membership_record(
        app, client, service, oauth_account, people, recorder):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Browser club"))["did"]
    user = oauth_account["did"]
    collection = f"{app.config.atproto.namespace}.membership"

    browser = service()
    await oauth_login(browser, oauth_account)
    resp = await browser.post(f"/communities/{did}/join", csrf=False)
    assert resp.status == 403  # CSRF is enforced
    resp = await browser.post(f"/communities/{did}/join")
    assert resp.status == 201, resp.text
    uri = resp.json()["membership"]["membershipUri"]
    assert uri.startswith(f"at://{user}/{collection}/")
    rkey = uri.rsplit("/", 1)[-1]
    record = await get_record(app, app.config.atproto.pds_url, user, collection, rkey)
    assert record is not None and record["value"]["community"] == did
    proof = (await proofs_on_pds(app, did))[user]
    assert proof["value"]["membershipUri"] == uri
    assert await api.check(did, user) == {"isMember": True, "isAdmin": False, "isPending": False}
    joined = [e for e in recorder.of("member.joined", did) if e.data["memberDid"] == user]
    assert len(joined) == 1 and joined[0].app_id is None
    mine = (await browser.get("/users/me/memberships")).json()["memberships"]
    assert [(m["communityDid"], m["uri"]) for m in mine] == [(did, uri)]

    resp = await browser.post(f"/communities/{did}/leave")
    assert resp.status == 200, resp.text
    assert await get_record(app, app.config.atproto.pds_url, user, collection, rkey) is None
    assert user not in await proofs_on_pds(app, did)
    assert await api.check(did, user) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert [e.data for e in recorder.of("member.left", did)] == [{"memberDid": user}]
    actions = [e["action"] for e in await api.audit(did, alice["did"])]
    assert actions[:2] == ["member.left", "member.joined"]
