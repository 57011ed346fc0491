"""Invite links in the browser (docs/web.md, "Invite links"): the page an invite's `url`
opens, `/invite/<code>` (the community's preview; signed out, the sign-in form that comes
back here; signed in, one Join button), and the admins' and moderators' invites page of a
community (create, list, revoke). Every step calls the communities plugin's invite
service (`app.communities`), the same functions the JSON routes call."""

from __future__ import annotations

from typing import Any

from daemon.plugin import ApiError, iso
from plugins.web.base import FormErrors, PageHandler
from plugins.web.developer import when
from plugins.web.shared import IDENT, community_path, community_row, signed_in_actor

#: An invite code in a path (as the API's: at most 64 URL-safe characters).
CODE = r"([A-Za-z0-9_-]{1,64})"
#: An invite's list id in a path.
INVITE_ID = r"(inv_[0-9]{1,18})"

#: Why an invite cannot be used, in words: (heading, what to do).
INVITE_REFUSALS = {
    "invite_not_found": ("This invite link does not work",
                         "There is no invite at this address. Check that the whole link was copied, "
                         "or ask the person who sent it for a new one."),
    "invite_expired": ("This invite has expired",
                       "The invite was valid for a limited time, which is over. Ask the person who "
                       "sent it for a new one."),
    "invite_exhausted": ("This invite has been used up",
                         "The invite could be used a limited number of times, and all of them are "
                         "taken. Ask the person who sent it for a new one."),
    "invite_revoked": ("This invite was withdrawn",
                       "An admin of the community revoked this invite, so it no longer lets anyone "
                       "in. Ask them for a new one if you still want to join."),
}

MAX_DAYS = 365
PAGE_SIZE = 50


class InvitePage(PageHandler):
    """GET /invite/<code>: what the invite leads to (no roster) and the one right step;
    POST joins with it, then the community's page (`?done=joined`). Unknown, expired, used
    up or revoked: an error page that says which (404 / 410). Guessing codes costs the
    per-address `rate_limits.invites` budget, as the JSON preview does (sign-in has its own)."""

    rate_limit = "invites"

    async def member_of_spent_invite(self, code: str, exc: ApiError) -> Any:
        """The community of an invite that no longer works, when the signed-in person is
        already its member (they used it, or joined otherwise): they are told that, not
        that the invite is used up. None otherwise."""
        if exc.status != 410 or self.principal is None:
            return None
        row = await self.communities.invite_community(code)
        if row is None or not (await self.communities.membership(row["did"], self.principal.did)).is_member:
            return None
        return row

    async def get(self, code: str) -> None:
        try:
            invite, row, preview = await self.communities.invite_preview(code)
        except ApiError as exc:
            row = await self.member_of_spent_invite(code, exc)
            if row is None:
                raise
            self.put_header("Cache-Control", "no-store")
            self.render_page("invite.html", title=f"Invitation to {row['display_name']}",
                             community={"displayName": row["display_name"], "handle": row["handle"],
                                        "type": row["type"], "memberCount": row["member_count"],
                                        "avatar": self.communities.image_url(row, "avatar"),
                                        "description": row["description"]},
                             invite=None, path_of=community_path(row), when=when, is_member=True,
                             is_pending=False, banned=None)
            return
        status = await self.communities.membership(row["did"], self.principal.did) if self.principal else None
        banned = await self.communities.ban_of(row, self.principal.did) if self.principal else None
        self.put_header("Cache-Control", "no-store")  # the code is in the URL: keep it out of caches
        self.render_page("invite.html", title=f"Invitation to {row['display_name']}",
                         sign_in_form=self.principal is None, next=self.request.path,
                         community=preview["community"], invite=preview["invite"],
                         path_of=community_path(row), when=when,
                         is_member=bool(status and status.is_member),
                         is_pending=bool(status and status.is_pending), banned=banned)

    async def submit(self, code: str) -> None:
        assert self.principal is not None
        try:
            invite, row, _ = await self.communities.invite_preview(code)
        except ApiError as exc:
            spent = await self.member_of_spent_invite(code, exc)
            if spent is None:
                raise
            self.see_other(community_path(spent))  # already a member: nothing to count
            return
        try:
            status, _ = await self.communities.browser_join(row, self.principal, invite=invite)
        except ApiError as exc:
            if exc.code != "already_member":
                raise
            self.see_other(community_path(row))  # the page says "Member"; no use was counted
            return
        self.see_other(community_path(row) + ("?done=joined" if status == 201 else "?done=requested"))

    def render_error(self, status: int, exc: BaseException | None) -> None:
        code = exc.code if isinstance(exc, ApiError) else None
        if code in INVITE_REFUSALS:
            heading, advice = INVITE_REFUSALS[code]
            self.render_page("error.html", title=heading, status=status, kind="invite", heading=heading,
                             message=advice, back="/")
            return
        if code == "banned":
            heading = "You cannot join this community"
            until = getattr(exc, "expires_at", None)
            message = ("The admins of this community have banned you, so an invite cannot let you in"
                       + (f" until {when(until)}." if until else "."))
            self.render_page("error.html", title=heading, status=status, kind="invite", heading=heading,
                             message=message, back="/")
            return
        super().render_error(status, exc)


