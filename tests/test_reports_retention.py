"""Retention of settled reports (plugins/reports, issue 26 item 5): reports acted on or
dismissed longer ago than `reports.settled_retention_days` leave the database in bounded
batches; open reports stay however old, recent settled ones stay, and 0 keeps them all."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.reports import store
from plugins.reports.retention import prune_settled
from tests.fixtures_webhooks import make_community

COMMUNITY = "did:plc:reportretention"
DAY = 86400


async def report(app: Any, subject: str, *, settle: str | None = None) -> int:
    async with app.db.transaction("test.report") as tx:
        report_id = await store.insert_tx(
            tx, community_did=COMMUNITY, reporter_did="did:plc:reporter", subject=subject, subject_kind="member",
            subject_did=subject, reason="spam", body=None, app_id=None, now=app.clock.iso_now())
        if settle:
            assert await store.resolve_tx(tx, report_id, status=settle, outcome="dismissed" if settle == "dismissed"
                                          else "member_banned", note=None, reviewer_did="did:plc:reviewer",
                                          now=app.clock.iso_now())
    return report_id


async def remaining(app: Any) -> set[int]:
    return {r["id"] for r in await app.db.fetchall("SELECT id FROM reports WHERE community_did = ?", (COMMUNITY,))}


async def test_reports_settled_past_the_retention_go_and_open_or_recent_ones_stay(app, clock):
    assert app.config.plugin("reports").settled_retention_days == 365   # the default
    await make_community(app, COMMUNITY)
    for i in range(5):
        await report(app, f"did:plc:old{i}", settle=("dismissed", "acted")[i % 2])
    old_open = await report(app, "did:plc:stillopen")
    clock.advance(300 * DAY)
    recent = await report(app, "did:plc:recent", settle="dismissed")
    clock.advance(100 * DAY)          # the first reports are 400 days old, `recent` 100
    late = await report(app, "did:plc:late")   # open, made after the others were settled

    assert await prune_settled(app, batch=2) == 5      # three batches: 2, 2, 1
    assert await remaining(app) == {old_open, recent, late}
    assert await prune_settled(app) == 0
    # an open report resolved long after it was made is kept for the full window after resolving
    async with app.db.transaction("test.resolve") as tx:
        await store.resolve_tx(tx, old_open, status="dismissed", outcome="dismissed", note=None,
                               reviewer_did="did:plc:reviewer", now=app.clock.iso_now())
    clock.advance(364 * DAY)
    assert await prune_settled(app) == 1 and await remaining(app) == {old_open, late}   # `recent`: 464 days
    clock.advance(2 * DAY)
    assert await prune_settled(app) == 1 and await remaining(app) == {late}


@pytest.mark.parametrize("config_overrides", [{"reports": {"settled_retention_days": 0}}])
async def test_zero_keeps_settled_reports_for_good(app, clock):
    await make_community(app, COMMUNITY)
    kept = {await report(app, "did:plc:a", settle="dismissed"), await report(app, "did:plc:b", settle="acted")}
    clock.advance(5000 * DAY)
    assert await prune_settled(app) == 0
    assert await remaining(app) == kept


def test_a_negative_retention_is_refused():
    from daemon.plugin import ConfigError
    from plugins.reports.settings import ReportsConfig
    with pytest.raises(ConfigError, match="reports.settled_retention_days"):
        ReportsConfig(settled_retention_days=-1)
