"""Reports about a whole community, to the instance's operators (issue 38, item 5): anyone
signed in who may see a community reports it (spam, illegal, harassment, other; their own
words) from its page or through an app (``POST /api/v1/instance/reports``); the console's
inbox groups the open reports by community; an operator's decision (dismiss, suspend, remove
from the index) settles every open report about that community at once; reporters read the
outcome on their own page, never who decided.

Events `instance.report.created` and `instance.report.decided` go only to the apps the
operator names in `instance.trusted_apps` (its own moderation tools), never to the
community's apps: the community is not told who reported it."""

from __future__ import annotations

import argparse
from typing import Any, Awaitable, Callable

from daemon.plugin import (DID, STRING, STRING_OR_NULL, Actor, ApiError, Application, CommunitiesService,
                           EventKind, Link, Row, emit_tx, invalid, iso, obj)
from plugins.instance import audit
from plugins.instance import reports_store as store

REASONS = ("spam", "illegal", "harassment", "other")
MAX_TEXT = 2000
PER_DAY = 20          # reports one person may make in 24 hours, instance-wide
DAY = 86400.0
#: decision -> the outcome its reports are settled with
DECISIONS = {"dismiss": "dismissed", "suspend": "suspended", "remove": "removed"}
OUTCOME_WORDS = {None: "Open: the operators have not decided yet", "dismissed": "Dismissed: no action was taken",
                 "suspended": "Acted on: the community was suspended",
                 "removed": "Acted on: the community was removed from this instance"}

_PAYLOAD = obj({"reportId": STRING, "reason": {"type": "string", "enum": list(REASONS)},
                "status": {"type": "string", "enum": ["open", "settled"]}, "outcome": STRING_OR_NULL,
                "reporterDid": DID, "communityDid": DID}, ["reportId", "reason", "status", "reporterDid"])

EVENT_KINDS = [
    EventKind("instance.report.created", "Someone reported a whole community to the instance's operators (sent "
                                         "only to the apps named in instance.trusted_apps).", _PAYLOAD,
              label="Someone reported a community to the operators", person_keys=("reporterDid",)),
    EventKind("instance.report.decided", "An operator decided about the reports of a community: dismissed them, "
                                         "suspended it or removed it from the index; one event per report settled "
                                         "(sent only to the apps named in instance.trusted_apps).", _PAYLOAD,
              label="The operators decided about a reported community", person_keys=("reporterDid",)),
]

def _operator(values: dict[str, Any]) -> bool:
    me = values.get("me")
    return me is not None and values["app"].config.plugin("instance").is_operator(me["did"])


LINKS = [
    Link("site.nav", "Console", "/admin", when=_operator),   # operators only: /admin is a 404 for others
    Link("community.page", "Report this community to the instance", "/c/{community[handle]}/report-community",
         when=lambda v: v.get("me") is not None),
    Link("person.home", "My reports about communities", "/reports/communities"),
    Link("person.reports", "My reports about whole communities, to the instance's operators", "/reports/communities"),
]


def communities(app: Application) -> CommunitiesService:
    service = app.service(CommunitiesService)
    assert service is not None  # cr_plugin_requires: communities
    return service


def operator_actions() -> dict[str, Callable[..., Awaitable[Any]]]:
    """The decisions beyond dismiss, each called as ``action(app, community_did, reason,
    operator_did, via)``: `suspend` (the reason is public: it is shown on the community's
    pages) and `remove` (from the index; the account is kept), as the console's Communities
    page does them (plugins/instance/actions.py)."""
    from plugins.instance import actions

    async def suspend(app: Any, community_did: str, reason: str, operator_did: str, via: str) -> Any:
        return await actions.suspend(app, operator_did, community_did, reason=reason, via=via)

    async def remove(app: Any, community_did: str, reason: str, operator_did: str, via: str) -> Any:
        return await actions.remove(app, operator_did, community_did, reason=reason, via=via)

    return {"suspend": suspend, "remove": remove}


