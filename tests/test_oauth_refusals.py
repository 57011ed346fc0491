"""Logins that must fail, against the devnet's real authorization server: the person
sees a readable page and gets no session."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_oauth import callback_path, oauth_login, pds_authorize, query_of

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return oauth_tls_config


async def start_and_consent(browser: Any, account: dict[str, str], *, deny: bool = False,
                            signer: dict[str, str] | None = None) -> str:
    started = await browser.post("/login", json={"input": account["handle"]})
    assert started.status == 200, started.text
    signer = signer or account
    return await pds_authorize(started.json()["redirectUrl"], signer["handle"], signer["password"],
                               deny=deny)


def assert_error_page(resp: Any, code: str, words: str) -> None:
    assert resp.status in (400, 502), resp.text
    assert resp.headers["Content-Type"].startswith("text/html")
    assert words in resp.text and code in resp.text
    assert "Traceback" not in resp.text
    assert "sid" not in resp.set_cookies()


async def test_login_binds_the_flow_to_this_browser_with_a_callback_only_cookie(
        app, service, oauth_account):
    browser = service()
    started = await browser.post("/login", json={"input": oauth_account["handle"]})
    assert started.status == 200, started.text
    attrs = started.set_cookie_attrs("oauth-flow")
    assert attrs is not None and started.set_cookies()["oauth-flow"]
    assert attrs["path"] == "/oauth/callback"
    assert {"httponly", "secure"} <= set(attrs) and attrs["samesite"].lower() == "lax"
    assert int(attrs["max-age"]) > app.config.plugin("oauth").flow_timeout_seconds


async def test_callback_link_from_another_browser_does_not_log_in(app, service, oauth_account):
    """Login CSRF: the attacker starts a login to their own account, stops before the
    callback and sends the link to a victim. The victim's browser never started that flow."""
    attacker = service()
    redirect = await start_and_consent(attacker, oauth_account)
    victim = service()
    resp = await victim.get(callback_path(redirect))
    assert_error_page(resp, "flow_not_from_this_browser", "not started in this browser")
    assert "sid" not in victim.cookies
    assert (await victim.get("/users/me")).status == 401
    # The refused attempt spent the state: the attacker cannot finish it either.
    again = await attacker.get(callback_path(redirect))
    assert_error_page(again, "unknown_state", "already used")
    assert "oauth-flow" not in attacker.cookies  # cleared on the refusal too
    assert (await attacker.get("/users/me")).status == 401


async def test_callback_link_with_another_flows_cookie_does_not_log_in(
        app, service, devnet, new_handle, oauth_account):
    attacker = service()
    redirect = await start_and_consent(attacker, oauth_account)
    victim_account = devnet.create_account(new_handle("victim"))
    victim = service()
    # The victim is in the middle of their own login: their browser holds a flow cookie.
    mine = await victim.post("/login", json={"input": victim_account["handle"]})
    assert mine.status == 200 and victim.cookies.get("oauth-flow")
    resp = await victim.get(callback_path(redirect))
    assert_error_page(resp, "flow_not_from_this_browser", "not started in this browser")
    assert "oauth-flow" in resp.set_cookies() and "oauth-flow" not in victim.cookies  # cleared
    assert (await victim.get("/users/me")).status == 401
    again = await attacker.get(callback_path(redirect))
    assert_error_page(again, "unknown_state", "already used")
    assert (await attacker.get("/users/me")).status == 401


async def test_replayed_callback_is_refused_without_a_session(app, service, oauth_account):
    browser = service()
    started = await browser.post("/login", json={"input": oauth_account["handle"]})
    redirect = await pds_authorize(started.json()["redirectUrl"], oauth_account["handle"],
                                   oauth_account["password"])
    first = await browser.get(callback_path(redirect))
    assert first.status == 302
    replayer = service()
    again = await replayer.get(callback_path(redirect))
    assert_error_page(again, "unknown_state", "already used")
    assert (await replayer.get("/users/me")).status == 401


async def test_answer_naming_another_issuer_is_refused(app, service, oauth_account):
    browser = service()
    redirect = await start_and_consent(browser, oauth_account)
    q = query_of(redirect)
    forged = callback_path(redirect).replace(
        "iss=" + q["iss"].replace(":", "%3A").replace("/", "%2F"), "iss=https%3A%2F%2Fevil.example")
    assert "evil.example" in forged
    resp = await browser.get(forged)
    assert_error_page(resp, "issuer_mismatch", "different server")
    # The state was spent by the refused attempt: the genuine answer cannot be used either.
    resp = await browser.get(callback_path(redirect))
    assert_error_page(resp, "unknown_state", "already used")
    assert (await browser.get("/users/me")).status == 401


async def test_denied_consent_shows_a_readable_page(app, service, oauth_account):
    browser = service()
    redirect = await start_and_consent(browser, oauth_account, deny=True)
    assert query_of(redirect)["error"] == "access_denied"
    resp = await browser.get(callback_path(redirect))
    assert_error_page(resp, "access_denied", "You declined")
    assert (await browser.get("/users/me")).status == 401


async def test_signing_in_as_another_account_is_refused(app, service, devnet, new_handle,
                                                        oauth_account):
    other = devnet.create_account(new_handle("other"))
    browser = service()
    redirect = await start_and_consent(browser, oauth_account, signer=other)
    resp = await browser.get(callback_path(redirect))
    assert_error_page(resp, "account_mismatch", "different account")


async def test_login_that_took_too_long_is_refused(app, service, oauth_account, clock):
    browser = service()
    redirect = await start_and_consent(browser, oauth_account)
    clock.advance(app.config.plugin("oauth").flow_timeout_seconds + 1)
    resp = await browser.get(callback_path(redirect))
    assert_error_page(resp, "flow_expired", "expired")


async def test_unknown_handle_is_a_clear_400(app, service, devnet):
    browser = service()
    resp = await browser.post("/login", json={"input": "nobody-here.test"})
    assert resp.status == 400, resp.text
    assert resp.json()["error"] == "unknown_handle" or "nobody-here.test" in resp.json()["message"]


async def test_form_login_redirects_to_the_authorization_server(app, service, oauth_account, devnet):
    browser = service()
    resp = await browser.post("/login", form={"input": oauth_account["handle"]})
    assert resp.status == 302
    assert resp.location.startswith(devnet.pds_url + "/oauth/authorize?")


async def test_session_post_without_csrf_header_is_forbidden(app, service, oauth_account):
    browser = service()
    await oauth_login(browser, oauth_account)
    resp = await browser.post("/logout", csrf=False)
    assert resp.status == 403 and resp.json()["error"] == "csrf_failed"
    assert (await browser.get("/users/me")).status == 200  # still logged in
