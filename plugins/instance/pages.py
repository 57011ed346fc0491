"""The operators' console at ``/admin`` (issue 38): operators only (`instance.operators`);
everyone else, signed in or not, gets the site's 404 on every /admin path, so the console's
existence is not advertised. Server-rendered in the site's layout, no script needed."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from daemon.plugin import ApiError, PageHandler
from plugins.instance import audit

PAGE = 50   # audit entries a page
DATE_FORMAT = "%-d %b %Y, %H:%M UTC"   # the site's one date format (docs/web.md)


def shown_date(stamp: str) -> str:
    """"26 Nov 2026, 14:20 UTC" (the page's script shows it in the reader's zone when it runs)."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc).strftime(DATE_FORMAT)
    except ValueError:
        return stamp


class ConsolePage(PageHandler):
    """Base of every console page: the session must be an operator's, else 404."""

    plugin = "instance"

    async def admit(self) -> None:
        await super().admit()
        did = self.principal.did if self.principal is not None else None
        if not self.app.config.plugin("instance").is_operator(did):
            raise ApiError(404, "not_found", "There is no page here.")


class OverviewPage(ConsolePage):
    async def get(self) -> None:
        from plugins.instance.console import overview_figures
        entries = await audit.entries(self.app.db, limit=10)
        self.render_page("overview.html", title="Instance console", section="overview",
                         operators=self.app.config.plugin("instance").operators, entries=entries,
                         date=shown_date, figures=await overview_figures(self.app))


class AuditPage(ConsolePage):
    async def get(self) -> None:
        before_arg = self.get_argument("before", "")
        before = int(before_arg) if before_arg.isdigit() and len(before_arg) < 19 else None
        entries = await audit.entries(self.app.db, limit=PAGE + 1, before=before)
        more = len(entries) > PAGE
        entries = entries[:PAGE]
        self.render_page("audit.html", title="Instance audit log", section="audit", entries=entries,
                         next_before=entries[-1]["id"] if more else None, date=shown_date)


class UnknownConsolePage(ConsolePage):
    """Any other /admin path: 404 for everyone, after the operator check (same answer)."""

    async def get(self, *_: str) -> None:
        raise ApiError(404, "not_found", "There is no page here.")

    async def post(self, *_: str) -> None:
        raise ApiError(404, "not_found", "There is no page here.")


def routes() -> list[tuple]:
    return [(r"/admin/?", OverviewPage), (r"/admin/audit", AuditPage), (r"/admin/(.*)", UnknownConsolePage)]
