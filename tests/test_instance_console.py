"""The console's Apps page and Overview (issue 38, item 6): an operator sees every app with
its owner and limit, sets a limit (also above the service default) or deactivates one, each
audited; every console form refuses a missing or wrong CSRF token and is a 404 for anyone
but an operator; the overview shows the instance's figures."""

from __future__ import annotations

from html import unescape
from typing import Any
from urllib.parse import urlencode

import pytest

from commonroom_testing.communities import Api
from commonroom_testing.http import login_as
from plugins.instance import audit

OPERATOR = "did:plc:operatorone"
FORM = "application/x-www-form-urlencoded"

@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"instance": {"operators": [OPERATOR]}}


def form(session: Any, csrf: str | None = None, **fields: str) -> dict[str, Any]:
    values = {**({"_csrf": csrf if csrf is not None else session.csrf} if csrf != "" else {}), **fields}
    return {"body": urlencode(values),
            "headers": {"Content-Type": FORM, "Cookie": f"sid={session.sid}; csrf-token={session.csrf}"}}


async def test_an_operator_limits_and_deactivates_any_app(app, client) -> None:
    api = await Api.make(app, client, owner="did:plc:developerone")
    operator = await login_as(app, OPERATOR, "op.test")
    page = unescape((await client.get("/admin/apps", session=operator)).text)
    assert api.app_id in page and "did:plc:developerone" in page and "(the default)" in page
    default = app.config.rate_limits.api.requests

    for csrf in ("", "wrong"):
        refused = await client.post(f"/admin/apps/{api.app_id}/deactivate", **form(operator, csrf=csrf))
        assert refused.status == 403
    someone = await login_as(app, "did:plc:developerone", "dev.test")
    assert (await client.post(f"/admin/apps/{api.app_id}/deactivate", **form(someone))).status == 404

    bad = await client.post(f"/admin/apps/{api.app_id}/rate-limit", **form(operator, maxRequests="lots"))
    assert bad.status == 400 and "whole numbers" in unescape(bad.text)
    above = default * 10
    limited = await client.post(f"/admin/apps/{api.app_id}/rate-limit",
                                **form(operator, maxRequests=str(above), windowSeconds="60"))
    assert limited.status == 303 and limited.headers["Location"] == "/admin/apps?done=limited"
    row = await app.db.fetchone("SELECT * FROM apps WHERE id = ?", (api.app_id,))
    assert row["rate_limit_requests"] == above and row["rate_limit_window_seconds"] == 60

    verified = await client.post("/api/v1/apps/verify", api_key=api.key)
    assert verified.status == 200
    unconfirmed = await client.post(f"/admin/apps/{api.app_id}/deactivate", **form(operator))
    assert unconfirmed.status == 400 and "Tick the box to confirm" in unescape(unconfirmed.text)
    gone = await client.post(f"/admin/apps/{api.app_id}/deactivate", **form(operator, confirm="yes"))
    assert gone.status == 303
    assert (await client.post("/api/v1/apps/verify", api_key=api.key)).status == 401
    sentences = [e["sentence"] for e in await audit.entries(app.db)]
    assert sentences == [f"{OPERATOR} deactivated the app {api.app_id}.",
                         f"{OPERATOR} set the rate limit of the app {api.app_id}."]
    assert (await audit.entries(app.db))[1]["detail"] == {"limit": f"{above} per 60 s"}


async def test_the_overview_shows_the_instance_figures(app, client) -> None:
    await Api.make(app, client)
    operator = await login_as(app, OPERATOR, "op.test")
    page = unescape((await client.get("/admin", session=operator)).text)
    for label in ("Communities", "People in communities", "Apps", "Webhooks failing", "Reports waiting",
                  "Creation requests waiting", "Database size", "Disk", "Replication lag"):
        assert f"<dt>{label}</dt>" in page, label
    assert "1 active of 1" in page and "no replication" in page


