"""What the communities plugin offers other plugins: ``app.communities``, the interface
`daemon.runtime.services.CommunitiesService`, registered through `cr_services`. Each method
delegates to the function the JSON routes call, so a page and a route do the same thing."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, AsyncIterator

from daemon.plugin import ApiError
from plugins.communities import bans, capabilities, common, denials, invites, roles, service, steps, store, uploads, views
from plugins.communities.public import PublicCommunities

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Actor, Application, BaseHandler, MemberStatus, Principal, Row


class Communities(PublicCommunities):
    """`daemon.runtime.services.CommunitiesService`, bound to one application."""

    def __init__(self, app: "Application") -> None:
        self.app = app

    # reads
    def path_did(self, value: str) -> str:
        return common.path_did(value)

    def community_fields(self, body: dict[str, Any], *, required: bool) -> dict[str, Any]:
        return common.community_fields(body, required=required)

    async def create_fields(self, handler: "BaseHandler", body: dict[str, Any]) -> dict[str, Any]:
        return await common.create_fields(handler, body)

    async def details(self, handler: "BaseHandler", row: "Row", viewer: str | None) -> dict[str, Any]:
        return await common.details(handler, row, viewer)

    async def list_members(self, handler: "BaseHandler", row: "Row", viewer: str | None, *,
                           admin_view: bool) -> dict[str, Any]:
        return await common.list_members(handler, row, viewer, admin_view=admin_view)

    async def roster_allows(self, handler: "BaseHandler", row: "Row", viewer: str | None) -> bool:
        return await common.roster_allows(handler, row, viewer)

    async def require_admin(self, handler: "BaseHandler", row: "Row", did: str | None) -> "MemberStatus":
        return await common.require_admin(handler, row, did)

    async def pending_list(self, handler: "BaseHandler", row: "Row") -> dict[str, Any]:
        return await common.pending_list(handler, row)

    async def audit_log(self, handler: "BaseHandler", row: "Row") -> dict[str, Any]:
        return await common.audit_log(handler, row)

    def audit_entry_json(self, row: "Row") -> dict[str, Any]:
        return views.audit_json(row)

    def image_url(self, row: "Row", image: str) -> str | None:
        return views.image_url(row, image)

    # the web pages' reads (rows of this plugin's tables, which no other plugin queries)
    async def community_row(self, did: str) -> "Row | None":
        return await store.get_community(self.app.db, did)

    async def visible_row(self, did: str, app_id: str | None) -> "Row":
        from daemon.plugin import Actor
        return await steps.require_community(self.app, did, Actor("", app_id))

    async def search(self, text: str, *, user_did: str | None, limit: int, before_id: int | None) -> list["Row"]:
        query = store.fts_query(text) if text else None
        if text and query is None:
            return []
        return await store.list_communities(self.app.db, query=query, user_did=user_did, app_id=None,
                                            limit=limit, before_id=before_id)

    async def memberships_of(self, user_did: str, *, limit: int, after_id: int | None) -> list["Row"]:
        return await store.memberships_of(self.app.db, user_did, limit=limit, after_id=after_id)

    async def requests_of(self, user_did: str) -> list["Row"]:
        return await store.requests_of(self.app.db, user_did)

    async def person_did(self, handle: str) -> str | None:
        return await store.did_by_handle(self.app.db, handle.strip().lstrip("@").lower())

    async def audit_rows(self, community_did: str, *, limit: int, before_id: int | None = None,
                         actions: tuple[str, ...] | None = None, denied: bool = False, person: str | None = None,
                         since: str | None = None, until: str | None = None) -> list["Row"]:
        return await store.audit_page(self.app.db, community_did, actions=actions, denied=denied, person=person,
                                      since=since, until=until, before_id=before_id, limit=limit)

    async def allowed_apps(self, community_did: str) -> list["Row"]:
        return await store.list_allowed_apps(self.app.db, community_did)

    # commands
    async def create(self, actor: "Actor", **fields: Any) -> dict[str, Any]:
        return await service.create(self.app, actor, **fields)

    async def update_profile(self, row: "Row", actor: "Actor", **changes: Any) -> None:
        await service.update_profile(self.app, row, actor, **changes)

    async def delete(self, row: "Row", actor: "Actor") -> dict[str, Any]:
        return await service.delete(self.app, row, actor)

    async def approve(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.approve"):
            return await service.approve(self.app, row, member_did, actor)

    async def reject(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.reject"):
            return await service.reject(self.app, row, member_did, actor, reason)

    async def remove(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.remove"):
            return await service.remove(self.app, row, member_did, actor, reason)

    async def promote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "admin.promote"):
            return await service.promote(self.app, row, member_did, actor)

    async def demote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "admin.demote"):
            return await service.demote(self.app, row, member_did, actor)

    async def transfer(self, row: "Row", new_owner: str, actor: "Actor") -> dict[str, Any]:
        return await service.transfer(self.app, row, new_owner, actor)

    async def allow_app(self, row: "Row", app_id: str, actor: "Actor", allow: bool,
                        manage: bool = False) -> dict[str, Any]:
        return await service.allow_app(self.app, row, app_id, actor, allow, manage=manage)

    async def browser_join(self, row: "Row", principal: "Principal", *,
                           invite: "Row | None" = None) -> tuple[int, dict[str, Any]]:
        return await service.browser_join(self.app, row, principal, invite=invite)

    # invites (invites.py): the page's preview and join, and the admins' page
    async def invite_preview(self, code: str) -> tuple["Row", "Row", dict[str, Any]]:
        invite, row = await invites.preview(self.app, code)
        return invite, row, invites.preview_json(invite, row)

    async def invite_community(self, code: str) -> "Row | None":
        """The active community an invite code belongs to, usable or not (None: unknown)."""
        invite = await store.get_invite(self.app.db, code_hash=invites.code_hash(code))
        if invite is None:
            return None
        row = await store.get_community(self.app.db, invite["community_did"])
        return row if row is not None and row["state"] == "active" else None

    async def list_invites(self, row: "Row", actor: "Actor", *, limit: int,
                           before_id: int | None) -> list[dict[str, Any]]:
        async with self._denials_audited(row, actor, "invite.list"):
            rows = await invites.listing(self.app, row, actor, limit=limit, before_id=before_id)
        return [invites.invite_json(r) for r in rows]

    async def create_invite(self, row: "Row", actor: "Actor", *, max_uses: int | None,
                            expires_at: str | None, note: str | None) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "invite.create"):
            return await invites.create(self.app, row, actor, max_uses=max_uses, expires_at=expires_at,
                                        note=note)

    async def revoke_invite(self, row: "Row", code_or_id: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "invite.revoke"):
            return await invites.revoke(self.app, row, code_or_id, actor)

    # roles (roles.py) and what they may grant (capabilities.py); changes audited when refused
    def capability_catalogue(self) -> dict[str, Any]:
        return capabilities.catalogue(self.app)

    async def list_roles(self, row: "Row") -> dict[str, Any]:
        return await roles.list_roles(self.app, row)

    async def role_holders(self, row: "Row") -> dict[str, list[str]]:
        return {r["member_did"]: r["roles"].split() for r in await store.holders(self.app.db, row["did"])}

    async def create_role(self, row: "Row", actor: "Actor", name: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.create"):
            return await roles.create_role(self.app, row, actor, name, body)

    async def update_role(self, row: "Row", actor: "Actor", name: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.update"):
            return await roles.update_role(self.app, row, actor, name, body)

    async def delete_role(self, row: "Row", actor: "Actor", name: str) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.delete"):
            return await roles.delete_role(self.app, row, actor, name)

    async def assign_role(self, row: "Row", actor: "Actor", member_did: str, name: str) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.assign"):
            return await roles.assign(self.app, row, actor, member_did, name)

    async def unassign_role(self, row: "Row", actor: "Actor", member_did: str, name: str) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.unassign"):
            return await roles.unassign(self.app, row, actor, member_did, name)

    # bans (bans.py)
    async def ban_row(self, row: "Row", member_did: str, actor: "Actor", *, reason: str | None,
                      expires_at: str | None) -> dict[str, Any]:
        """`ban` for the web pages, which hold the community's row (refusals audited)."""
        async with self._denials_audited(row, actor, "membership.ban"):
            return await bans.ban(self.app, row, member_did, actor, reason=reason, expires_at=expires_at)

    async def unban(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.unban"):
            return await bans.unban(self.app, row, member_did, actor)

    async def list_bans(self, row: "Row", actor: "Actor", *, limit: int,
                        before_id: int | None) -> list[dict[str, Any]]:
        """The bans in force, newest first (`id` for the next page's `before_id`)."""
        async with self._denials_audited(row, actor, "membership.listBans"):
            capabilities.require_capability(await steps.member_status(self.app.db, row["did"], actor.did),
                                            "members.ban")
        rows = await store.list_bans(self.app.db, row["did"], self.app.clock.iso_now(), limit=limit,
                                          before_id=before_id)
        return [{**bans.ban_json(r), "id": r["id"]} for r in rows]

    async def ban_of(self, row: "Row", user_did: str) -> dict[str, Any] | None:
        """The ban in force on `user_did` (its expiry; the reason is the admins'), or None."""
        ban = await store.active_ban(self.app.db, row["did"], user_did, self.app.clock.iso_now())
        return None if ban is None else {"expiresAt": ban["expires_at"], "createdAt": ban["created_at"]}

    @contextlib.asynccontextmanager
    async def _denials_audited(self, row: "Row", actor: "Actor", action: str) -> AsyncIterator[None]:
        """A 403 is written to the audit log, as the API's `@audit_denials` does (the
        action named as the API's user method; rate limited in denials.py)."""
        try:
            yield
        except ApiError as exc:
            if exc.status == 403:
                try:
                    await denials.record(self.app, row["did"], actor, action, exc.code)
                except Exception as err:  # noqa: BLE001 (the refusal is answered all the same)
                    denials.log.warning("could not audit a denied %s in %s: %r", action, row["did"], err)
            raise

    async def browser_leave(self, row: "Row", principal: "Principal") -> dict[str, Any]:
        return await service.browser_leave(self.app, row, principal)

    async def set_image(self, row: "Row", actor: "Actor", kind: str, data: bytes) -> None:
        await uploads.set_image(self.app, row, actor, kind, data)

    async def profile_banner(self, user_did: str) -> bytes:
        return await uploads.profile_banner(self.app, user_did)
