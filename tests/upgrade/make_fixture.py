"""Writes the upgrade fixture of the running release: a database made by this version's own
code on the devnet, with rows in every kind of table, and a JSON file of what a test needs to
read them back (keys, DIDs, a session). Run it once per release, on the release's commit:

    .venv/bin/python -m pytest -q -p no:cacheprovider tests/upgrade/make_fixture.py

It is not collected by the suite (its name is not test_*.py). tests/test_upgrade_fixtures.py
migrates every fixture to the current schema and reads the rows back through the API."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from daemon import __version__
from commonroom_testing.app import deep_merge
from commonroom_testing.communities import Api
from commonroom_testing.http import login_as
from commonroom_testing.webhooks import LOOPBACK_TARGETS
from tests.fixtures_oauth import oauth_login

HERE = Path(__file__).parent
COLLECTION = "org.example.garden.note"


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    # the service at an https address, so a real OAuth sign-in leaves a grant in the fixture
    return deep_merge(oauth_tls_config, {**LOOPBACK_TARGETS,
                                         "rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}})


async def test_make_fixture(app: Any, client: Any, devnet: Any, people: Any, service: Any,
                            oauth_account: Any) -> None:
    api = await Api.make(app, client)
    alice, bob, carol, dave, erin = (people(n) for n in ("alice", "bob", "carol", "dave", "erin"))
    did = (await api.create(alice, "Upgrade club"))["did"]
    for person in (bob, carol, dave, erin):
        assert (await api.join(did, person["did"])).status == 201
    ok = lambda resp, *codes: (resp.status in (codes or (200, 201))) or (_ for _ in ()).throw(AssertionError(resp.text))
    ok(await api.post(api.path(did, "/admins/promote"), {"adminDid": alice["did"], "memberDid": bob["did"]}))
    ok(await api.post(api.path(did, "/roles"), {"adminDid": alice["did"], "name": "greeter",
                                                 "description": "welcomes people", "capabilities": ["members.approve"]}))
    ok(await api.post(api.path(did, f"/members/{carol['did']}/roles"), {"adminDid": alice["did"], "role": "greeter"}))
    ok(await api.post(api.path(did, "/bans"), {"adminDid": alice["did"], "memberDid": erin["did"],
                                                "reason": "spam links", "expiresAt": "2099-01-01T00:00:00.000Z"}))
    invite = (await api.post(api.path(did, "/invites"), {"adminDid": alice["did"], "note": "for the newsletter"})).json()
    rkeys = []
    for i in range(3):
        made = await api.post(api.path(did, "/records"), {
            "userDid": carol["did"], "collection": COLLECTION,
            "record": {"$type": COLLECTION, "text": f"note {i}", "createdAt": "2026-11-29T00:00:00.000Z"}})
        ok(made)
        rkeys.append(made.json()["rkey"])
    # a webhook whose receiver is down: its deliveries stay pending in the fixture
    hook = await client.post("/api/v1/webhooks", api_key=api.key,
                             json={"url": "http://127.0.0.1:9/hook", "events": ["member.joined", "record.created"]})
    ok(hook)
    ok(await api.post(api.path(did, "/records"), {
        "userDid": dave["did"], "collection": COLLECTION,
        "record": {"$type": COLLECTION, "text": "after the webhook", "createdAt": "2026-11-29T00:00:00.000Z"}}))
    from plugins.reports import reports
    community = await app.communities.community(did)
    await reports.create(app, community, carol["did"], {"subject": dave["did"], "reason": "spam"}, app_id=None)
    session = await login_as(app, alice["did"], alice["handle"])
    # a person signed in through OAuth at the devnet's PDS: a grant (sealed tokens) and its session
    browser = service()
    await oauth_login(browser, oauth_account)
    oauth_sid, oauth_csrf = browser.cookies["sid"], browser.cookies["csrf-token"]
    await app.webhooks.running.stop()  # nothing delivered after this; the rows are as they are
    # An intent no request finished: that person's browser join, cut short after its intent
    # (the daemon stopped before writing the record to their repo or committing the join).
    # Recorded as the join records it (plugins/communities/membership.py, the plan of a join
    # with a session).
    from daemon.plugin.atproto import new_tid
    from plugins.communities.steps import MEMBERSHIP
    async with app.db.transaction("fixture.intent") as tx:
        await app.writes.begin_tx(tx, kind=MEMBERSHIP, key=f"membership:{did}:{oauth_account['did']}",
                                  operation="membership.put", rkey=new_tid(app.clock), community_did=did,
                                  payload={"userDid": oauth_account["did"], "sessionId": browser.session_id})
    assert await app.db.fetchval("SELECT COUNT(*) FROM write_intents") == 1
    assert await app.db.fetchval("SELECT COUNT(*) FROM oauth_grants") == 1
    target = HERE / f"{__version__}.sqlite3"
    target.unlink(missing_ok=True)
    source = sqlite3.connect(app.config.database_path)
    copy = sqlite3.connect(target)
    with copy:
        source.backup(copy)  # a consistent copy, the WAL's pages included
    copy.execute("PRAGMA journal_mode = DELETE")  # one file in the repository
    copy.execute("VACUUM")
    copy.close()
    source.close()
    (HERE / f"{__version__}.json").write_text(json.dumps({
        "version": __version__, "apiKey": api.key, "appId": api.app_id, "community": did,
        "people": {n: p["did"] for n, p in zip(("alice", "bob", "carol", "dave", "erin"),
                                                (alice, bob, carol, dave, erin))},
        "handles": {n: p["handle"] for n, p in zip(("alice", "bob", "carol", "dave", "erin"),
                                                   (alice, bob, carol, dave, erin))},
        "records": rkeys, "collection": COLLECTION, "webhookId": hook.json()["webhookId"],
        "inviteId": invite.get("id"),
        "session": {"sid": session.sid, "csrf": session.csrf},
        "oauth": {"sid": oauth_sid, "csrf": oauth_csrf, "did": oauth_account["did"]},
    }, indent=1) + "\n")