def decisions() -> list[str]:
    """The decisions available now, dismiss first."""
    return ["dismiss"] + [d for d in ("suspend", "remove") if d in operator_actions()]


def own_json(row: Row) -> dict[str, Any]:
    """A report as its reporter sees it: the outcome, never who decided."""
    return {"id": str(row["id"]), "communityDid": row["community_did"], "communityName": row["community_name"],
            "communityHandle": row["community_handle"], "reason": row["reason"], "text": row["body"],
            "status": row["status"], "outcome": row["outcome"], "createdAt": row["created_at"],
            "decidedAt": row["decided_at"]}


def operator_json(row: Row) -> dict[str, Any]:
    return {**own_json(row), "reporterDid": row["reporter_did"], "appId": row["app_id"],
            "decidedBy": row["decided_by"]}


def _event(row: Row) -> dict[str, Any]:
    return {"reportId": str(row["id"]), "reason": row["reason"], "status": row["status"], "outcome": row["outcome"],
            "reporterDid": row["reporter_did"]}


async def create(app: Application, reporter_did: str, community_ident: Any, reason: Any, text: Any, *,
                 app_id: str | None) -> Row:
    """Report a community (its DID or handle) as `reporter_did`, who must be able to see it."""
    if reason not in REASONS:
        raise invalid("reason", f"must be one of: {', '.join(REASONS)}")
    if text is not None and not isinstance(text, str):
        raise invalid("text", "must be a string")
    text = (text or "").strip() or None
    if text is not None and len(text) > MAX_TEXT:
        raise invalid("text", f"must be at most {MAX_TEXT:,} characters")
    if not isinstance(community_ident, str) or not community_ident.strip():
        raise invalid("communityDid", "name the community by its DID")
    community = await communities(app).community(community_ident.strip()[:300])
    if community is None or not await communities(app).may_see(Actor(reporter_did, app_id, proven=True),
                                                               community.did):
        raise ApiError(404, "community_not_found", f"No community {community_ident[:200]} here.")
    now = app.clock.time()
    trusted = app.config.plugin("instance").trusted_apps
    async with app.db.transaction("instance.report_create") as tx:
        if await store.open_of(tx, community.did, reporter_did) is not None:
            raise ApiError(409, "already_reported", "You already have an open report about this community; the "
                                                    "instance's operators will look at it.")
        if await store.made_since(tx, reporter_did, iso(now - DAY)) >= PER_DAY:
            raise ApiError(429, "rate_limited", f"At most {PER_DAY} reports about communities a day.",
                           headers={"Retry-After": "3600"})
        report_id = await store.insert_tx(tx, community_did=community.did, community_name=community.name,
                                          community_handle=community.handle, reporter_did=reporter_did,
                                          reason=reason, body=text, app_id=app_id, now=iso(now))
        row = await store.get(tx, report_id)
        assert row is not None
        await emit_tx(app, tx, "instance.report.created", community_did=community.did, app_id=app_id,
                      actor_did=reporter_did, data=_event(row), only_apps=trusted)
    return row


async def inbox(app: Application, *, limit: int = 1000) -> list[dict[str, Any]]:
    """Open reports grouped by community: the community with the oldest report first."""
    groups: dict[str, dict[str, Any]] = {}
    for row in await store.open_reports(app.db, limit=limit):
        group = groups.setdefault(row["community_did"], {
            "communityDid": row["community_did"], "communityName": row["community_name"],
            "communityHandle": row["community_handle"], "count": 0, "oldestAt": row["created_at"],
            "reasons": {}, "reports": []})
        group["count"] += 1
        group["reasons"][row["reason"]] = group["reasons"].get(row["reason"], 0) + 1
        group["reports"].append(operator_json(row))
    return list(groups.values())


