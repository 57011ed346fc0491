"""The command line mirrors the console's instance-wide actions (issue 38): ban, unban,
bans, suspend, lift, remove, each with `--json`, naming the operator (`--as`), refusing a
wrong one, and each in the instance audit log as done "from the command line"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_instance_operators import cli

OPERATOR, OTHER = "did:plc:operatorcli", "did:plc:operatorcli2"
CONFIG = f"instance: {{operators: ['{OPERATOR}', '{OTHER}']}}\n"


def test_bans_from_the_command_line_are_listed_lifted_and_audited(tmp_path: Path) -> None:
    nobody = cli(tmp_path, CONFIG, "instance", "ban", "did:plc:spammer", "--reason", "spam", "--json")
    assert nobody.returncode == 2 and "--as DID" in nobody.stderr          # two operators: say which
    wrong = cli(tmp_path, CONFIG, "instance", "ban", "did:plc:spammer", "--reason", "spam", "--as", "did:plc:x")
    assert wrong.returncode == 2

    banned = cli(tmp_path, CONFIG, "instance", "ban", "did:plc:spammer", "--reason", "spam", "--expires", "30d",
                 "--as", OPERATOR, "--json")
    assert banned.returncode == 0, banned.stderr
    out = json.loads(banned.stdout)
    assert out["subject"] == "did:plc:spammer" and out["kind"] == "did" and out["expiresAt"]
    domain = cli(tmp_path, CONFIG, "instance", "ban", "*.Spam.Example", "--reason", "a spam host", "--as", OTHER,
                 "--json")
    assert domain.returncode == 0 and json.loads(domain.stdout)["subject"] == "*.spam.example"
    bad = cli(tmp_path, CONFIG, "instance", "ban", "spam.example", "--reason", "x", "--as", OPERATOR)
    assert bad.returncode == 1 and "*.domain" in bad.stderr
    ending = cli(tmp_path, CONFIG, "instance", "ban", "*.spam.example", "--reason", "x", "--end-memberships",
                 "--as", OPERATOR)
    assert ending.returncode == 1 and "only for a DID" in ending.stderr
    operator = cli(tmp_path, CONFIG, "instance", "ban", OTHER, "--reason", "x", "--as", OPERATOR)
    assert operator.returncode == 1 and "cannot_ban_operator" in operator.stderr

    listed = cli(tmp_path, CONFIG, "instance", "bans", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["subject"], r["inForce"], r["bannedBy"]) for r in rows] == [
        ("*.spam.example", True, OTHER), ("did:plc:spammer", True, OPERATOR)]

    lifted = cli(tmp_path, CONFIG, "instance", "unban", "did:plc:spammer", "--as", OPERATOR, "--json")
    assert lifted.returncode == 0 and json.loads(lifted.stdout)["status"] == "unbanned"
    again = cli(tmp_path, CONFIG, "instance", "unban", "did:plc:spammer", "--as", OPERATOR)
    assert again.returncode == 1 and "not_banned" in again.stderr

    unknown = cli(tmp_path, CONFIG, "instance", "suspend", "did:plc:nocommunity", "--reason", "x", "--as", OPERATOR)
    assert unknown.returncode == 1 and "community_not_found" in unknown.stderr

    log = cli(tmp_path, CONFIG, "instance", "audit", "--json")
    entries = [json.loads(line) for line in log.stdout.splitlines()]
    assert [(e["action"], e["subject"], e["via"]) for e in entries] == [
        ("person.unban", "did:plc:spammer", "cli"), ("person.ban", "*.spam.example", "cli"),
        ("person.ban", "did:plc:spammer", "cli")]
    assert entries[-1]["sentence"] == (f"{OPERATOR} banned on the instance did:plc:spammer (reason: spam), "
                                       "from the command line.")


def test_an_expiry_is_days_a_last_day_or_a_time_in_the_future() -> None:
    import pytest

    from daemon.plugin import ApiError
    from plugins.instance.actions import expiry
    now = 1_800_000_000.0   # 2027-01-15T08:00:00Z
    assert expiry(None, now) is None and expiry("", now) is None
    assert expiry("30d", now).startswith("2027-02-14T08:00:00")
    assert expiry("2027-01-31", now).startswith("2027-02-01T00:00:00")          # through the 31st
    assert expiry("2027-01-20T12:00:00Z", now).startswith("2027-01-20T12:00:00")
    for bad in ("0d", "2027-01-14", "yesterday", "2020-01-01T00:00:00Z", 30):
        with pytest.raises(ApiError):
            expiry(bad, now)
