"""The settings area of a community (docs/web.md, "The settings area"): general
(profile), pictures, requests, members (promote, demote, remove, roles, ban), the
primary-admin hand-over, history, trusted apps and the danger zone. Each page opens for
the capability it needs (plugins/web/sections.py), and every form calls the same service
as the JSON routes (plugins/communities), acting as the signed-in person; the services
check again."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from daemon.plugin import ApiError, DID_PATTERN
from plugins.web import sections
from plugins.web.base import FormErrors, PageHandler
from plugins.web.sections import ADMIN, PRIMARY
from plugins.web.shared import IDENT, community_path, community_row, notice_of, signed_in_actor

#: Profile form field -> words for its validation message.
_PROFILE_WORDS = {
    "displayName": "Enter a name for the community (at most 64 characters)",
    "description": "Shorten the description to 512 characters or fewer",
    "type": "Choose who can join",
}


async def section_page(handler: PageHandler, row: Any, key: str, *needs: str, doing: str) -> tuple[Any, dict]:
    """The person's status (403 page unless it holds one of `needs`) and what every
    settings page's layout needs: the sections they may open, the community's name."""
    status = await sections.require(handler, row, *needs, doing=doing)
    path_of = community_path(row)
    return status, {"sections": sections.settings_sections(status, path_of, key), "path_of": path_of,
                    "layout_community": community_names(row),
                    "notice": await notice_of(handler, row),
                    # what plugins say of the community (an operator's suspension, and how to appeal)
                    "notices": await handler.app.community_notices(row["did"], handler.principal.did,
                                                                   admin=status.is_admin),
                    # for the plugins' settings links (slot community.settings): what the person holds
                    "holds": lambda capability: handler.communities.status_holds(status, capability)}


async def plugin_settings_layout(handler: Any, community_did: str) -> dict[str, Any]:
    """`cr_settings_layout`: what settings_base.html needs for a plugin's page of the
    community (no built-in section is current: the plugin's link in the menu is)."""
    communities = handler.app.communities
    row = await communities.visible_row(community_did, None)
    status = await communities.membership(community_did, handler.principal.did) if handler.principal else None
    path_of = community_path(row)
    return {"sections": sections.settings_sections(status, path_of), "path_of": path_of,
            "layout_community": community_names(row),
            "holds": lambda capability: communities.status_holds(status, capability)}


def handle_confirmed(form: Any, row: Any) -> bool:
    """Whether a destructive form's ``confirmHandle`` (_confirm_handle.html) is the community's
    handle (with or without @, any case)."""
    return form.get("confirmHandle", "").strip().lstrip("@").lower() == row["handle"]


def community_names(row: Any, **more: Any) -> dict[str, Any]:
    return {"displayName": row["display_name"], "handle": row["handle"], "did": row["did"],
            "type": row["type"], **more}


class SettingsPage(PageHandler):
    """GET /c/<ident>/settings: General (the profile form), for admins. Anyone else whose
    roles open a section is sent to the first of them; nobody else gets in (403)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        status = await self.communities.membership(row["did"], self.principal.did)
        if not status.is_admin:
            opened = sections.settings_sections(status, community_path(row))
            if not opened:
                raise sections.forbidden((ADMIN,), "open the settings of this community")
            self.redirect(opened[0]["href"], status=303)
            return
        await show_general(self, row, FormErrors(values=row_profile(self, row)))


async def show_general(handler: PageHandler, row: Any, errors: FormErrors, status: int = 200) -> None:
    _, layout = await section_page(handler, row, "general", ADMIN, doing="change the profile")
    title = f"Settings: {row['display_name']}"
    handler.render_page("settings.html", title=("Error: " + title) if errors else title, status=status,
                        community=row_profile(handler, row), errors=errors, values=errors.values, **layout)


async def show_pictures(handler: PageHandler, row: Any, errors: FormErrors, status: int = 200) -> None:
    _, layout = await section_page(handler, row, "pictures", ADMIN, doing="change the pictures")
    title = f"Pictures of {row['display_name']}"
    handler.render_page("pictures.html", title=("Error: " + title) if errors else title, status=status,
                        community=row_profile(handler, row), errors=errors, values=errors.values,
                        max_upload_mb=round(handler.app.config.plugin("communities").max_upload_bytes / 1_048_576, 1),
                        image_preview=True, **layout)


def row_profile(handler: PageHandler, row: Any) -> dict[str, Any]:
    image_url = handler.communities.image_url
    return {"displayName": row["display_name"], "description": row["description"] or "",
            "type": row["type"], "handle": row["handle"], "did": row["did"],
            "avatar": image_url(row, "avatar"), "banner": image_url(row, "banner")}


class PicturesPage(PageHandler):
    """GET /c/<ident>/settings/pictures: the avatar and banner forms (admins)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await show_pictures(self, row, FormErrors())


class ProfileAction(PageHandler):
    """POST /c/<ident>/settings/profile: name, description, type (then back, 303)."""

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0]

    async def submit(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        await sections.require(self, row, ADMIN, doing="change the profile")
        values = {k: self.form.get(k, "") for k in ("displayName", "description", "type")}
        errors = FormErrors(values=values)
        if not values["displayName"].strip():
            errors.add("displayName", _PROFILE_WORDS["displayName"])
        if not errors:
            try:
                fields = self.communities.community_fields(values, required=True)
                await self.communities.update_profile(row, signed_in_actor(self), **fields)
            except ApiError as exc:
                if exc.status != 400:
                    raise
                for detail in exc.details or []:
                    name = detail.get("field") if isinstance(detail, dict) else None
                    if name in _PROFILE_WORDS:
                        errors.add(name, _PROFILE_WORDS[name])
                if not errors:
                    errors.general.append(exc.message)
        if errors:
            await show_general(self, row, errors, 400)
            return
        self.see_other(f"{community_path(row)}/settings?done=profile")


# ------------------------------------------------------------------ requests


class RequestsPage(PageHandler):
    """GET /c/<ident>/settings/requests: people asking to join (members.approve), with
    Approve, Decline (an optional reason) and, for members.ban, Ban."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        status, layout = await section_page(self, row, "requests", "members.approve",
                                            doing="answer requests to join")
        limit, cursor = self.page_params(1, "i")
        pending = await self.communities.pending_list(row, limit=limit, after_id=int(cursor[0]) if cursor else None)
        more = None
        if pending.get("cursor"):
            more = f"{community_path(row)}/settings/requests?{urlencode({'cursor': pending['cursor']})}"
        self.render_page("requests.html", title=f"Requests to join {row['display_name']}",
                         community=community_names(row), requests=pending["pendingMembers"], more=more,
                         may_ban=status.holds("members.ban"), **layout)


class DecisionAction(PageHandler):
    """POST /c/<ident>/requests/<did>/(approve|reject): answer a join request."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/requests/", 1)[0] + "/settings/requests"

    async def submit(self, ident: str, member: str, decision: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        member_did = self.communities.path_did(member)
        me = signed_in_actor(self)
        try:
            if decision == "approve":
                await self.communities.approve(row, member_did, me)
            else:
                reason = self.form.get("reason", "").strip()[:1000] or None
                await self.communities.reject(row, member_did, me, reason)
            done = "approved" if decision == "approve" else "rejected"
        except ApiError as exc:
            # answered already (by another admin, or withdrawn): the page shows what is left
            if exc.code not in ("no_pending_request", "already_member"):
                raise
            done = "gone"
        self.see_other(f"{community_path(row)}/settings/requests?{urlencode({'done': done, 'who': member_did})}")


# ------------------------------------------------------------------ members


def member_actions(me: Any, my_did: str, member: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    """What the signed-in person may do to `member`, as the services' rules say it
    (capabilities.py, membership.py, bans.py); the services check again on the post."""
    target_admin, target_primary = member["isAdmin"], member["isPrimaryAdmin"]
    held = [r for r in member["roles"] if r not in ("admin", "member")]
    myself = member["did"] == my_did
    return {
        "promote": me.is_admin and not myself and not target_admin,
        "demote": me.is_admin and not myself and target_admin and not target_primary,
        "transfer": me.is_primary and not myself,
        # admins hold every capability already: roles are for the other members
        "assign": [r for r in roles if r not in held] if me.is_admin and not target_admin else [],
        "unassign": held if me.is_admin else [],
        "remove": me.holds("members.remove") and not myself and not target_primary
                  and (me.is_admin or not target_admin),
        "ban": me.holds("members.ban") and not myself and not target_primary
               and (me.is_primary or not target_admin),
    }


class MembersPage(PageHandler):
    """GET /c/<ident>/settings/members: members with role badges and one actions menu
    each, searchable, paged (members.remove or members.ban; admins also manage roles)."""

    login_required = True

    async def get(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        me, layout = await section_page(self, row, "members", "members.remove", "members.ban",
                                        doing="manage the members")
        limit, cursor = self.page_params(1, "i")
        listed = await self.communities.list_members(row, limit=limit, after_id=int(cursor[0]) if cursor else None,
                                                     search=self.get_query_argument("search", None), admin_view=False)
        roles = [r["name"] for r in (await self.communities.list_roles(row))["roles"]
                 if r["name"] not in ("admin", "member")]
        search = (self.get_query_argument("search", "") or "").strip()
        more = None
        if listed.get("cursor"):
            params = {"cursor": listed["cursor"], **({"search": search} if search else {})}
            more = f"{community_path(row)}/settings/members?{urlencode(params)}"
        members = [{**m, "badges": [r for r in m["roles"] if r not in ("admin", "member")],
                    "actions": member_actions(me, self.principal.did, m, roles)} for m in listed["members"]]
        for m in members:
            m["has_actions"] = any(m["actions"].values())
        self.render_page("members.html", title=f"Members of {row['display_name']}",
                         community=community_names(row), members=members,
                         more=more, search=search, total=row["member_count"],
                         paged=bool(self.get_query_argument("cursor", "")), **layout)


class MemberAction(PageHandler):
    """POST /c/<ident>/members/<did>/(promote|demote|remove): then back to the members
    page. GET …/remove is the confirmation page (with the optional reason)."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/members/", 1)[0] + "/settings/members"

    async def get(self, ident: str, member: str, action: str) -> None:
        if action != "remove":
            raise ApiError(405, "method_not_allowed", "Use the members page.")
        row = await community_row(self, ident)
        _, layout = await section_page(self, row, "members", "members.remove", doing="remove members")
        target = await member_named(self, row, member)
        self.render_page("confirm_remove.html", title=f"Remove {target['name']}?",
                         community=community_names(row), target=target, errors=FormErrors(), values={},
                         **layout)

    async def submit(self, ident: str, member: str, action: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        member_did = self.communities.path_did(member)
        me = signed_in_actor(self)
        if action == "promote":
            await self.communities.promote(row, member_did, me)
        elif action == "demote":
            await self.communities.demote(row, member_did, me)
        else:
            reason = self.form.get("reason", "").strip()
            if len(reason) > 1000:
                _, layout = await section_page(self, row, "members", "members.remove", doing="remove members")
                errors = FormErrors(values={"reason": reason})
                errors.add("reason", "Shorten the reason to 1,000 characters or fewer")
                self.render_page("confirm_remove.html", title="Error: Remove a member", status=400,
                                 community=community_names(row), target=await member_named(self, row, member),
                                 errors=errors, values=errors.values, **layout)
                return
            await self.communities.remove(row, member_did, me, reason or None)
        done = {"promote": "promoted", "demote": "demoted", "remove": "removed"}[action]
        self.see_other(f"{community_path(row)}/settings/members?{urlencode({'done': done, 'who': member_did})}")


async def member_named(handler: PageHandler, row: Any, did: str) -> dict[str, Any]:
    """A member's names for a confirmation ("Remove <name>?"); 404 page if not a member."""
    from plugins.web.queries import member_profile
    member = await member_profile(handler.app, row["did"], handler.communities.path_did(did))
    if member is None:
        raise ApiError(404, "not_member", "That person is not a member of this community.")
    return member


# ------------------------------------------------------------------ transfer


class TransferPage(PageHandler):
    """GET /c/<ident>/settings/transfer?to=<did>: "Make <name> the primary admin?" with
    one button; POST hands the role over (primary admin only, the service checks)."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0] + "/members"

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        _, layout = await section_page(self, row, "danger", PRIMARY, doing="hand over the primary admin role")
        target = await member_named(self, row, self.get_query_argument("to", "") or "")
        self.render_page("transfer.html", title="Hand over the primary admin role",
                         community=community_names(row), target=target, **layout)

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        new_owner = self.communities.path_did(self.form.get("newOwnerDid", ""))
        await self.communities.transfer(row, new_owner, signed_in_actor(self))
        self.see_other(f"{community_path(row)}?done=transferred")


# ------------------------------------------------------------------ audit log


class AuditPage(PageHandler):
    """GET /c/<ident>/settings/audit: the history in sentences, newest first (audit.read),
    filtered by kind (`kind`), person (`person`: a handle or DID, as actor or target) and
    days (`from`, `to`, inclusive, UTC); older entries by `cursor`. Refused actions are a
    kind of their own, for admins only (`kind=denied`)."""

    login_required = True
    PAGE = 30

    async def get(self, ident: str) -> None:
        import datetime as dt

        from daemon.plugin import encode_cursor
        from daemon.plugin.http import decode_cursor
        from plugins.web.queries import AUDIT_KINDS, audit_entries, did_of_person

        row = await community_row(self, ident)
        me, layout = await section_page(self, row, "audit", "audit.read", doing="read the history")
        arg = lambda name: (self.get_query_argument(name, "") or "").strip()[:253]  # noqa: E731
        values = {"kind": arg("kind"), "person": arg("person"), "from": arg("from"), "to": arg("to")}
        errors = FormErrors(values=values)
        kinds = [(k, label) for k, (label, _) in AUDIT_KINDS.items()]
        if me.is_admin:
            kinds.append(("denied", "Refused actions"))
        if values["kind"] and values["kind"] not in dict(kinds):
            if values["kind"] == "denied":
                raise sections.forbidden((ADMIN,), "see the refused actions")
            errors.add("kind", "Choose a kind from the list")
        person = None
        if values["person"]:
            person = await did_of_person(self.app, values["person"])
            if person is None:
                errors.add("person", "No one with that handle has been seen here: enter a handle or DID")
        bounds: dict[str, str | None] = {"from": None, "to": None}
        for key in ("from", "to"):
            if values[key]:
                try:
                    day = dt.date.fromisoformat(values[key]) + dt.timedelta(days=1 if key == "to" else 0)
                    bounds[key] = day.isoformat() + "T00:00:00.000Z"
                except ValueError:
                    errors.add(key, "Enter a date such as 2026-11-23")
        if bounds["from"] and bounds["to"] and bounds["from"] >= bounds["to"]:
            errors.add("to", "The last day must not be before the first")
        cursor = self.get_query_argument("cursor", "") or ""
        before = decode_cursor(cursor, 1, "i")[0] if cursor else None
        rows: list[Any] = []
        if not errors:
            kind = values["kind"]
            rows = await self.communities.audit_rows(
                row["did"], actions=AUDIT_KINDS[kind][1] if kind in AUDIT_KINDS else None, denied=kind == "denied",
                person=person, since=bounds["from"], until=bounds["to"], before_id=before, limit=self.PAGE + 1)
        more = None
        if len(rows) > self.PAGE:
            params = {k: v for k, v in values.items() if v} | {"cursor": encode_cursor([rows[self.PAGE - 1]["id"]])}
            more = f"{community_path(row)}/settings/audit?{urlencode(params)}"
        title = f"History of {row['display_name']}"
        self.render_page("audit.html", title=("Error: " + title) if errors else title,
                         status=400 if errors else 200, community=community_names(row), errors=errors,
                         values=values, kinds=kinds,
                         entries=await audit_entries(self.app, [self.communities.audit_entry_json(r) for r in rows[:self.PAGE]]),
                         more=more, paged=bool(cursor), filtered=any(values.values()), **layout)


# ------------------------------------------------------------------ trusted apps


APP_ID = r"(app_[0-9a-f]{16})"


class AppsPage(PageHandler):
    """GET /c/<ident>/settings/apps: the trusted apps, revoke buttons, and a form to grant
    an app (by its id) visibility, or management with `manage`; POST grants (admins)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await self.show(row, FormErrors())

    async def show(self, row: Any, errors: FormErrors, status: int = 200) -> None:
        from plugins.web.queries import trusted_apps
        _, layout = await section_page(self, row, "apps", ADMIN, doing="manage the trusted apps")
        title = f"Apps of {row['display_name']}"
        self.render_page("apps.html", title=("Error: " + title) if errors else title, status=status,
                         community=community_names(row, private=row["type"] == "private"),
                         apps=await trusted_apps(self.app, row),
                         errors=errors, values=errors.values, **layout)

    async def submit(self, ident: str) -> None:
        import re

        from daemon.plugin.storage import AppsTable

        row = await community_row(self, ident)
        await sections.require(self, row, ADMIN, doing="manage the trusted apps")
        app_id = self.form.get("appId", "").strip()
        manage = self.form.get("manage") == "yes"
        errors = FormErrors(values={"appId": app_id, "manage": "yes" if manage else ""})
        if not re.fullmatch(APP_ID, app_id):
            errors.add("appId", "Enter an app id: app_ followed by 16 letters and digits (0-9, a-f)")
        else:
            target = await AppsTable.get(self.app.db, app_id)
            if target is None or not target["active"]:
                errors.add("appId", f"There is no active app {app_id} on this service")
        if errors:
            await self.show(row, errors, 400)
            return
        await self.communities.allow_app(row, app_id, signed_in_actor(self), True, manage=manage)
        self.see_other(f"{community_path(row)}/settings/apps?{urlencode({'done': 'app_allowed', 'app': app_id})}")


class AppRevokeAction(PageHandler):
    """POST /c/<ident>/apps/<app id>/revoke: take an app's grant back."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/apps/", 1)[0] + "/settings/apps"

    async def submit(self, ident: str, app_id: str) -> None:
        row = await community_row(self, ident)
        await self.communities.allow_app(row, app_id, signed_in_actor(self), False)
        self.see_other(f"{community_path(row)}/settings/apps?{urlencode({'done': 'app_revoked', 'app': app_id})}")


# ------------------------------------------------------------------ danger zone and delete


class DangerPage(PageHandler):
    """GET /c/<ident>/settings/danger: what cannot be undone, each behind its own
    confirmation page: handing over the primary admin role, deleting (admins read it;
    the primary admin may act)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        me, layout = await section_page(self, row, "danger", ADMIN, doing="open the danger zone")
        self.render_page("danger.html", title=f"Danger zone of {row['display_name']}",
                         community=community_names(row), is_primary=me.is_primary, **layout)


class DeletePage(PageHandler):
    """GET /c/<ident>/settings/delete: what deleting does, and a form that asks for the
    community's handle; POST deletes (primary admin only, the service checks)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await self.show(row, FormErrors())

    async def show(self, row: Any, errors: FormErrors, status: int = 200) -> None:
        _, layout = await section_page(self, row, "danger", PRIMARY, doing="delete the community")
        title = f"Delete {row['display_name']}"
        self.render_page("delete.html", title=("Error: " + title) if errors else title, status=status,
                         community=community_names(row, brought=row["account_kind"] == "brought"),
                         errors=errors, values=errors.values,
                         deletes_records=self.app.config.plugin("communities").delete_pds_records, **layout)

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        if not handle_confirmed(self.form, row):
            errors = FormErrors(values={"confirmHandle": self.form.get("confirmHandle", "")})
            errors.add("confirmHandle", f"Type the community's handle, {row['handle']}, to delete it")
            await self.show(row, errors, 400)
            return
        await self.communities.delete(row, signed_in_actor(self))
        self.see_other("/?done=deleted")


class MovePage(PageHandler):
    """GET /c/<ident>/settings/move: moving the community's account to another PDS (what
    moves, what it needs), or, while it moves, its progress (the page refreshes itself, with
    or without JavaScript); POST begins it (primary admin only, the service checks)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await self.show(row, FormErrors())

    async def show(self, row: Any, errors: FormErrors, status: int = 200) -> None:
        _, layout = await section_page(self, row, "danger", PRIMARY, doing="move the community to another PDS")
        progress = await self.communities.move_progress(row)
        moving = progress["state"] == "moving"
        title = f"Moving {row['display_name']}" if moving else f"Move {row['display_name']} to another PDS"
        if moving:
            self.put_header("Refresh", "3")  # followed without JavaScript too
        self.render_page("move.html", title=("Error: " + title) if errors else title, status=status,
                         community=community_names(row, brought=row["account_kind"] == "brought"),
                         progress=progress, moving=moving, moved=self.get_query_argument("done", "") == "moved",
                         errors=errors, values=errors.values, **layout)

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        values = {k: self.form.get(k, "").strip() for k in ("pdsUrl", "inviteCode", "confirmHandle")}
        errors = FormErrors(values=values)
        if not values["pdsUrl"].startswith(("https://", "http://")):
            errors.add("pdsUrl", "Enter the new PDS's address, such as https://pds.example.com")
        if not handle_confirmed(self.form, row):
            errors.add("confirmHandle", f"Type the community's handle, {row['handle']}, to move it")
        if errors:
            await self.show(row, errors, 400)
            return
        try:
            await self.communities.move(row, signed_in_actor(self), values["pdsUrl"].rstrip("/"),
                                        invite_code=values["inviteCode"] or None)
        except ApiError as exc:
            if exc.status >= 500 and exc.code not in ("pds_error", "writes_in_progress") or exc.status in (401, 403):
                raise
            errors.add("inviteCode" if "invite" in exc.message.lower() else "pdsUrl", exc.message)
            await self.show(row, errors, exc.status)
            return
        self.see_other(f"{community_path(row)}/settings/move")


def routes() -> list[tuple]:
    base = r"/c/" + IDENT
    return [
        (base + r"/settings", SettingsPage),
        (base + r"/settings/profile", ProfileAction),
        (base + r"/settings/pictures", PicturesPage),
        (base + r"/settings/requests", RequestsPage),
        (base + r"/settings/members", MembersPage),
        (base + r"/settings/transfer", TransferPage),
        (base + r"/settings/audit", AuditPage),
        (base + r"/settings/apps", AppsPage),
        (base + r"/apps/" + APP_ID + r"/revoke", AppRevokeAction),
        (base + r"/settings/danger", DangerPage),
        (base + r"/settings/delete", DeletePage),
        (base + r"/settings/move", MovePage),
        (base + r"/requests/" + DID_PATTERN + r"/(approve|reject)", DecisionAction),
        (base + r"/members/" + DID_PATTERN + r"/(promote|demote|remove)", MemberAction),
    ]
