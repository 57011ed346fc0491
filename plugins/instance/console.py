"""The console's pages for creation requests, reports and apps, and the overview's figures;
with the report form on a community's page and a reporter's own list. Operator pages are
`ConsolePage`s (404 for everyone but operators); every form posts with the session's CSRF
token and is audited in the instance audit log (docs/operations.md, "Running a public
instance")."""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

from daemon.plugin import Actor, ApiError, CommunitiesService, PageHandler
from daemon.plugin.services import AppsService, WebhooksService
from plugins.instance import audit, community_reports, requests
from plugins.instance import reports_store, requests_store
from plugins.instance.pages import ConsolePage, shown_date

IDENT = r"([^/]+)"
REASON_WORDS = {"spam": "Spam", "illegal": "Illegal content", "harassment": "Harassment", "other": "Other"}


def _errors(exc: ApiError | None) -> Any:
    return None if exc is None else SimpleNamespace(general=[exc.message], fields={})


async def names(app: Any, dids: list[str]) -> dict[str, str]:
    """How the console names people: @handle from the profile cache, or the DID."""
    service = app.service(CommunitiesService)
    known = await service.profiles(d for d in dids if d) if service is not None else {}
    return {d: ("@" + known[d]["handle"]) if known.get(d) and known[d].get("handle") else d for d in dids}


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


async def overview_figures(app: Any) -> list[dict[str, Any]]:
    """The overview's figures, each ``{label, value, href}``."""
    figures: list[dict[str, Any]] = []
    counts = {"communities": 0, "people": 0}
    service = app.service(CommunitiesService)
    if service is not None:
        counts = await service.instance_counts()
    apps_service = app.service(AppsService)
    apps = await apps_service.all_apps() if apps_service is not None else []
    hooks = app.service(WebhooksService)
    failing = await hooks.failing_count() if hooks is not None else 0
    reports_open, reported = await reports_store.count_open(app.db)
    waiting = await requests_store.count_waiting(app.db)
    db_path = str(app.config.database_path)
    db_bytes = sum(_size(db_path + suffix) for suffix in ("", "-wal", "-shm"))
    try:
        disk = shutil.disk_usage(os.path.dirname(db_path) or ".")
        disk_words = f"{human_bytes(disk.free)} free of {human_bytes(disk.total)}"
    except OSError:
        disk_words = "unknown"
    lag = await app.replica_lag_seconds()
    figures += [
        {"label": "Communities", "value": f"{counts['communities']:,}", "href": None},
        {"label": "People in communities", "value": f"{counts['people']:,}", "href": None},
        {"label": "Apps", "value": f"{sum(1 for a in apps if a['active']):,} active of {len(apps):,}",
         "href": "/admin/apps"},
        {"label": "Webhooks failing", "value": f"{failing:,}", "href": None, "alert": failing > 0},
        {"label": "Reports waiting", "value": f"{reports_open:,}" + (
            f" report{'' if reports_open == 1 else 's'} about {reported:,} communit{'y' if reported == 1 else 'ies'}"
            if reports_open else ""),
         "href": "/admin/reports", "alert": reports_open > 0},
        {"label": "Creation requests waiting", "value": f"{waiting:,}", "href": "/admin/requests",
         "alert": waiting > 0},
        {"label": "Database size", "value": human_bytes(db_bytes), "href": None},
        {"label": "Disk", "value": disk_words, "href": None},
        {"label": "Replication lag", "value": "no replication" if lag is None else f"{lag:.1f} s", "href": None},
    ]
    return figures


# ------------------------------------------------------------------ creation requests


class RequestsPage(ConsolePage):
    notices = {"approved": "The request is approved and the community created for the person.",
               "declined": "The request is declined; the person sees your reason."}

    async def get(self) -> None:
        await self.show()

    async def show(self, exc: ApiError | None = None) -> None:
        waiting = await requests_store.listing(self.app.db, states=requests_store.WAITING, limit=200)
        decided = await requests_store.listing(self.app.db, states=("created", "declined"), limit=20)
        who = await names(self.app, [r["requester_did"] for r in waiting + decided]
                          + [r["decided_by"] for r in decided if r["decided_by"]])
        self.render_page("requests.html", title=("Error: " if exc else "") + "Creation requests",
                         status=exc.status if exc else 200, section="requests", errors=_errors(exc),
                         waiting=waiting, decided=decided, who=who, date=shown_date,
                         policy=self.app.config.plugin("instance").creation, state_words=requests.STATE_WORDS,
                         max_reason=requests.MAX_REASON)


