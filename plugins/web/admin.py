"""The admins' pages of a community: settings (join requests, profile), members
(promote, demote, remove) and handing over the primary admin role. Every form calls the
same service as the JSON admin routes (plugins/communities/web.py), acting as the
signed-in admin; the services check that they are one."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from daemon.plugin import ApiError, DID_PATTERN
from daemon.atproto.pds import image_url
from plugins.web.base import FormErrors, PageHandler
from plugins.web.shared import IDENT, NOTICES, community_path, community_row, signed_in_actor

#: Profile form field -> words for its validation message.
_PROFILE_WORDS = {
    "displayName": "Enter a name for the community (at most 64 characters)",
    "description": "Shorten the description to 512 characters or fewer",
    "type": "Choose who can join",
}


class SettingsPage(PageHandler):
    """GET /c/<ident>/settings: the admins' page: profile, and pending requests."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await self.communities.require_admin(self, row, self.principal.did)
        await show_settings(self, row, FormErrors(values=row_profile(row)))


async def show_settings(handler: PageHandler, row: Any, errors: FormErrors, status: int = 200) -> None:
    assert handler.principal is not None
    me = await handler.communities.require_admin(handler, row, handler.principal.did)
    pending = await handler.communities.pending_list(handler, row)
    more = None
    if pending.get("cursor"):
        more = f"{community_path(row)}/settings?{urlencode({'cursor': pending['cursor']})}#requests"
    title = f"Settings: {row['display_name']}"
    handler.render_page("settings.html", title=("Error: " + title) if errors else title, status=status,
                        community=row_profile(row), path_of=community_path(row), errors=errors,
                        values=errors.values, requests=pending["pendingMembers"], more=more,
                        notice=NOTICES.get(handler.get_query_argument("done", "")), is_primary=me.is_primary,
                        max_upload_mb=round(handler.app.config.plugin("communities").max_upload_bytes / 1_048_576, 1),
                        image_preview=True)


def row_profile(row: Any) -> dict[str, Any]:
    return {"displayName": row["display_name"], "description": row["description"] or "",
            "type": row["type"], "handle": row["handle"], "did": row["did"],
            "avatar": image_url(row, "avatar"), "banner": image_url(row, "banner")}


class ProfileAction(PageHandler):
    """POST /c/<ident>/settings/profile: name, description, type (then back, 303)."""

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0]

    async def submit(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        await self.communities.require_admin(self, row, self.principal.did)
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
            await show_settings(self, row, errors, 400)
            return
        self.see_other(f"{community_path(row)}/settings?done=profile")


class DecisionAction(PageHandler):
    """POST /c/<ident>/requests/<did>/(approve|reject): an admin answers a join request."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/requests/", 1)[0] + "/settings"

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
        self.see_other(f"{community_path(row)}/settings?done={done}#requests")




# ------------------------------------------------------------------ members


class MembersPage(PageHandler):
    """GET /c/<ident>/settings/members: members with the admin actions, searchable, paged."""

    login_required = True

    async def get(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        me = await self.communities.require_admin(self, row, self.principal.did)
        listed = await self.communities.list_members(self, row, self.principal.did, admin_view=False)
        search = (self.get_query_argument("search", "") or "").strip()
        more = None
        if listed.get("cursor"):
            params = {"cursor": listed["cursor"], **({"search": search} if search else {})}
            more = f"{community_path(row)}/settings/members?{urlencode(params)}"
        self.render_page("members.html", title=f"Members of {row['display_name']}",
                         community={"displayName": row["display_name"], "did": row["did"], "handle": row["handle"]},
                         path_of=community_path(row),
                         members=listed["members"], more=more, search=search,
                         i_am_primary=me.is_primary, total=row["member_count"],
                         paged=bool(self.get_query_argument("cursor", "")),
                         notice=NOTICES.get(self.get_query_argument("done", "")))


class MemberAction(PageHandler):
    """POST /c/<ident>/members/<did>/(promote|demote|remove): then back to the members page."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/members/", 1)[0] + "/settings/members"

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
            reason = self.form.get("reason", "").strip()[:1000] or None
            await self.communities.remove(row, member_did, me, reason)
        done = {"promote": "promoted", "demote": "demoted", "remove": "removed"}[action]
        self.see_other(f"{community_path(row)}/settings/members?done={done}")


# ------------------------------------------------------------------ transfer


