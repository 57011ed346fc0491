"""The pages (URL map in docs/web.md). Each handler reads through the communities
plugin's services and reads, the same calls its JSON routes make, and hands the template
plain data."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from daemon.plugin import ApiError, encode_cursor
from daemon.plugin.security import clear_session_cookies, end_session
from plugins.web import membership, queries
from plugins.web.assets import PLUGIN_STATIC_PATTERN, STATIC_PATTERN, StaticHandler
from plugins.web.base import FormErrors, PageHandler, safe_next
from plugins.web.sections import settings_sections
from plugins.web.shared import IDENT, plain_notice, community_path, community_row, signed_in_actor

# ------------------------------------------------------------------ home


class HomePage(PageHandler):
    """GET /: signed out, what this is and the sign-in form; signed in, my communities."""

    async def get(self) -> None:
        if self.principal is None:
            self.render_page("home_signed_out.html", title="Commonroom", sign_in_form=True,
                             next=safe_next(self.get_query_argument("next", None)),
                             ended=self.session_ended,
                             notice=plain_notice(self.get_query_argument("done", "")))
            return
        limit, cursor = self.page_params(1, "i")
        mine, more = await queries.my_communities(self.app, self.principal.did, limit=limit,
                                                  after_id=int(cursor[0]) if cursor else None)
        pending = await queries.my_requests(self.app, self.principal.did) if cursor is None else []
        self.render_page("home.html", title="Your communities", communities=pending + mine,
                         notes=await self.app.page_notes("home", self.principal.did) if cursor is None else [],
                         notice=plain_notice(self.get_query_argument("done", "")),
                         more=f"/?{urlencode({'cursor': encode_cursor([more])})}" if more else None)


# ------------------------------------------------------------------ discover


class DiscoverPage(PageHandler):
    """GET /discover?q=...&cursor=...: search and list (private ones only for members)."""

    async def get(self) -> None:
        limit, cursor = self.page_params(1, "i")
        text = (self.get_query_argument("q", "") or "").strip()[:200]
        rows: list[Any] = await self.communities.search(
            text, user_did=self.principal.did if self.principal else None, limit=limit + 1,
            before_id=int(cursor[0]) if cursor else None)
        more = None
        if len(rows) > limit:
            params = {"cursor": encode_cursor([rows[limit - 1]["id"]])}
            if text:
                params["q"] = text
            more = "/discover?" + urlencode(params)
        self.render_page("discover.html", title="Discover communities" if not text else f"Search: {text}",
                         q=text, communities=[queries.card(self.app, r) for r in rows[:limit]], more=more,
                         paged=cursor is not None)


# ------------------------------------------------------------------ a community


class CommunityPage(PageHandler):
    """GET /c/<handle or DID>: the profile, members (search, pages) and my one action."""

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        viewer = self.principal.did if self.principal else None
        details = await self.communities.details(row, viewer, None)
        community = details["community"]
        status = details.get("membership") or {}
        members: dict[str, Any] | None = None
        search = (self.get_query_argument("search", "") or "").strip()
        if (await self.communities.visibility(row["did"], viewer)).members:
            limit, cursor = self.page_params(1, "i")
            members = await self.communities.list_members(
                row, limit=limit, after_id=int(cursor[0]) if cursor else None,
                search=self.get_query_argument("search", None), admin_view=False)
        more = None
        if members and members.get("cursor"):
            params = {"cursor": members["cursor"]}
            if search:
                params["search"] = search
            more = f"{community_path(row)}?{urlencode(params)}#members"
        done = self.get_query_argument("done", "")
        # the settings link, for anyone whose capabilities open a section of them
        mine = await self.communities.membership(row["did"], viewer) if viewer else None
        settings_link = bool(mine and settings_sections(mine, community_path(row)))
        ban = await self.communities.ban_of(row, viewer) if viewer and not status.get("isMember") else None
        notices = await self.app.community_notices(row["did"], viewer, admin=bool(status.get("isAdmin")))
        action = self.action(row, {**status, 'isBanned': ban is not None})
        if action in ("join", "request", None) and any(n.get("closed") for n in notices):
            action = "closed"   # a plugin's notice says it takes nobody now (an operator's suspension)
        self.render_page(
            "community.html", title=community["displayName"], community=community, settings_link=settings_link,
            ban=ban, notices=notices,
            path_of=community_path(row), action=action,
            membership=status,
            members=members["members"] if members else None, more=more, search=search,
            notice=plain_notice(done), paged=bool(self.get_query_argument("cursor", "")))

    def action(self, row: Any, status: dict[str, Any]) -> str | None:
        """The one right action for the viewer: join, request, withdraw, leave, or
        primary (must transfer first); None when signed out."""
        if self.principal is None:
            return None
        if status.get("isBanned"):
            return "banned"
        if status.get("isPrimaryAdmin"):
            return "primary"
        if status.get("isMember"):
            return "leave"
        if status.get("isPending"):
            return "withdraw"
        return "join" if row["type"] == "open" else "request"


class JoinAction(PageHandler):
    """POST /c/<ident>/join: write my membership record, then join or ask to join."""

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        assert self.principal is not None
        try:
            status, _ = await membership.join(self.app, row, self.principal)
            done = "joined" if status == 201 else "requested"
        except ApiError as exc:
            if exc.status != 409:  # already a member or pending: the page shows that state
                raise
            done = ""
        self.see_other(community_path(row) + (f"?done={done}" if done else ""))

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0]


class LeaveAction(PageHandler):
    """POST /c/<ident>/leave: leave, or withdraw my request (then delete my record)."""

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        assert self.principal is not None
        try:
            result = await membership.leave(self.app, row, self.principal)
            done = "withdrawn" if result["status"] == "withdrawn" else "left"
        except ApiError as exc:
            if exc.status != 404 or exc.code != "not_member":  # already gone: show the state
                raise
            done = ""
        self.see_other(community_path(row) + (f"?done={done}" if done else ""))

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0]


# ------------------------------------------------------------------ create


#: Form field -> the create body's field (validation messages name the latter).
_CREATE_FIELDS = {"displayName": "displayName", "description": "description", "type": "type",
                  "handle": "handle", "identifier": "identifier", "appPassword": "appPassword",
                  "recoveryKey": "recoveryKey"}

#: Validation messages in words for the form (the body field they are about -> sentence).
_CREATE_WORDS = {
    "displayName": "Enter a name for the community (at most 64 characters)",
    "description": "Shorten the description to 512 characters or fewer",
    "type": "Choose who can join",
    "handle": "Enter a handle such as bakers.example.com, or leave it empty",
    "identifier": "Enter the account's handle or DID",
    "appPassword": "Enter an app password for the account",
    "recoveryKey": "Paste the did:key of your key (it starts with did:key:z), or leave it empty",
}


#: Refusals of the account step that are about one field (the service's message is shown).
_CREATE_CODES = {"invalid_credentials": "appPassword", "app_password_required": "appPassword"}


class CreatePage(PageHandler):
    """GET /new: the form; POST /new: create, then go to the new community's page."""

    login_required = True

    def form_page(self) -> str:
        return "/new"

    async def get(self) -> None:
        assert self.principal is not None
        try:
            # an instance-wide policy (cr_check_action) is told before the form, not after it
            await self.app.check_action("community.create", self.principal.did)
        except ApiError as exc:
            if exc.status != 403:
                raise
            self.render_page("create_refused.html", title="You cannot create a community here", status=403,
                             message=exc.message)
            return
        cfg = self.app.config.plugin("communities")
        values = {"type": cfg.default_type, "account": "new" if cfg.allow_provision else "existing"}
        await self.show_form(FormErrors(values=values))

    async def show_form(self, errors: FormErrors, status: int = 200) -> None:
        assert self.principal is not None
        cfg = self.app.config.plugin("communities")
        title = "Create a community"
        self.render_page("create.html", title=("Error: " + title) if errors else title, status=status,
                         errors=errors, values=errors.values, notes=await self.app.page_notes("new", self.principal.did),
                         allow_provision=cfg.allow_provision, allow_bring_own=cfg.allow_bring_own)

    async def submit(self) -> None:
        assert self.principal is not None
        cfg = self.app.config.plugin("communities")
        form = self.form
        values = {k: form.get(k, "") for k in ("displayName", "description", "type", "handle",
                                                "identifier", "account", "recoveryKey")}
        errors = FormErrors(values=values)  # the app password is never shown again
        account = values["account"] if values["account"] in ("new", "existing") else ""
        if account == "new" and not cfg.allow_provision or account == "existing" and not cfg.allow_bring_own \
                or not account:
            errors.add("account", "Choose whether to create a new account or use one you have")
        body: dict[str, Any] = {"displayName": values["displayName"], "description": values["description"],
                                "type": values["type"] or cfg.default_type}
        if not values["displayName"].strip():
            errors.add("displayName", _CREATE_WORDS["displayName"])
        if account == "new" and values["handle"].strip():
            body["handle"] = values["handle"]
        if account == "new" and values["recoveryKey"].strip():
            body["recoveryKey"] = values["recoveryKey"].strip()
        if account == "existing":
            body["identifier"] = values["identifier"]
            body["appPassword"] = form.get("appPassword", "")
            if not values["identifier"].strip():
                errors.add("identifier", _CREATE_WORDS["identifier"])
            if not body["appPassword"].strip():
                errors.add("appPassword", _CREATE_WORDS["appPassword"])
        if errors:
            await self.show_form(errors, 400)
            return
        try:
            fields = await self.communities.create_fields(body)
            result = await self.communities.create(signed_in_actor(self), **fields)
        except ApiError as exc:
            if exc.status >= 500 and exc.code != "pds_error" or exc.status == 401:
                raise
            for detail in exc.details or []:
                name = detail.get("field") if isinstance(detail, dict) else None
                if name in _CREATE_FIELDS:
                    errors.add(name, _CREATE_WORDS[name])
            if exc.code in _CREATE_CODES:
                errors.add(_CREATE_CODES[exc.code], exc.message)
            if not errors:
                errors.general.append(exc.message)
            await self.show_form(errors, exc.status)
            return
        if "held" in result:   # waiting for an operator's approval: its state is on the home page
            self.see_other("/?done=creation_requested")
            return
        row = await self.communities.community_row(result["did"])
        if result.get("recoveryKey"):
            # The key's one showing: the POST's own answer, never cached, never in a URL.
            self.put_header("Cache-Control", "no-store")
            self.render_page("recovery_key.html", title="Keep the community's recovery key",
                             community=row, key=result["recoveryKey"],
                             onwards=community_path(row) + "?done=created")
            return
        self.see_other(community_path(row) + "?done=created")


# ------------------------------------------------------------------ sign out


class SignOutAction(PageHandler):
    """POST /signout: the form twin of the JSON POST /logout (same steps), then home."""

    async def submit(self) -> None:
        assert self.principal is not None and self.principal.session_id
        await self.app.oauth.sign_out(self.principal.session_id)
        await end_session(self.app, self.principal.session_id)
        clear_session_cookies(self)
        self.see_other("/?done=signed_out")


def routes() -> list[tuple]:
    from plugins.web import admin, developer, handover, invites, moderation, pictures
    return [
        (r"/", HomePage),
        (STATIC_PATTERN, StaticHandler),
        (PLUGIN_STATIC_PATTERN, StaticHandler),
        (r"/discover", DiscoverPage),
        (r"/new", CreatePage),
        (r"/signout", SignOutAction),
        (r"/c/" + IDENT, CommunityPage),
        (r"/c/" + IDENT + r"/join", JoinAction),
        (r"/c/" + IDENT + r"/leave", LeaveAction),
    ] + admin.routes() + moderation.routes() + invites.routes() + pictures.routes() + developer.routes() \
        + handover.routes()