class RequestDecision(RequestsPage):
    """POST /admin/requests/<id>/(approve|decline)."""

    async def get(self, *_: str) -> None:
        self.redirect("/admin/requests", status=303)

    async def submit(self, request_id: str, decision: str) -> None:
        assert self.principal is not None
        try:
            if decision == "approve":
                await requests.approve(self.app, int(request_id), self.principal.did)
            else:
                await requests.decline(self.app, int(request_id), self.principal.did, self.form.get("reason", ""))
        except ApiError as exc:
            if exc.status >= 500 and exc.code != "pds_error":
                raise
            await self.show(exc)   # the list again, with the error on top
            return
        self.see_other("/admin/requests", done="approved" if decision == "approve" else "declined")

    def form_page(self) -> str:
        return "/admin/requests"


# ------------------------------------------------------------------ reports


class ReportsInboxPage(ConsolePage):
    notices = {"decided": "Decided: every open report about the community is settled."}

    async def get(self) -> None:
        await self.show()

    async def show(self, exc: ApiError | None = None) -> None:
        groups = await community_reports.inbox(self.app)
        settled = [community_reports.operator_json(r) for r in await reports_store.settled(self.app.db, limit=20)]
        who = await names(self.app, [r["reporterDid"] for g in groups for r in g["reports"]]
                          + [r["decidedBy"] for r in settled if r["decidedBy"]])
        self.render_page("reports.html", title=("Error: " if exc else "") + "Reports about communities",
                         status=exc.status if exc else 200, section="reports", errors=_errors(exc), groups=groups,
                         settled=settled, who=who, date=shown_date, reason_words=REASON_WORDS,
                         decisions=community_reports.decisions(), outcome_words=community_reports.OUTCOME_WORDS)


class ReportDecision(ReportsInboxPage):
    """POST /admin/reports/decide: one decision about one community's open reports."""

    async def get(self, *_: str) -> None:
        self.redirect("/admin/reports", status=303)

    async def submit(self) -> None:
        assert self.principal is not None
        try:
            await community_reports.decide(self.app, self.form.get("community", ""), self.form.get("decision", ""),
                                           self.principal.did, reason=self.form.get("reason", ""))
        except ApiError as exc:
            if exc.status >= 500 and exc.code != "pds_error":
                raise
            await self.show(exc)
            return
        self.see_other("/admin/reports", done="decided")

    def form_page(self) -> str:
        return "/admin/reports"


# ------------------------------------------------------------------ apps


class AppsPage(ConsolePage):
    notices = {"deactivated": "The app is deactivated: its key is refused from now on.",
               "limited": "The app's rate limit is set."}

    async def get(self) -> None:
        await self.show()

    async def show(self, exc: ApiError | None = None, values: dict[str, str] | None = None) -> None:
        service = self.app.service(AppsService)
        rows = await service.all_apps() if service is not None else []
        default = service.default_limit() if service is not None else (0, 0.0)
        apps = [{**service.app_json(r, default), "owner": r["owner_did"]} for r in rows] if service else []
        apps.sort(key=lambda a: (not a["active"], a["name"].lower()))
        who = await names(self.app, [a["owner"] for a in apps])
        self.render_page("apps.html", title=("Error: " if exc else "") + "Apps", status=exc.status if exc else 200,
                         section="apps", errors=_errors(exc), apps=apps, who=who, default=default,
                         date=shown_date, values=values or {})


