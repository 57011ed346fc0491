"""Reports about a whole community (issue 38, item 5), on the devnet: anyone signed in who
can see a community reports it from its page or through an app (proven); the console's inbox
groups the open reports by community; one decision settles every open report about it;
reporters read the outcome, never who decided; `instance.report.*` events go only to the apps
in `instance.trusted_apps`; the decision is audited; the command line mirrors the inbox."""

from __future__ import annotations

import json
from argparse import Namespace
from html import unescape
from typing import Any
from urllib.parse import urlencode

import pytest

from commonroom_testing.app import deep_merge
from commonroom_testing.communities import Api
from commonroom_testing.http import login_as
from daemon.plugin.storage import AppsTable
from plugins.instance import audit, community_reports

pytestmark = pytest.mark.pds
OPERATOR = "did:plc:operatorone"
TRUSTED = "app_00000000000000aa"
FORM = "application/x-www-form-urlencoded"
METHOD = "community.commonroom.instance.report"


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(communities_config, {"instance": {"operators": [OPERATOR], "trusted_apps": [TRUSTED]}})


def form(session: Any, csrf: str | None = None, **fields: str) -> dict[str, Any]:
    values = {**({"_csrf": csrf if csrf is not None else session.csrf} if csrf != "" else {}), **fields}
    return {"body": urlencode(values),
            "headers": {"Content-Type": FORM, "Cookie": f"sid={session.sid}; csrf-token={session.csrf}"}}


def proof(devnet: Any, service_did: str, person: dict[str, str], method: str) -> dict[str, str]:
    got = devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": service_did, "lxm": method},
                      token=person["accessJwt"])
    return {"Authorization": f"Bearer {got['token']}"}


async def reported_club(app: Any, client: Any, devnet: Any, people: Any) -> dict[str, Any]:
    """alice's community, reported by carol (the page) and dave (an app, proven)."""
    async with app.db.transaction("test.trusted_app") as tx:   # the operators' own moderation tool
        await AppsTable.insert_tx(tx, app_id=TRUSTED, owner_did=OPERATOR, name="Mod tool", domain="mod.example",
                                  key_hash="0" * 64, now=app.clock.iso_now())
    api = await Api.make(app, client)
    alice, carol, dave = people("alice"), people("carol"), people("dave")
    community = await api.create(alice, "Spam central")
    carol_session = await login_as(app, carol["did"], carol["handle"])
    page = await client.get(f"/c/{community['handle']}", session=carol_session)
    assert f'href="/c/{community["handle"]}/report-community"' in page.text
    sent = await client.post(f"/c/{community['handle']}/report-community",
                             **form(carol_session, reason="spam", text="Sells watches in every post"))
    assert sent.status == 303, sent.text
    assert sent.headers["Location"] == f"/c/{community['handle']}/report-community?done=reported"
    service = (await client.get("/api/v1/method-ids")).json()["serviceDid"]
    body = {"reporterDid": dave["did"], "communityDid": community["did"], "reason": "illegal"}
    unproven = await client.post("/api/v1/instance/reports", api_key=api.key, json=body)
    assert unproven.status == 401, unproven.text
    made = await client.post("/api/v1/instance/reports", api_key=api.key, json=body,
                             headers=proof(devnet, service, dave, METHOD))
    assert made.status == 201, made.text
    assert made.json()["report"]["status"] == "open" and "decidedBy" not in made.json()["report"]
    twice = await client.post("/api/v1/instance/reports", api_key=api.key, json=body,
                              headers=proof(devnet, service, dave, METHOD))
    assert twice.status == 409 and twice.json()["error"] == "already_reported"
    return {"api": api, "community": community, "carol": carol, "carol_session": carol_session, "dave": dave,
            "service": service, "alice": alice}


async def test_reports_reach_the_inbox_and_one_decision_settles_them_all(app, client, devnet, people) -> None:
    club = await reported_club(app, client, devnet, people)
    did = club["community"]["did"]
    operator = await login_as(app, OPERATOR, "op.test")
    inbox = await client.get("/admin/reports", session=operator)
    text = unescape(inbox.text)
    assert inbox.status == 200 and "Spam central" in text and "2 open reports" in text
    assert "Sells watches in every post" in text and "Illegal content" in text
    overview = unescape((await client.get("/admin", session=operator)).text)
    assert "2 reports about 1 community" in overview

    # the community's admin, or anyone else, gets the site's 404 for the inbox and its form
    alice = await login_as(app, club["alice"]["did"], club["alice"]["handle"])
    assert (await client.get("/admin/reports", session=alice)).status == 404
    assert (await client.post("/admin/reports/decide", **form(alice, community=did, decision="dismiss"))).status == 404
    # the form refuses a missing or a wrong CSRF token
    for csrf in ("", "not-the-token"):
        refused = await client.post("/admin/reports/decide", **form(operator, csrf=csrf, community=did,
                                                                    decision="dismiss"))
        assert refused.status == 403, csrf
    assert await app.db.fetchval("SELECT COUNT(*) FROM instance_reports WHERE status = 'open'") == 2

    decided = await client.post("/admin/reports/decide", **form(operator, community=did, decision="dismiss",
                                                                reason="Watches are allowed here"))
    assert decided.status == 303 and decided.headers["Location"] == "/admin/reports?done=decided"
    assert await app.db.fetchval("SELECT COUNT(*) FROM instance_reports WHERE status = 'open'") == 0
    [entry] = await audit.entries(app.db)
    assert entry["sentence"] == f"{OPERATOR} dismissed the reports about {did} (reason: Watches are allowed here)."

    # the reporters read the outcome, never who decided
    mine = unescape((await client.get("/reports/communities", session=club["carol_session"])).text)
    assert "Spam central" in mine and "Dismissed: no action was taken" in mine
    assert OPERATOR not in mine and "op.test" not in mine
    # and the reports plugin's page of one's own reports leads there
    reports_page = (await client.get("/reports/mine", session=club["carol_session"])).text
    assert 'href="/reports/communities"' in reports_page
    dave_mine = await client.get("/api/v1/instance/reports/mine", api_key=club["api"].key,
                                 params={"reporterDid": club["dave"]["did"]},
                                 headers=proof(devnet, club["service"], club["dave"],
                                               "community.commonroom.instance.myReports"))
    assert dave_mine.status == 200, dave_mine.text
    [report] = dave_mine.json()["reports"]
    assert report["outcome"] == "dismissed" and report["status"] == "settled"
    assert OPERATOR not in dave_mine.text

    # the events: two created, two decided, each heard by the trusted app only (not the community's own app)
    rows = await app.db.fetchall("SELECT type, audience, data FROM events WHERE type LIKE 'instance.report.%' "
                                 "ORDER BY seq")
    assert [r["type"] for r in rows] == ["instance.report.created"] * 2 + ["instance.report.decided"] * 2
    assert {r["audience"] for r in rows} == {f" {TRUSTED} "}
    assert club["api"].app_id not in "".join(r["audience"] for r in rows)
    decided_data = json.loads(rows[-1]["data"])
    assert decided_data["outcome"] == "dismissed" and OPERATOR not in rows[-1]["data"]
    assert {json.loads(r["data"])["reporterDid"] for r in rows[:2]} == {club["carol"]["did"], club["dave"]["did"]}


