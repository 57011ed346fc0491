"""Login with atproto OAuth against the devnet's real authorization server, with the
service as a confidential client over TLS; then the session's grant at work."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import httpx
import pytest

from daemon.http.base import Principal
from plugins.oauth.client import OAuthError
from plugins.oauth.grants import oauth_state
from plugins.oauth.userrepo import user_repo
from plugins.oauth import store as oauth_store
from tests.fixtures_oauth import LoginTiming, oauth_login

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return oauth_tls_config


def principal_of(browser: Any, account: dict[str, str]) -> Principal:
    return Principal(kind="session", did=account["did"], handle=account["handle"],
                     session_id=browser.session_id)


async def test_login_sets_session_and_users_me_names_the_account(app, service, oauth_account):
    browser = service()
    timing = LoginTiming()
    done = await oauth_login(browser, oauth_account, timing)
    assert done.location == "/users/me"
    cookies = done.set_cookies()
    assert cookies.get("sid") and cookies.get("csrf-token")
    set_cookie = " ".join(done.headers.get_list("Set-Cookie")).lower()
    assert "httponly" in set_cookie and "secure" in set_cookie and "samesite=lax" in set_cookie
    # The login's browser-binding cookie has done its job: the callback removes it.
    assert "oauth-flow" not in browser.cookies
    assert done.set_cookie_attrs("oauth-flow")["path"] == "/oauth/callback"

    me = await browser.get("/users/me")
    assert me.status == 200, me.text
    body = me.json()
    assert body["did"] == oauth_account["did"]
    assert body["handle"] == oauth_account["handle"]
    assert set(body) == {"did", "handle", "displayName", "avatar", "description"}
    print(f"\nJSON-API login round trip: {timing.total * 1000:.0f} ms (POST /login "
          f"{timing.login * 1000:.0f} ms, PDS sign-in+consent {timing.pds * 1000:.0f} ms, "
          f"callback {timing.callback * 1000:.0f} ms)")


async def test_client_metadata_is_a_confidential_client(app, service):
    browser = service()
    meta = (await browser.get("/oauth-client-metadata.json")).json()
    base = app.config.server.base_url
    assert meta["client_id"] == base + "/oauth-client-metadata.json"
    assert meta["token_endpoint_auth_method"] == "private_key_jwt"
    assert meta["redirect_uris"] == [base + "/oauth/callback"]
    assert meta["jwks_uri"] == base + "/.well-known/jwks.json"
    jwks = (await browser.get("/.well-known/jwks.json")).json()
    assert jwks["keys"] and all("d" not in k for k in jwks["keys"])


async def test_membership_record_is_written_and_deleted_in_the_users_repo(
        app, service, oauth_account, devnet):
    browser = service()
    await oauth_login(browser, oauth_account)
    collection = f"{app.config.atproto.namespace}.membership"
    repo = await user_repo(app, principal_of(browser, oauth_account))
    record = {"$type": collection, "community": "did:plc:exampleexampleexample1",
              "joinedAt": "2026-11-22T00:00:00.000Z"}
    ref = await repo.create_record(collection, record)
    assert ref["uri"].startswith(f"at://{oauth_account['did']}/{collection}/") and ref["cid"]
    rkey = ref["uri"].rsplit("/", 1)[1]
    params = {"repo": oauth_account["did"], "collection": collection, "rkey": rkey}
    async with httpx.AsyncClient() as http:
        got = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord", params=params)
        assert got.status_code == 200, got.text
        assert got.json()["value"]["community"] == record["community"]
        await repo.delete_record(collection, rkey)
        gone = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord", params=params)
        assert gone.status_code == 400 and "RecordNotFound" in gone.text


async def test_expired_access_token_is_refreshed_once_for_concurrent_requests(
        app, service, oauth_account, http_log):
    browser = service()
    await oauth_login(browser, oauth_account)
    grants = oauth_state(app).grants
    before = await grants.load(browser.session_id)
    async with app.db.transaction("test.expire") as tx:
        await oauth_store.set_access_expiry_tx(tx, browser.session_id, app.clock.time() - 1)
    http_log.clear()

    import asyncio
    results = await asyncio.gather(*(grants.fresh(browser.session_id) for _ in range(5)))
    assert http_log.count("/oauth/token") == 1
    assert len({g.access_token for g in results}) == 1
    after = await grants.load(browser.session_id)
    assert after.access_token != before.access_token
    assert after.refresh_token != before.refresh_token  # rotated
    assert after.access_expires_at > app.clock.time()

    # The refreshed grant works for the next request that needs it.
    collection = f"{app.config.atproto.namespace}.membership"
    repo = await user_repo(app, principal_of(browser, oauth_account))
    ref = await repo.create_record(collection, {"$type": collection, "community": "did:plc:x",
                                                "joinedAt": "2026-11-22T00:00:00.000Z"})
    assert ref["uri"]
    me = await browser.get("/users/me")
    assert me.status == 200


async def test_request_after_expiry_refreshes_and_succeeds(app, service, oauth_account, clock):
    browser = service()
    await oauth_login(browser, oauth_account)
    grants = oauth_state(app).grants
    before = await grants.load(browser.session_id)
    clock.advance(before.access_expires_at - clock.time() + 5)  # the token is now expired
    me = await browser.get("/users/me")
    assert me.status == 200, me.text
    after = await grants.load(browser.session_id)
    assert after.access_token != before.access_token


async def test_logout_ends_session_and_revokes_the_grant(app, service, oauth_account):
    browser = service()
    await oauth_login(browser, oauth_account)
    oauth = oauth_state(app)
    grant = await oauth.grants.load(browser.session_id)
    cookies = dict(browser.cookies)

    out = await browser.post("/logout")
    assert out.status == 200, out.text
    assert out.json()["revoked"] is True
    assert "sid" not in browser.cookies

    browser.cookies.update(cookies)  # a copy of the old cookie is worth nothing now
    me = await browser.get("/users/me")
    assert me.status == 401
    with pytest.raises(OAuthError) as refused:
        await oauth.client.refresh(grant.server, grant.dpop_key, grant.refresh_token)
    assert refused.value.error == "invalid_grant"


async def test_signing_a_person_out_everywhere_ends_every_session_and_revokes_each_grant(
        app, service, oauth_account, monkeypatch):
    """`end_sessions_of` (an operator's ban): both browsers' sessions end before it returns,
    their grants are forgotten, and the PDS refuses their refresh tokens soon after."""
    from daemon.plugin.security import end_sessions_of
    browsers = [service(), service()]
    for browser in browsers:
        await oauth_login(browser, oauth_account)
        assert (await browser.get("/users/me")).status == 200
    oauth = oauth_state(app)
    grants = [await oauth.grants.load(browser.session_id) for browser in browsers]

    spawned: list[asyncio.Task] = []
    spawn = app.spawn
    monkeypatch.setattr(app, "spawn", lambda coro, name=None: spawned.append(spawn(coro, name)) or spawned[-1])

    assert await end_sessions_of(app, oauth_account["did"]) == 2
    for browser in browsers:
        assert (await browser.get("/users/me")).status == 401
        assert await oauth_store.get_grant(app.db, browser.session_id) is None

    # the revocations run in the background: once they are done, the PDS refuses the tokens
    assert [t.get_name() for t in spawned] == ["oauth.revoke_all"]
    await spawned[0]
    for grant in grants:
        with pytest.raises(OAuthError) as refused:
            await oauth.client.refresh(grant.server, grant.dpop_key, grant.refresh_token)
        assert refused.value.error == "invalid_grant"


async def test_database_holds_no_plaintext_token(app, service, oauth_account):
    browser = service()
    await oauth_login(browser, oauth_account)
    grant = await oauth_state(app).grants.load(browser.session_id)
    secrets_ = [grant.access_token.encode(), grant.refresh_token.encode(),
                grant.dpop_key.as_dict(private=True)["d"].encode()]
    path = app.config.database_path

    def scan() -> None:
        for f in (path, path.with_name(path.name + "-wal")):
            if f.exists():
                data = f.read_bytes()
                assert not any(s in data for s in secrets_), f"plaintext secret in {f.name}"

    scan()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    scan()


async def test_session_ends_when_the_grant_cannot_be_refreshed(app, service, oauth_account):
    browser = service()
    await oauth_login(browser, oauth_account)
    oauth = oauth_state(app)
    grant = await oauth.grants.load(browser.session_id)
    # The person revokes the app at their server (e.g. in its account settings).
    assert await oauth.client.revoke(grant.server, grant.dpop_key, grant.refresh_token)
    async with app.db.transaction("test.expire") as tx:
        await oauth_store.set_access_expiry_tx(tx, browser.session_id, app.clock.time() - 1)
    me = await browser.get("/users/me")
    assert me.status == 401 and me.json()["error"] == "session_expired"
    assert await oauth_store.get_grant(app.db, browser.session_id) is None
    assert (await browser.get("/users/me")).status == 401


async def test_first_request_to_a_server_retries_once_with_its_dpop_nonce(
        app, service, oauth_account, http_log):
    browser = service()
    await browser.post("/login", json={"input": oauth_account["handle"]})
    # No nonce known yet: the server answers use_dpop_nonce, the client retries once.
    assert http_log.count("/oauth/par") == 2