async def test_every_console_form_refuses_a_missing_or_wrong_csrf_token(app, client) -> None:
    api = await Api.make(app, client)
    operator = await login_as(app, OPERATOR, "op.test")
    forms = ["/admin/requests/1/approve", "/admin/requests/1/decline", "/admin/reports/decide",
             f"/admin/apps/{api.app_id}/deactivate", f"/admin/apps/{api.app_id}/rate-limit"]
    for path in forms:
        for csrf in ("", "wrong"):
            resp = await client.post(path, **form(operator, csrf=csrf, reason="r", decision="dismiss",
                                                  community="did:plc:x", maxRequests="5"))
            assert resp.status == 403 and "security token" in unescape(resp.text), (path, csrf)
    row = await app.db.fetchone("SELECT * FROM apps WHERE id = ?", (api.app_id,))
    assert row["active"] and row["rate_limit_requests"] is None
    assert await audit.entries(app.db) == []


async def test_the_command_line_acts_on_apps_as_an_operator_audited(app, client, capsys) -> None:
    import json
    from argparse import Namespace
    from plugins.instance.operator import _instance
    api = await Api.make(app, client)
    capsys.readouterr()
    assert await _instance(app, Namespace(action="apps", json=True)) == 0
    [listed] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["appId"] == api.app_id and listed["owner"] == "did:plc:appowner"
    assert await _instance(app, Namespace(action="app-rate-limit", app_id=api.app_id, max_requests=7,
                                          window_seconds=10.0, operator="did:plc:nobody", json=True)) == 2
    assert await _instance(app, Namespace(action="app-rate-limit", app_id=api.app_id, max_requests=7,
                                          window_seconds=10.0, operator=OPERATOR, json=True)) == 0
    assert json.loads(capsys.readouterr().out)["rateLimit"] == {"maxRequests": 7, "windowMs": 10000, "custom": True}
    assert await _instance(app, Namespace(action="app-deactivate", app_id=api.app_id, operator=OPERATOR,
                                          json=True)) == 0
    assert json.loads(capsys.readouterr().out)["active"] is False
    assert await _instance(app, Namespace(action="app-deactivate", app_id="app_nope", operator=OPERATOR,
                                          json=True)) == 1
    assert [e["sentence"] for e in await audit.entries(app.db)] == [
        f"{OPERATOR} deactivated the app {api.app_id}, from the command line.",
        f"{OPERATOR} set the rate limit of the app {api.app_id}, from the command line."]


def test_the_commands_parse_and_refuse_as_an_operator_would_expect(tmp_path) -> None:
    from tests.test_instance_operators import cli
    config = f"instance: {{operators: ['{OPERATOR}'], creation: approval}}\n"
    for args in (("requests", "--json"), ("requests", "--all"), ("reports", "--json"), ("apps", "--json")):
        done = cli(tmp_path, config, "instance", *args)
        assert done.returncode == 0, (args, done.stderr)
    not_operator = cli(tmp_path, config, "instance", "approve", "1", "--as", "did:plc:someone")
    assert not_operator.returncode == 2 and "is not one of instance.operators" in not_operator.stderr
    unknown = cli(tmp_path, config, "instance", "approve", "1", "--as", OPERATOR)
    assert unknown.returncode == 1 and "request_not_found" in unknown.stderr
    no_reason = cli(tmp_path, config, "instance", "decline", "1", "--as", OPERATOR)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    nothing = cli(tmp_path, config, "instance", "decide", "did:plc:nobody", "dismiss", "--as", OPERATOR)
    assert nothing.returncode == 1 and "no_open_reports" in nothing.stderr
    wrong = cli(tmp_path, config, "instance", "decide", "did:plc:nobody", "ban", "--as", OPERATOR)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


async def test_the_site_header_offers_the_console_to_operators_only(app, client) -> None:
    operator = await login_as(app, OPERATOR, "op.test")
    someone = await login_as(app, "did:plc:someoneelse", "someone.test")
    for path in ("/", "/discover"):
        assert 'href="/admin">Console</a>' in (await client.get(path, session=operator)).text
        assert "/admin" not in (await client.get(path, session=someone)).text
        assert "/admin" not in (await client.get(path)).text