class TransferPage(PageHandler):
    """GET /c/<ident>/settings/transfer?to=<did>: "Make <name> the primary admin?" with
    one button; POST hands the role over (primary admin only, the service checks)."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0] + "/members"

    async def get(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        me = await self.communities.require_admin(self, row, self.principal.did)
        if not me.is_primary:
            raise ApiError(403, "not_primary_admin", "Only the primary admin may hand the role over.")
        target = await self.member_named(row, self.get_query_argument("to", "") or "")
        self.render_page("transfer.html", title="Hand over the primary admin role",
                         community={"displayName": row["display_name"]}, path_of=community_path(row),
                         target=target)

    async def submit(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        new_owner = self.communities.path_did(self.form.get("newOwnerDid", ""))
        await self.communities.transfer(row, new_owner, signed_in_actor(self))
        self.see_other(f"{community_path(row)}?done=transferred")

    async def member_named(self, row: Any, did: str) -> dict[str, Any]:
        from plugins.web.queries import member_profile
        member = await member_profile(self.app.db, row["did"], self.communities.path_did(did))
        if member is None:
            raise ApiError(404, "not_member", "That person is not a member of this community.")
        return member


# ------------------------------------------------------------------ audit log


class AuditPage(PageHandler):
    """GET /c/<ident>/settings/audit: who did what, newest first, older by cursor."""

    login_required = True

    async def get(self, ident: str) -> None:
        assert self.principal is not None
        from plugins.web.queries import audit_entries

        row = await community_row(self, ident)
        await self.communities.require_admin(self, row, self.principal.did)
        log = await self.communities.audit_log(self, row)
        more = None
        if log.get("cursor"):
            more = f"{community_path(row)}/settings/audit?{urlencode({'cursor': log['cursor']})}"
        self.render_page("audit.html", title=f"History of {row['display_name']}",
                         community={"displayName": row["display_name"]}, path_of=community_path(row),
                         entries=await audit_entries(self.app.db, log["entries"]), more=more,
                         paged=bool(self.get_query_argument("cursor", "")))


# ------------------------------------------------------------------ trusted apps


APP_ID = r"(app_[0-9a-f]{16})"


class AppsPage(PageHandler):
    """GET /c/<ident>/settings/apps: the trusted apps, revoke buttons, and a form to grant
    an app (by its id) visibility, or management with `manage`; POST grants."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path

    async def get(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        await self.communities.require_admin(self, row, self.principal.did)
        await self.show(row, FormErrors())

    async def show(self, row: Any, errors: FormErrors, status: int = 200) -> None:
        from plugins.web.queries import trusted_apps
        title = f"Apps of {row['display_name']}"
        self.render_page("apps.html", title=("Error: " + title) if errors else title, status=status,
                         community={"displayName": row["display_name"], "private": row["type"] == "private"},
                         path_of=community_path(row), apps=await trusted_apps(self.app.db, row),
                         errors=errors, values=errors.values,
                         notice=NOTICES.get(self.get_query_argument("done", "")))

    async def submit(self, ident: str) -> None:
        assert self.principal is not None
        import re

        from store import apps as apps_store

        row = await community_row(self, ident)
        await self.communities.require_admin(self, row, self.principal.did)
        app_id = self.form.get("appId", "").strip()
        manage = self.form.get("manage") == "yes"
        errors = FormErrors(values={"appId": app_id, "manage": "yes" if manage else ""})
        if not re.fullmatch(APP_ID, app_id):
            errors.add("appId", "Enter an app id: app_ followed by 16 letters and digits (0-9, a-f)")
        else:
            target = await apps_store.get_app(self.app.db, app_id)
            if target is None or not target["active"]:
                errors.add("appId", f"There is no active app {app_id} on this service")
        if errors:
            await self.show(row, errors, 400)
            return
        await self.communities.allow_app(row, app_id, signed_in_actor(self), True, manage=manage)
        self.see_other(f"{community_path(row)}/settings/apps?done=app_allowed")


class AppRevokeAction(PageHandler):
    """POST /c/<ident>/apps/<app id>/revoke: take an app's grant back."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/apps/", 1)[0] + "/settings/apps"

    async def submit(self, ident: str, app_id: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        await self.communities.allow_app(row, app_id, signed_in_actor(self), False)
        self.see_other(f"{community_path(row)}/settings/apps?done=app_revoked")


# ------------------------------------------------------------------ delete


class DeletePage(PageHandler):
    """GET /c/<ident>/settings/delete: what deleting does, and a form that asks for the
    community's handle; POST deletes (primary admin only, the service checks)."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path

    async def get(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        me = await self.communities.require_admin(self, row, self.principal.did)
        if not me.is_primary:
            raise ApiError(403, "not_primary_admin", "Only the primary admin may delete the community.")
        self.show(row, FormErrors())

    def show(self, row: Any, errors: FormErrors, status: int = 200) -> None:
        title = f"Delete {row['display_name']}"
        self.render_page("delete.html", title=("Error: " + title) if errors else title, status=status,
                         community={"displayName": row["display_name"], "handle": row["handle"],
                                    "brought": row["account_kind"] == "brought"},
                         path_of=community_path(row), errors=errors, values=errors.values,
                         deletes_records=self.app.config.plugin("communities").delete_pds_records)

    async def submit(self, ident: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        typed = self.form.get("confirmHandle", "").strip().lstrip("@").lower()
        if typed != row["handle"]:
            errors = FormErrors(values={"confirmHandle": self.form.get("confirmHandle", "")})
            errors.add("confirmHandle", f"Type the community's handle, {row['handle']}, to delete it")
            self.show(row, errors, 400)
            return
        await self.communities.delete(row, signed_in_actor(self))
        self.see_other("/?done=deleted")


def routes() -> list[tuple]:
    base = r"/c/" + IDENT
    return [
        (base + r"/settings", SettingsPage),
        (base + r"/settings/profile", ProfileAction),
        (base + r"/settings/members", MembersPage),
        (base + r"/settings/transfer", TransferPage),
        (base + r"/settings/audit", AuditPage),
        (base + r"/settings/apps", AppsPage),
        (base + r"/apps/" + APP_ID + r"/revoke", AppRevokeAction),
        (base + r"/settings/delete", DeletePage),
        (base + r"/requests/" + DID_PATTERN + r"/(approve|reject)", DecisionAction),
        (base + r"/members/" + DID_PATTERN + r"/(promote|demote|remove)", MemberAction),
    ]
