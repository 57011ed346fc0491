"""The reports pages, in the site's layout: a member's report form (``/c/<c>/report``,
linked from a member's row and the community page), the reviewers' queue in the settings
area (``/c/<c>/settings/reports``, linked through the settings slot), and a person's own
reports with their status (``/reports/mine``, linked from their home page)."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

from daemon.plugin import Actor, ApiError, PageHandler, iso

from plugins.reports import reports, store
from plugins.reports.declarations import ACTIONS, MAX_NOTE, MAX_TEXT, REASONS

IDENT = r"([^/]+)"
BAN_DAYS = ("1", "7", "30", "365")   # the queue's choice of ban lengths
ACTION_WORDS = {"dismiss": "Dismiss", "remove_record": "Remove the record", "remove_member": "Remove the member",
                "ban_member": "Ban the member"}
OUTCOME_WORDS = {None: "Open", "dismissed": "Dismissed", "record_removed": "Acted on: the record was removed",
                 "member_removed": "Acted on: the member was removed", "member_banned": "Acted on: the member was banned"}

DATE_FORMAT = "%-d %b %Y, %H:%M UTC"   # the site's one date format (docs/web.md)


def shown_date(stamp: str | None) -> str:
    """An ISO timestamp as the site shows dates: "26 Nov 2026, 14:20 UTC" (the page's
    script turns `<time data-local>` into the reader's own time zone when it runs)."""
    if not stamp:
        return ""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc).strftime(DATE_FORMAT)
    except ValueError:
        return stamp


def reason_words(reason: str) -> str:
    return reason.capitalize().replace("-", " ")


async def namer(app: Any, dids: list[str | None]) -> Any:
    """How the pages name people, as the rest of the site does: the display name and handle
    from the profile cache (``Ann (@ann.test)``), the handle alone, or the DID if unknown."""
    known = await reports.communities(app).profiles(d for d in dids if d)

    def name(did: str | None) -> str:
        profile = known.get(did or "")
        if profile is None or not profile["handle"]:
            return (profile or {}).get("displayName") or did or ""
        handle = "@" + profile["handle"]
        return f"{profile['displayName']} ({handle})" if profile["displayName"] else handle
    return name


def queue_dids(groups: list[dict[str, Any]], resolved: list[dict[str, Any]]) -> list[str | None]:
    """The people the queue names: members reported, authors of records, reporters, reviewers."""
    dids: list[str | None] = []
    for g in groups:
        dids += [g["subject"] if g["subjectKind"] == "member" else None, g["subjectDid"]]
        dids += [r["reporterDid"] for r in g["reports"]]
    for r in resolved:
        dids += [r["subject"] if r["subjectKind"] == "member" else None, r["reviewerDid"]]
    return dids


def _field(exc: ApiError) -> str:
    for detail in exc.details or []:
        if isinstance(detail, dict) and detail.get("field"):
            return str(detail["field"])
    return "subject" if exc.code in ("subject_not_member", "subject_outside_community", "cannot_report_self",
                                     "record_not_found", "already_reported") else ""


class ReportPage(PageHandler):
    """A member reports a member or a record of the community."""

    plugin = "reports"
    login_required = True
    notices = {"reported": "Thank you: your report is with the community's reviewers."}

    async def get(self, ident: str) -> None:
        assert self.me is not None
        community = await reports.visible_community(self.app, ident, Actor(self.me["did"], None, proven=True))
        subject = self.get_query_argument("subject", "")[:3000].strip()
        if subject.startswith("did:"):  # a member row's Report link: show the person by handle
            profile = (await reports.communities(self.app).profiles([subject])).get(subject)
            if profile is not None and profile["handle"]:
                subject = "@" + profile["handle"]
        self._render(community, {"subject": subject}, None)

    async def submit(self, ident: str) -> None:
        assert self.me is not None
        community = await reports.visible_community(self.app, ident, Actor(self.me["did"], None, proven=True))
        form = {k: self.form.get(k, "") for k in ("subject", "reason", "text")}
        try:
            await reports.create(self.app, community, self.me["did"], dict(form), app_id=None)
        except ApiError as exc:
            if exc.status not in (400, 403, 404, 409, 429):
                raise
            for k, v in exc.headers.items():
                self.set_header(k, v)
            self._render(community, form, exc)
            return
        self.see_other(f"/c/{quote(community.handle)}/report", done="reported")

    def _render(self, community: Any, form: dict[str, str], exc: ApiError | None) -> None:
        errors = None
        if exc is not None:
            field = _field(exc)
            errors = SimpleNamespace(general=[] if field else [exc.message],
                                     fields={field: exc.message} if field else {})
        self.render_page("report.html", title=("Error: " if exc else "") + f"Report in {community.name}",
                         status=exc.status if exc else 200, community=community, form=form, errors=errors,
                         reasons=REASONS, max_text=MAX_TEXT)


