"""API-key routes for invites and bans, and the public invite preview
(docs/communities.md, "Invites" and "Bans"). Same trust model as api.py: the acting
admin or moderator (`adminDid`) is believed only from an app that manages the community,
and may be proven (docs/identity.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from daemon.plugin import BaseHandler, DID, UserMethod, encode_cursor, iso, obj, operation, validate
from plugins.communities import bans, common, invites
from plugins.communities import schemas as S
from plugins.communities.steps import member_status, require_manager
from plugins.communities.api import ApiBase
from plugins.communities.capabilities import require_capability
from plugins.communities.denials import audit_denials
from plugins.communities import store

#: An invite code, or an invite's id from the list (``inv_<n>``), in a path.
CODE = r"([A-Za-z0-9_-]{1,64})"


def time_field(body: dict[str, Any], field: str) -> str | None:
    """An optional ISO 8601 time with a time zone, as the clock writes times (so times
    compare as strings)."""
    value = validate.string(body, field, required=False, min_len=1, max_len=40)
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise validate.invalid(field, "must be an ISO 8601 time, such as 2030-01-31T12:00:00Z") from None
    if parsed.tzinfo is None:
        raise validate.invalid(field, "must name its time zone (end with Z or an offset)")
    if not 1970 <= parsed.year <= 9998:  # four-digit years, so stored times compare as strings
        raise validate.invalid(field, "must be a time between the years 1970 and 9998")
    return iso(parsed.timestamp())


def admin_of(handler: BaseHandler, body: dict[str, Any]) -> str:
    """`adminDid` from the body, or the query for DELETE and GET."""
    value = body.get("adminDid") or handler.get_query_argument("adminDid", None)
    return common.body_did({"adminDid": value}, "adminDid")


class InvitesHandler(ApiBase):
    user_methods = {"POST": UserMethod("invite.create", "adminDid", "Create an invite link"),
                    "GET": UserMethod("invite.list", "adminDid", "List a community's invite links")}

    @operation("Create an invite link (admins and moderators with invites.manage)", body=S.INVITE_BODY,
               responses={201: S.INVITE_CREATED}, errors=(403, 409))
    @audit_denials
    async def post(self, did: str) -> None:
        row = await common.community_for(self, did)
        body = self.json_body()
        admin = common.body_did(body, "adminDid")
        max_uses = validate.integer(body, "maxUses", required=False, minimum=1, maximum=1_000_000)
        expires_at = time_field(body, "expiresAt")
        note = validate.string(body, "note", required=False, max_len=200) or None
        actor = await self.acting(admin, row)
        self.send_json(await invites.create(self.app, row, actor, max_uses=max_uses, expires_at=expires_at,
                                            note=note), 201)

    @operation("A community's invite links, newest first (codes are never shown again)", paged=True,
               params=[S.did_query("adminDid", required=True)], responses={200: S.INVITES}, errors=(403,))
    @audit_denials
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        admin = common.query_did(self, "adminDid", required=True)
        actor = await self.acting(admin, row)
        limit, cursor = self.page_params(1, "i")
        rows = await invites.listing(self.app, row, actor, limit=limit + 1,
                                     before_id=int(cursor[0]) if cursor else None)
        out: dict[str, Any] = {"invites": [invites.invite_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)


class InviteHandler(ApiBase):
    user_methods = {"DELETE": UserMethod("invite.revoke", "adminDid", "Revoke an invite link")}

    @operation("Revoke an invite link (by its code, or its id from the list)", params=[S.did_query("adminDid")],
               body=obj({"adminDid": DID}), body_required=False, responses={200: S.INVITE}, errors=(403, 410))
    @audit_denials
    async def delete(self, did: str, code: str) -> None:
        row = await common.community_for(self, did)
        admin = admin_of(self, self.json_body(required=False))
        actor = await self.acting(admin, row)
        self.send_json(await invites.revoke(self.app, row, code, actor))


class InvitePreviewHandler(BaseHandler):
    """Public (no key): what an invite leads to, without the roster. Rate limited per
    client address (`rate_limits.invites`, apart from sign-in's budget), so codes cannot be
    tried in bulk cheaply."""

    auth = None
    rate_limit = "invites"

    @operation("What an invite leads to: the community's name, picture, description, type and size "
               "(public; no roster)", responses={200: S.INVITE_PREVIEW},
               errors={404: "", 410: "", 429: "too many previews from this address"})
    async def get(self, code: str) -> None:
        invite, row = await invites.preview(self.app, code)
        self.send_json(invites.preview_json(invite, row))


class BansHandler(ApiBase):
    user_methods = {"POST": UserMethod("membership.ban", "adminDid", "Ban a user from a community"),
                    "GET": UserMethod("membership.listBans", "adminDid", "List a community's bans")}

    @operation("Ban a user: ends their membership or request; blocks joins, requests and invites until "
               "expiresAt or an unban", body=S.BAN_BODY, responses={201: S.BANNED}, errors=(403, 409, 502))
    @audit_denials
    async def post(self, did: str) -> None:
        row = await common.community_for(self, did)
        body = self.json_body()
        admin = common.body_did(body, "adminDid")
        member = common.body_did(body, "memberDid")
        reason = common.reason_field(body)
        expires_at = time_field(body, "expiresAt")
        self.denied_target = member
        actor = await self.acting(admin, row)
        self.send_json(await bans.ban(self.app, row, member, actor, reason=reason, expires_at=expires_at), 201)

    @operation("The bans in force, newest first (admins and moderators)", paged=True,
               params=[S.did_query("adminDid", required=True)], responses={200: S.BANS}, errors=(403,))
    @audit_denials
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        admin = common.query_did(self, "adminDid", required=True)
        await self.acting(admin, row)
        await require_manager(self.app.db, row, self.principal.app_id)
        require_capability(await member_status(self.app.db, row["did"], admin), "members.ban")
        limit, cursor = self.page_params(1, "i")
        rows = await store.list_bans(self.app.db, row["did"], self.app.clock.iso_now(), limit=limit + 1,
                                          before_id=int(cursor[0]) if cursor else None)
        out: dict[str, Any] = {"bans": [bans.ban_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)


class BanHandler(ApiBase):
    user_methods = {"DELETE": UserMethod("membership.unban", "adminDid", "Lift a ban")}

    @operation("Lift a ban", params=[S.did_query("adminDid")], body=obj({"adminDid": DID}), body_required=False,
               responses={200: S.UNBANNED}, errors=(403,))
    @audit_denials
    async def delete(self, did: str, member_did: str) -> None:
        row = await common.community_for(self, did)
        member = common.path_did(member_did)
        admin = admin_of(self, self.json_body(required=False))
        self.denied_target = member
        actor = await self.acting(admin, row)
        self.send_json(await bans.unban(self.app, row, member, actor))


def routes() -> list[tuple]:
    base = r"/api/v1/communities/" + common.DID
    return [
        (base + r"/invites", InvitesHandler),
        (base + r"/invites/" + CODE, InviteHandler),
        (r"/api/v1/invites/" + CODE, InvitePreviewHandler),
        (base + r"/bans", BansHandler),
        (base + r"/bans/" + common.DID, BanHandler),
    ]
