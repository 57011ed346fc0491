"""Running a public instance (issue 38, item 1): `instance.operators` is typed and checked
when the config loads; the instance audit log records operator actions as sentences, keeps
them `instance.audit_retention_days`, and the command line lists both, as a table or JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.plugin import ConfigError
from plugins.instance import audit
from plugins.instance.settings import InstanceConfig
from tests.conftest import REPO, TEST_SECRET_KEY

OPERATOR = "did:plc:operatorone"
DAY = 86400


def test_operators_must_be_distinct_dids() -> None:
    assert InstanceConfig(operators=(OPERATOR,)).is_operator(OPERATOR)
    assert not InstanceConfig(operators=(OPERATOR,)).is_operator("did:plc:someoneelse")
    assert not InstanceConfig().is_operator(None)
    with pytest.raises(ConfigError, match="not a DID") as bad:
        InstanceConfig(operators=(OPERATOR, "alice.example.org"))
    assert bad.value.path == "instance.operators[1]"
    with pytest.raises(ConfigError, match="listed twice"):
        InstanceConfig(operators=(OPERATOR, OPERATOR))
    with pytest.raises(ConfigError):
        InstanceConfig(audit_retention_days=-1)


@pytest.mark.parametrize("config_overrides", [{"instance": {"operators": [OPERATOR]}}])
async def test_the_audit_log_tells_actions_in_sentences_and_forgets_old_ones(app, clock):
    assert app.config.plugin("instance").operators == (OPERATOR,)
    async with app.db.transaction("test.audit") as tx:
        await audit.record_tx(tx, app.clock.iso_now(), OPERATOR, "community.suspend", "did:plc:spamcommunity",
                              {"reason": "spam"})
    clock.advance(700 * DAY)
    async with app.db.transaction("test.audit") as tx:
        await audit.record_tx(tx, app.clock.iso_now(), OPERATOR, "person.ban", "did:plc:abuser", via="cli")
    newest, oldest = await audit.entries(app.db)
    assert newest["sentence"] == f"{OPERATOR} banned on the instance did:plc:abuser, from the command line."
    assert oldest["sentence"] == (f"{OPERATOR} suspended the community did:plc:spamcommunity (reason: spam).")
    assert oldest["detail"] == {"reason": "spam"} and oldest["via"] == "web"

    assert await audit.prune(app) == 0          # 700 days: inside the default 730
    clock.advance(31 * DAY)
    assert await audit.prune(app) == 1
    assert [e["action"] for e in await audit.entries(app.db)] == ["person.ban"]


@pytest.mark.parametrize("config_overrides", [{"instance": {"audit_retention_days": 0}}])
async def test_zero_keeps_the_audit_log_for_good(app, clock):
    async with app.db.transaction("test.audit") as tx:
        await audit.record_tx(tx, app.clock.iso_now(), OPERATOR, "person.unban", "did:plc:x")
    clock.advance(5000 * DAY)
    assert await audit.prune(app) == 0 and len(await audit.entries(app.db)) == 1


def cli(tmp_path: Path, config_yaml: str, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "cli.yaml"
    config.write_text(f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n"
                      + config_yaml)
    return subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_the_command_line_lists_the_audit_log_and_refuses_a_wrong_operator(tmp_path: Path) -> None:
    config = f"instance: {{operators: ['{OPERATOR}']}}\n"
    table = cli(tmp_path, config, "instance", "audit")
    assert table.returncode == 0, table.stderr
    assert "at" in table.stdout.splitlines()[0] and "entry" in table.stdout.splitlines()[0]
    empty = cli(tmp_path, config, "instance", "audit", "--json")
    assert empty.returncode == 0 and empty.stdout == ""

    wrong = cli(tmp_path, "instance: {operators: [alice.example.org]}\n", "check-config")
    assert wrong.returncode != 0
    assert "instance.operators[0]" in wrong.stderr and "not a DID" in wrong.stderr



class TestResolvingOperators:
    """`commonroom instance operators` resolves each operator on the devnet's PLC directory."""

    pytestmark = pytest.mark.pds

    @pytest.fixture
    def operator_account(self, devnet: Any, new_handle: Any) -> dict[str, Any]:
        return devnet.create_account(new_handle("operator"))

    @pytest.fixture
    def config_overrides(self, pds_config_overrides: dict[str, Any], operator_account: dict[str, Any]) -> dict:
        unknown = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
        return {**pds_config_overrides, "instance": {"operators": [operator_account["did"], unknown]}}

    async def test_each_operator_is_resolved_and_an_unknown_one_fails(self, app, devnet, operator_account,
                                                                      capsys) -> None:
        from argparse import Namespace
        from plugins.instance.operator import _operators
        status = await _operators(app, Namespace(json=True))
        out = capsys.readouterr()
        known, unknown = [json.loads(line) for line in out.out.splitlines()]
        assert (known["did"], known["handle"], known["pds"], known["problem"]) == (
            operator_account["did"], operator_account["handle"], devnet.pds_url, None)
        assert unknown["handle"] is None and unknown["problem"] == "does not resolve: unknown_did"
        assert status == 1 and "1 operator DID(s) in instance.operators do not resolve" in out.err


@pytest.mark.parametrize("config_overrides", [{"instance": {"operators": [OPERATOR]}}])
async def test_the_console_is_for_operators_and_a_404_for_everyone_else(app, client) -> None:
    from commonroom_testing.http import login_as
    async with app.db.transaction("test.audit") as tx:
        await audit.record_tx(tx, app.clock.iso_now(), OPERATOR, "person.ban", "did:plc:abuser",
                              {"reason": "spam accounts"}, via="cli")
    operator = await login_as(app, OPERATOR, "op.test")
    someone = await login_as(app, "did:plc:someoneelse", "someone.test")
    for path in ("/admin", "/admin/", "/admin/audit", "/admin/audit?before=99", "/admin/people", "/admin/x/y"):
        for session in (None, someone):
            resp = await client.get(path, session=session)
            assert resp.status == 404, (path, session)
            assert "console" not in resp.text.lower() and "did:plc:abuser" not in resp.text
    home = await client.get("/admin", session=operator)
    assert home.status == 200 and "Instance console" in home.text and OPERATOR in home.text
    assert "banned on the instance did:plc:abuser (reason: spam accounts), from the command line." in home.text
    log = await client.get("/admin/audit", session=operator)
    assert log.status == 200 and "did:plc:abuser" in log.text
    assert (await client.get("/admin/nothing-here", session=operator)).status == 404