class QueuePage(PageHandler):
    """The open reports, grouped by subject, for holders of reports.review."""

    plugin = "reports"
    login_required = True
    notices = {"resolved": "The reports are resolved.", "dismissed": "The reports are dismissed."}

    async def get(self, ident: str) -> None:
        assert self.me is not None
        actor = Actor(self.me["did"], None, proven=True)
        community = await reports.visible_community(self.app, ident, actor)
        await reports.require_reviewer(self.app, community, actor)
        groups = await reports.queue(self.app, community)
        await reports.record_previews(self.app, community, groups)
        resolved = await reports.recent_resolved(self.app, community, limit=20)
        layout = await self.settings_layout(community.did)  # one of the settings pages
        self.render_page("queue.html", title=f"Reports of {community.name}", community=community, **layout,
                         groups=groups, resolved=resolved, person=await namer(self.app, queue_dids(groups, resolved)),
                         actions=ACTIONS, action_words=ACTION_WORDS, outcome_words=OUTCOME_WORDS, date=shown_date,
                         reason_words=reason_words,
                         max_note=MAX_NOTE, errors=None)


class ResolveAction(PageHandler):
    """The queue's forms: resolve a subject's open reports."""

    plugin = "reports"
    login_required = True

    async def get(self, ident: str, report_id: str) -> None:
        self.redirect(f"/c/{quote(ident)}/settings/reports", status=303)

    async def submit(self, ident: str, report_id: str) -> None:
        assert self.me is not None
        actor = Actor(self.me["did"], None, proven=True)
        community = await reports.visible_community(self.app, ident, actor)
        body: dict[str, Any] = {"action": self.form.get("action", ""), "note": self.form.get("note", "")}
        days = self.form.get("banDays", "")
        if days and body["action"] == "ban_member":
            if days not in BAN_DAYS:
                raise ApiError(400, "invalid_request", "banDays: must be one of " + ", ".join(BAN_DAYS))
            body["expiresAt"] = iso(self.app.clock.time() + int(days) * 86400)
        try:
            done = await reports.resolve(self.app, community, report_id, actor, body)
        except ApiError as exc:
            if exc.status not in (400, 404, 409):
                raise
            await reports.require_reviewer(self.app, community, actor)
            groups = await reports.queue(self.app, community)
            await reports.record_previews(self.app, community, groups)
            resolved = await reports.recent_resolved(self.app, community, limit=20)
            layout = await self.settings_layout(community.did)
            self.render_page("queue.html", title=f"Error: Reports of {community.name}", status=exc.status, **layout,
                             community=community, groups=groups, resolved=resolved,
                             person=await namer(self.app, queue_dids(groups, resolved)),
                             actions=ACTIONS, action_words=ACTION_WORDS, outcome_words=OUTCOME_WORDS, date=shown_date,
                             reason_words=reason_words,
                             max_note=MAX_NOTE, errors=SimpleNamespace(general=[exc.message], fields={}))
            return
        self.see_other(f"/c/{quote(community.handle)}/settings/reports",
                       done="dismissed" if done["status"] == "dismissed" else "resolved")

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 2)[0]


class MinePage(PageHandler):
    """A person's own reports, every community: status and outcome, never the reviewer."""

    plugin = "reports"
    login_required = True

    async def get(self) -> None:
        assert self.me is not None
        rows = await store.all_of_reporter(self.app.db, self.me["did"], limit=200)
        names: dict[str, Any] = {}
        for row in rows:
            if row["community_did"] not in names:
                names[row["community_did"]] = await reports.communities(self.app).community(row["community_did"])
        items = [{**reports.own_json(r), "community": names[r["community_did"]]} for r in rows
                 if names[r["community_did"]] is not None]
        name = await namer(self.app, [r["subject"] for r in items if r["subjectKind"] == "member"])
        self.render_page("mine.html", title="My reports", items=items, person=name, outcome_words=OUTCOME_WORDS,
                         date=shown_date, reason_words=reason_words)


def routes() -> list[tuple]:
    return [(r"/c/" + IDENT + r"/report", ReportPage),
            (r"/c/" + IDENT + r"/settings/reports", QueuePage),
            (r"/c/" + IDENT + r"/settings/reports/([0-9]{1,18})/resolve", ResolveAction),
            (r"/reports/mine", MinePage)]