def invite_row(invite: dict[str, Any], now: str) -> dict[str, Any]:
    """An invite of the list as the page shows it: its state in words."""
    if invite["revokedAt"]:
        state = "Revoked"
    elif invite["expiresAt"] and invite["expiresAt"] <= now:
        state = "Expired"
    elif invite["maxUses"] is not None and invite["uses"] >= invite["maxUses"]:
        state = "Used up"
    else:
        state = "Active"
    return {**invite, "state": state}


class InvitesPage(PageHandler):
    """GET /c/<ident>/settings/invites: the community's invites (uses, expiry, state) with
    Revoke, and the form to make one; POST makes one and answers with its link, shown this
    once (200, `no-store`: the code never goes in a URL). For holders of `invites.manage`
    (admins, moderators); the service checks and audits a refusal."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await self.show(row, FormErrors(values={"maxUses": "", "days": "7", "note": ""}))

    async def show(self, row: Any, errors: FormErrors, status: int = 200,
                   created: dict[str, Any] | None = None) -> None:
        cursor = self.get_query_argument("before", "") or ""
        before = int(cursor[4:]) if cursor.startswith("inv_") and cursor[4:].isdigit() else None
        listed = await self.communities.list_invites(row, signed_in_actor(self), limit=PAGE_SIZE + 1,
                                                     before_id=before)
        now = self.app.clock.iso_now()
        more = None
        if len(listed) > PAGE_SIZE:
            more = f"{community_path(row)}/settings/invites?before={listed[PAGE_SIZE - 1]['id']}#invites"
        from plugins.web.admin import section_page
        me, layout = await section_page(self, row, "invites", "invites.manage", doing="manage invite links")
        title = f"Invites of {row['display_name']}"
        if created is not None:
            title = "New invite link"
            self.put_header("Cache-Control", "no-store")
        self.render_page("invites.html", title=("Error: " + title) if errors else title, status=status,
                         community={"displayName": row["display_name"], "type": row["type"]},
                         is_admin=me.is_admin, errors=errors,
                         values=errors.values, invites=[invite_row(i, now) for i in listed[:PAGE_SIZE]],
                         more=more, created=created, max_days=MAX_DAYS, **layout)

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        values = {k: self.form.get(k, "").strip() for k in ("maxUses", "days", "note")}
        errors = FormErrors(values=values)
        max_uses = days = None
        if values["maxUses"]:
            if not values["maxUses"].isdigit() or not 1 <= int(values["maxUses"]) <= 1_000_000:
                errors.add("maxUses", "Enter how many people may use it, a whole number from 1 to 1,000,000, "
                                      "or leave it empty for no limit")
            else:
                max_uses = int(values["maxUses"])
        if values["days"]:
            if not values["days"].isdigit() or not 1 <= int(values["days"]) <= MAX_DAYS:
                errors.add("days", f"Enter a number of days from 1 to {MAX_DAYS}, or leave it empty "
                                   "for an invite that does not expire")
            else:
                days = int(values["days"])
        if len(values["note"]) > 200:
            errors.add("note", "Shorten the note to 200 characters or fewer")
        if errors:
            await self.show(row, errors, 400)
            return
        expires_at = iso(self.app.clock.time() + days * 86400) if days else None
        created = await self.communities.create_invite(row, signed_in_actor(self), max_uses=max_uses,
                                                       expires_at=expires_at, note=values["note"] or None)
        await self.show(row, FormErrors(values={"maxUses": "", "days": "7", "note": ""}), created=created)


class InviteRevokeAction(PageHandler):
    """POST /c/<ident>/invites/<inv_n>/revoke: then back to the invites page."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/invites/", 1)[0] + "/settings/invites"

    async def submit(self, ident: str, invite_id: str) -> None:
        row = await community_row(self, ident)
        try:
            await self.communities.revoke_invite(row, invite_id, signed_in_actor(self))
            done = "invite_revoked"
        except ApiError as exc:
            if exc.code != "invite_revoked":  # revoked meanwhile: the list shows it
                raise
            done = ""
        self.see_other(f"{community_path(row)}/settings/invites" + (f"?done={done}" if done else "") + "#invites")


def routes() -> list[tuple]:
    base = r"/c/" + IDENT
    return [
        (r"/invite/" + CODE, InvitePage),
        (base + r"/settings/invites", InvitesPage),
        (base + r"/invites/" + INVITE_ID + r"/revoke", InviteRevokeAction),
    ]
