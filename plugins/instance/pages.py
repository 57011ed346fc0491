"""The operators' console at ``/admin`` (issue 38): operators only (`instance.operators`);
everyone else, signed in or not, gets the site's 404 on every /admin path, so the console's
existence is not advertised. Server-rendered in the site's layout, no script needed."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from urllib.parse import urlencode

from daemon.plugin import ApiError, PageHandler, is_did
from daemon.plugin.atproto import account_status
from plugins.instance import actions, audit, store

PAGE = 50   # audit entries a page
DATE_FORMAT = "%-d %b %Y, %H:%M UTC"   # the site's one date format (docs/web.md)


def shown_date(stamp: str) -> str:
    """"26 Nov 2026, 14:20 UTC" (the page's script shows it in the reader's zone when it runs)."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc).strftime(DATE_FORMAT)
    except ValueError:
        return stamp


class ConsolePage(PageHandler):
    """Base of every console page: the session must be an operator's, else 404. A form
    acts as the signed-in operator (the session proves who), then goes back to its page
    with a notice (`done`); a refusal shows the page again with what went wrong."""

    plugin = "instance"

    async def done(self, page: str, key: str, **params: str) -> None:
        self.redirect(f"{page}?{urlencode({**params, 'done': key})}", status=303)

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
                         counts=await store.counts(self.app.db, self.app.clock.iso_now()),
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


SORTS = (("newest", "Newest"), ("oldest", "Oldest"), ("size", "Most members"), ("reports", "Most reported"))
DONE = {"suspended": "The community is suspended.", "lifted": "The suspension is lifted.",
        "removed": "The community is removed from the index; its account was not deleted.",
        "banned": "The ban is in force.", "unbanned": "The ban is lifted."}


class CommunitiesPage(ConsolePage):
    async def get(self) -> None:
        await self.show()

    async def show(self, error: str | None = None, status: int = 200, values: dict[str, str] | None = None) -> None:
        text = ((values or {}).get("q") or self.get_argument("q", "") or "").strip()[:200]
        sort = (values or {}).get("sort") or self.get_argument("sort", "newest")
        sort = sort if sort in dict(SORTS) else "newest"
        from plugins.instance import reports_store
        reported = await reports_store.open_counts(self.app.db)
        if sort == "reports":
            # the most reported first (each as the index has it), then the rest, newest first
            rows = []
            for did in reported:
                rows += [r for r in await self.app.communities.index_listing(did, sort="newest", limit=1)
                         if r["did"] == did and (not text or text.lower() in
                                                 f"{r['display_name']} {r['handle']} {did}".lower())]
            seen = {r["did"] for r in rows}
            rows += [r for r in await self.app.communities.index_listing(text, sort="newest", limit=100)
                     if r["did"] not in seen][:max(0, 100 - len(rows))]
        else:
            rows = await self.app.communities.index_listing(text, sort=sort, limit=100)
        held = await store.suspensions(self.app.db, [r["did"] for r in rows])
        communities = [{"did": r["did"], "handle": r["handle"], "name": r["display_name"], "type": r["type"],
                        "members": r["member_count"], "created": r["created_at"], "listed": bool(r["listed"]),
                        "suspension": held.get(r["did"]), "reports": reported.get(r["did"], 0)} for r in rows]
        self.render_page("communities.html", title="Communities: instance console", section="communities",
                         status=status, q=text, sort=sort, sorts=SORTS, communities=communities, error=error,
                         notice=DONE.get(self.get_argument("done", "")), date=shown_date)


class CommunityAction(CommunitiesPage):
    """POST /admin/communities/(suspend|lift|remove)."""

    async def get(self, *_: str) -> None:
        raise ApiError(405, "method_not_allowed", "This address takes the console's form only.")

    async def submit(self, what: str) -> None:
        operator, community, reason = self.principal.did, self.form.get("community", ""), self.form.get("reason")
        back = {k: v for k, v in (("q", self.form.get("q", "")), ("sort", self.form.get("sort", ""))) if v}
        try:
            if what == "suspend":
                await actions.suspend(self.app, operator, community, reason=reason)
                return await self.done("/admin/communities", "suspended", **back)
            if what == "lift":
                await actions.lift(self.app, operator, community)
                return await self.done("/admin/communities", "lifted", **back)
            if self.form.get("confirm") != "yes":
                raise ApiError(400, "invalid_request", "Tick the box to confirm the removal from the index.")
            await actions.remove(self.app, operator, community, reason=reason)
            return await self.done("/admin/communities", "removed", **back)
        except ApiError as exc:
            if exc.status >= 500:
                raise
            await self.show(exc.message, exc.status, dict(self.form))