async def test_suspending_settles_every_report(app, client, devnet, people) -> None:
    """Deciding "suspend" in the inbox suspends the community (its join is refused, its page
    says why) and settles every open report about it; the reporters see the outcome, never
    who decided."""
    club = await reported_club(app, client, devnet, people)
    operator = await login_as(app, OPERATOR, "op.test")
    done = await client.post("/admin/reports/decide", **form(operator, community=club["community"]["did"],
                                                              decision="suspend", reason="Spam"))
    assert done.status == 303, done.text
    assert await app.db.fetchval("SELECT COUNT(*) FROM instance_reports WHERE status = 'open'") == 0
    mine = unescape((await client.get("/reports/communities", session=club["carol_session"])).text)
    assert "Acted on: the community was suspended" in mine and OPERATOR not in mine
    did = club["community"]["did"]
    refused = await club["api"].join(did, people("frank")["did"])
    assert refused.status == 403 and refused.json()["error"] == "community_suspended", refused.text
    page = unescape((await client.get(f"/c/{club['community']['handle']}")).text)
    assert "Spam" in page and "suspended" in page.lower()
    assert (await audit.entries(app.db))[0]["action"] in ("report.suspend", "community.suspend")


async def test_the_command_line_lists_and_decides(app, client, devnet, people, capsys) -> None:
    from plugins.instance.operator import _instance
    club = await reported_club(app, client, devnet, people)
    capsys.readouterr()
    assert await _instance(app, Namespace(action="reports", json=True)) == 0
    [group] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert group["communityDid"] == club["community"]["did"] and group["count"] == 2
    assert group["reasons"] == {"spam": 1, "illegal": 1}
    report_id = group["reports"][0]["id"]
    assert await _instance(app, Namespace(action="decide", community=report_id, decision="dismiss", reason=None,
                                          operator=OPERATOR, json=True)) == 0
    assert len(json.loads(capsys.readouterr().out)["settledReportIds"].split()) == 2
    assert (await audit.entries(app.db))[0]["via"] == "cli"
    again = await _instance(app, Namespace(action="decide", community=club["community"]["did"], decision="dismiss",
                                           reason=None, operator=OPERATOR, json=True))
    assert again == 1 and "no_open_reports" in capsys.readouterr().err


async def test_reporting_needs_a_known_community_and_a_reason(app, client, devnet, people) -> None:
    api = await Api.make(app, client)
    carol = people("carol")
    session = await login_as(app, carol["did"], carol["handle"])
    community = await api.create(people("alice"), "Fine club")
    no_reason = await client.post(f"/c/{community['handle']}/report-community", **form(session, text="hm"))
    assert no_reason.status == 400 and 'id="reason-error"' in no_reason.text and ">hm</textarea>" in no_reason.text
    unknown = await client.get("/c/nobody.test/report-community", session=session)
    assert unknown.status == 404
    signed_out = await client.get(f"/c/{community['handle']}/report-community")
    assert signed_out.status == 401


async def test_the_communities_page_sorts_by_reports_and_counts_them(app, client, devnet, people) -> None:
    club = await reported_club(app, client, devnet, people)
    await club["api"].create(people("zoe"), "Quiet garden")   # newer, never reported
    operator = await login_as(app, OPERATOR, "op.test")
    newest = unescape((await client.get("/admin/communities", session=operator)).text)
    assert newest.index("Quiet garden") < newest.index("Spam central")
    reported = unescape((await client.get("/admin/communities?sort=reports", session=operator)).text)
    assert reported.index("Spam central") < reported.index("Quiet garden")
    assert "2 open reports" in reported and 'value="reports" selected' in reported
    searched = unescape((await client.get("/admin/communities?sort=reports&q=quiet", session=operator)).text)
    assert "Quiet garden" in searched and "Spam central" not in searched