class AppAction(AppsPage):
    """POST /admin/apps/<id>/(deactivate|rate-limit)."""

    async def get(self, *_: str) -> None:
        self.redirect("/admin/apps", status=303)

    async def submit(self, app_id: str, action: str) -> None:
        assert self.principal is not None
        service = self.app.service(AppsService)
        if service is None:
            raise ApiError(404, "not_found", "There is no page here.")
        operator = self.principal.did
        try:
            if action == "deactivate":
                if self.form.get("confirm") != "yes":
                    raise ApiError(400, "invalid_request", "Tick the box to confirm: a deactivated app cannot be "
                                                           "turned back on.")
                await service.operator_deactivate(app_id)
                detail: dict[str, Any] = {}
            else:
                requests_text = self.form.get("maxRequests", "").strip()
                window_text = self.form.get("windowSeconds", "").strip() or "60"
                if requests_text in ("", "0"):
                    limit, window = None, None
                elif requests_text.isdigit() and window_text.isdigit() and len(requests_text) < 10 \
                        and len(window_text) < 10:
                    limit, window = int(requests_text), float(window_text)
                else:
                    raise ApiError(400, "invalid_request", "Give the requests and the window as whole numbers "
                                                           "(an empty number of requests: the default).")
                await service.operator_rate_limit(app_id, limit, window)
                detail = {"limit": f"{limit} per {window:g} s" if limit else "the default"}
            async with self.app.db.transaction("instance.app_action") as tx:
                await audit.record_tx(tx, self.app.clock.iso_now(), operator,
                                      "app.deactivate" if action == "deactivate" else "app.rate_limit", app_id,
                                      detail)
        except ApiError as exc:
            if exc.status >= 500:
                raise
            await self.show(exc)
            return
        self.see_other("/admin/apps", done="deactivated" if action == "deactivate" else "limited")

    def form_page(self) -> str:
        return "/admin/apps"


# ------------------------------------------------------------------ reporting a community


class ReportCommunityPage(PageHandler):
    """A signed-in person reports a whole community to the instance's operators."""

    plugin = "instance"
    login_required = True
    notices = {"reported": "Thank you: your report is with the instance's operators."}

    async def _community(self, ident: str) -> Any:
        assert self.me is not None
        service = self.app.service(CommunitiesService)
        community = await service.community(ident) if service is not None else None
        if community is None or not await service.may_see(Actor(self.me["did"], None, proven=True), community.did):
            raise ApiError(404, "community_not_found", "There is no community here.")
        return community

    async def get(self, ident: str) -> None:
        self._render(await self._community(ident), {}, None)

    async def submit(self, ident: str) -> None:
        assert self.me is not None
        community = await self._community(ident)
        form = {k: self.form.get(k, "") for k in ("reason", "text")}
        try:
            await community_reports.create(self.app, self.me["did"], community.did, form["reason"], form["text"],
                                           app_id=None)
        except ApiError as exc:
            if exc.status not in (400, 404, 409, 429):
                raise
            self._render(community, form, exc)
            return
        self.see_other(f"/c/{quote(community.handle)}/report-community", done="reported")

    def _render(self, community: Any, form: dict[str, str], exc: ApiError | None) -> None:
        errors = None
        if exc is not None:
            field = next((d.get("field") for d in exc.details or [] if isinstance(d, dict) and d.get("field")), "")
            errors = SimpleNamespace(general=[] if field else [exc.message], fields={field: exc.message} if field else {})
        self.render_page("report_community.html", title=("Error: " if exc else "") + f"Report {community.name}",
                         status=exc.status if exc else 200, community=community, form=form, errors=errors,
                         reasons=community_reports.REASONS, reason_words=REASON_WORDS,
                         max_text=community_reports.MAX_TEXT)


class MyCommunityReportsPage(PageHandler):
    """A person's own reports about communities: the outcome, never who decided."""

    plugin = "instance"
    login_required = True

    async def get(self) -> None:
        assert self.me is not None
        items = await community_reports.mine(self.app, self.me["did"])
        self.render_page("my_community_reports.html", title="My reports about communities", items=items,
                         outcome_words=community_reports.OUTCOME_WORDS, reason_words=REASON_WORDS, date=shown_date)


def routes() -> list[tuple]:
    return [(r"/admin/requests", RequestsPage),
            (r"/admin/requests/([0-9]{1,18})/(approve|decline)", RequestDecision),
            (r"/admin/reports", ReportsInboxPage),
            (r"/admin/reports/decide", ReportDecision),
            (r"/admin/apps", AppsPage),
            (r"/admin/apps/(app_[A-Za-z0-9]{1,60})/(deactivate|rate-limit)", AppAction),
            (r"/c/" + IDENT + r"/report-community", ReportCommunityPage),
            (r"/reports/communities", MyCommunityReportsPage)]
