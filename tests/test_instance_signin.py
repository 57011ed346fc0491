"""An instance ban refuses the real OAuth sign-in on the devnet (issue 38, item 3): the
callback asks `cr_check_action("session.sign_in")` before any session is made, shows the
login-failed page and revokes the grant; lifting the ban lets them in."""

from __future__ import annotations

from typing import Any

import pytest

from commonroom_testing.app import deep_merge
from plugins.instance import actions
from tests.fixtures_oauth import callback_path, oauth_login, pds_authorize

pytestmark = pytest.mark.pds

OPERATOR = "did:plc:operatorsignin"


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(oauth_tls_config, {"instance": {"operators": [OPERATOR]}})


async def test_a_banned_person_cannot_sign_in_until_the_ban_is_lifted(app, service, oauth_account) -> None:
    await actions.ban(app, OPERATOR, oauth_account["did"], reason="abuse")
    browser = service()
    started = await browser.post("/login", json={"input": oauth_account["handle"]})
    assert started.status == 200, started.text
    redirect = await pds_authorize(started.json()["redirectUrl"], oauth_account["handle"], oauth_account["password"])
    done = await browser.get(callback_path(redirect))
    assert done.status == 403, done.text
    assert "does not let this account sign in" in done.text and "banned on this instance" in done.text
    assert "sid" not in browser.cookies
    assert await app.db.fetchval("SELECT COUNT(*) FROM sessions") == 0

    await actions.unban(app, OPERATOR, oauth_account["did"])
    assert (await oauth_login(service(), oauth_account)).status == 302


async def test_a_ban_that_lands_during_a_sign_in_refuses_it(app, service, oauth_account, monkeypatch) -> None:
    """The ban commits just after the callback's first check passed and before its session
    exists (so the ban's sign-out finds nothing): the check made once the session exists
    refuses the sign-in, ends that session and forgets its grant."""
    real, landed = app.check_action, []

    async def racing(action: str, actor_did: str | None, **kwargs: Any) -> None:
        await real(action, actor_did, **kwargs)
        if action == "session.sign_in" and not landed:
            landed.append(await actions.ban(app, OPERATOR, actor_did, reason="landed mid-login"))
    monkeypatch.setattr(app, "check_action", racing)

    browser = service()
    started = await browser.post("/login", json={"input": oauth_account["handle"]})
    redirect = await pds_authorize(started.json()["redirectUrl"], oauth_account["handle"], oauth_account["password"])
    done = await browser.get(callback_path(redirect))
    assert landed and landed[0]["signedOut"] == 0        # the ban came before the session
    assert done.status == 403, done.text
    assert "banned on this instance" in done.text and "sid" not in browser.cookies
    assert await app.db.fetchval("SELECT COUNT(*) FROM sessions") == 0
    assert await app.db.fetchval("SELECT COUNT(*) FROM oauth_grants") == 0


class TestAnOperatorUnderABannedDomain:
    """A handle-domain ban never locks an operator out, though their handle is under it."""

    @pytest.fixture
    def config_overrides(self, oauth_tls_config: dict[str, Any], oauth_account: dict[str, str]) -> dict[str, Any]:
        return deep_merge(oauth_tls_config, {"instance": {"operators": [oauth_account["did"]]}})

    async def test_the_operator_still_signs_in(self, app, service, oauth_account) -> None:
        domain = "*." + oauth_account["handle"].split(".", 1)[1]
        await actions.ban(app, oauth_account["did"], domain, reason="a spam host")
        assert await actions.ban_in_force(app, oauth_account["did"]) is not None   # the domain covers them
        assert (await oauth_login(service(), oauth_account)).status == 302
