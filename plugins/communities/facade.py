"""What the communities plugin offers other plugins: ``app.communities``, the interface
`daemon.runtime.services.CommunitiesService`, registered through `cr_services`. Each method
delegates to the function the JSON routes call, so a page and a route do the same thing."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, AsyncIterator

from daemon.plugin import ApiError
from plugins.communities import common, denials, invites, service, uploads, views
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

    def image_url(self, row: "Row", image: str) -> str | None:
        return views.image_url(row, image)

    # commands
    async def create(self, actor: "Actor", **fields: Any) -> dict[str, Any]:
        return await service.create(self.app, actor, **fields)

    async def update_profile(self, row: "Row", actor: "Actor", **changes: Any) -> None:
        await service.update_profile(self.app, row, actor, **changes)

    async def delete(self, row: "Row", actor: "Actor") -> dict[str, Any]:
        return await service.delete(self.app, row, actor)

    async def approve(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        return await service.approve(self.app, row, member_did, actor)

    async def reject(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]:
        return await service.reject(self.app, row, member_did, actor, reason)

    async def remove(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]:
        return await service.remove(self.app, row, member_did, actor, reason)

    async def promote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        return await service.promote(self.app, row, member_did, actor)

    async def demote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
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

    @contextlib.asynccontextmanager
    async def _denials_audited(self, row: "Row", actor: "Actor", action: str) -> AsyncIterator[None]:
        """A 403 is written to the audit log, as the API's `@audit_denials` does."""
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