async def decide(app: Application, community_did: str, decision: Any, operator_did: str, *, reason: Any = None,
                 via: str = "web") -> dict[str, Any]:
    """Decide about a community's open reports: carry the decision out (suspend, remove),
    then settle every open report about it, audited, in one transaction."""
    if decision not in DECISIONS:
        raise invalid("decision", f"must be one of: {', '.join(decisions())}")
    if decision != "dismiss" and decision not in operator_actions():
        raise ApiError(400, "decision_unavailable", f"This instance cannot {decision} communities yet.")
    if reason is not None and not isinstance(reason, str):
        raise invalid("reason", "must be a string")
    reason = (reason or "").strip() or None
    if reason is not None and len(reason) > 500:
        raise invalid("reason", "must be at most 500 characters")
    open_rows = await store.open_reports(app.db, limit=10_000, community_did=community_did)
    if not open_rows:
        raise ApiError(404, "no_open_reports", f"No open report about {community_did[:200]}.")
    if decision != "dismiss":
        await operator_actions()[decision](app, community_did, reason or "reported to the operators", operator_did,
                                           via)
    outcome = DECISIONS[decision]
    now = app.clock.iso_now()
    settled: list[str] = []
    trusted = app.config.plugin("instance").trusted_apps
    async with app.db.transaction("instance.report_decide") as tx:
        for row in await store.open_reports(tx, limit=10_000, community_did=community_did):
            if await store.settle_tx(tx, row["id"], outcome=outcome, operator_did=operator_did, now=now):
                settled.append(str(row["id"]))
                done = await store.get(tx, row["id"])
                assert done is not None
                await emit_tx(app, tx, "instance.report.decided", community_did=community_did, app_id=None,
                              actor_did=None, data=_event(done), only_apps=trusted)
        await audit.record_tx(tx, now, operator_did, f"report.{decision}", community_did,
                              {"reports": settled, "community": open_rows[0]["community_name"],
                               **({"reason": reason} if reason else {})}, via=via)
    return {"communityDid": community_did, "outcome": outcome, "settledReportIds": settled}


async def mine(app: Application, reporter_did: str, *, limit: int = 200) -> list[dict[str, Any]]:
    return [own_json(r) for r in await store.of_reporter(app.db, reporter_did, limit=limit)]


# ------------------------------------------------------------------ command line


def add_cli(actions: Any, add_as: Callable[[argparse.ArgumentParser], None]) -> None:
    from daemon.plugin.cli import add_json_flag
    listing = actions.add_parser("reports", help="open reports about communities, grouped by community")
    add_json_flag(listing)
    decide_cmd = actions.add_parser("decide", help="decide about a community's open reports (every one is "
                                                   "settled): dismiss, suspend, remove")
    decide_cmd.add_argument("community", help="the community's DID (or a report id of it)")
    decide_cmd.add_argument("decision", choices=list(DECISIONS))
    decide_cmd.add_argument("--reason", default=None)
    add_as(decide_cmd)


async def _reports(app: Application, args: argparse.Namespace) -> int:
    from daemon.plugin.cli import print_rows
    groups = await inbox(app)
    if args.json:
        return print_rows(groups, (), True)
    return print_rows([{"community": g["communityDid"], "name": g["communityName"], "reports": g["count"],
                        "reasons": ", ".join(f"{k} {v}" for k, v in g["reasons"].items()), "oldest": g["oldestAt"]}
                       for g in groups], ("community", "name", "reports", "reasons", "oldest"), False)


async def _decide(app: Application, args: argparse.Namespace) -> int:
    from daemon.plugin.cli import fail, print_rows
    from plugins.instance.operator import operator_of
    operator = operator_of(app, args)
    if operator is None:
        return 2
    community = args.community
    if community.isdigit():
        row = await store.get(app.db, int(community))
        if row is None:
            return fail(f"no report {community}")
        community = row["community_did"]
    try:
        done = await decide(app, community, args.decision, operator, reason=args.reason, via="cli")
    except ApiError as exc:
        return fail(f"{exc.code}: {exc.message}")
    return print_rows([{**done, "settledReportIds": " ".join(done["settledReportIds"])}],
                      ("communityDid", "outcome", "settledReportIds"), args.json)


def cli_actions() -> dict[str, Any]:
    return {"reports": _reports, "decide": _decide}