class PeoplePage(ConsolePage):
    async def get(self) -> None:
        await self.show()

    async def show(self, error: str | None = None, status: int = 200, values: dict[str, str] | None = None) -> None:
        text = ((values or {}).get("q") or self.get_argument("q", "") or "").strip()[:300]
        person = await self.person(text) if text else None
        now = self.app.clock.iso_now()
        bans = [actions.ban_json(r, now) for r in await store.list_bans(self.app.db, limit=200)]
        self.render_page("people.html", title="People: instance console", section="people", status=status, q=text,
                         person=person, bans=bans, error=error, values=values or {},
                         notice=DONE.get(self.get_argument("done", "")), date=shown_date)

    async def person(self, text: str) -> dict[str, Any] | None:
        """The person a search names (a DID, or a handle the instance has seen), with their
        communities and roles, their requests, their ban and the network's word on them."""
        communities = self.app.communities
        did = text if is_did(text) else await communities.person_did(text.lstrip("@").lower())
        if did is None:
            return {"did": None, "query": text}
        names = await communities.profiles([did])
        roles_of = {}
        rows = await communities.memberships_of(did, limit=500, after_id=None)
        for row in rows:
            holders = await communities.role_holders(row)
            roles_of[row["did"]] = holders.get(did, [])
        memberships = [{"did": r["did"], "handle": r["handle"], "name": r["display_name"],
                        "role": "Primary admin" if r["admin_rank"] == 0 else "Admin" if r["admin_rank"] is not None
                        else "Member", "roles": roles_of.get(r["did"], [])} for r in rows]
        requests = [{"did": r["did"], "handle": r["handle"], "name": r["display_name"]}
                    for r in await communities.requests_of(did)]
        ban = await actions.ban_in_force(self.app, did, (names.get(did) or {}).get("handle"))
        own = await store.get_ban(self.app.db, did)
        return {"did": did, "query": text, "handle": (names.get(did) or {}).get("handle"),
                "memberships": memberships, "requests": requests,
                "ban": actions.ban_json(ban, self.app.clock.iso_now()) if ban is not None else None,
                "own_ban": own is not None, "account": await account_status(self.app.db, did),
                "operator": self.app.config.plugin("instance").is_operator(did)}


class PersonAction(PeoplePage):
    """POST /admin/people/(ban|unban)."""

    async def get(self, *_: str) -> None:
        raise ApiError(405, "method_not_allowed", "This address takes the console's form only.")

    async def submit(self, what: str) -> None:
        operator, subject = self.principal.did, self.form.get("subject", "")
        back = {"q": self.form["q"]} if self.form.get("q") else {}
        try:
            if what == "ban":
                expires = self.form.get("expires", "")
                if expires == "date":
                    expires = self.form.get("until", "")
                out = await actions.ban(self.app, operator, subject, reason=self.form.get("reason"),
                                        expires=expires or None,
                                        end_memberships=self.form.get("endMemberships") == "yes")
                if out["notEnded"]:
                    names = ", ".join(f"{n['name']} ({n['message']})" for n in out["notEnded"])
                    raise ApiError(409, "not_all_ended",
                                   f"The ban is in force, but these memberships did not end: {names}. "
                                   "Ban again to retry.")
                return await self.done("/admin/people", "banned", **back)
            await actions.unban(self.app, operator, subject)
            return await self.done("/admin/people", "unbanned", **back)
        except ApiError as exc:
            if exc.status >= 500:
                raise
            await self.show(exc.message, exc.status, dict(self.form))


class UnknownConsolePage(ConsolePage):
    """Any other /admin path: 404 for everyone, after the operator check (same answer)."""

    async def get(self, *_: str) -> None:
        raise ApiError(404, "not_found", "There is no page here.")

    async def post(self, *_: str) -> None:
        raise ApiError(404, "not_found", "There is no page here.")


def routes() -> list[tuple]:
    return [(r"/admin/?", OverviewPage), (r"/admin/audit", AuditPage), (r"/admin/communities", CommunitiesPage),
            (r"/admin/communities/(suspend|lift|remove)", CommunityAction), (r"/admin/people", PeoplePage),
            (r"/admin/people/(ban|unban)", PersonAction), (r"/admin/(.*)", UnknownConsolePage)]
