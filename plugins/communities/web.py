"""Browser routes (OAuth session + CSRF, enforced by the core): the user's memberships,
creating a community, joining and leaving (which also write/delete the user's own
membership record through their OAuth session), and the admin pages' routes (spec 4.3)."""

from __future__ import annotations

from typing import Any

import tornado.httputil

from daemon.plugin import ApiError, BOOLEAN, BaseHandler, DID, Row, obj, operation, validate

from plugins.communities import admins, common, lifecycle, membership, uploads
from plugins.communities.capabilities import require_capability_of
from plugins.communities import schemas as S
from plugins.communities.denials import audit_browser_denials
from plugins.communities.public import communities_of
from plugins.communities.steps import Actor


class WebBase(BaseHandler):
    auth = "session"

    @property
    def me(self) -> Actor:
        return Actor(self.principal.did, None, proven=True)  # the OAuth login proved the user

    async def admin_community(self, did: str) -> Row:
        row = await common.community_for(self, did)
        await communities_of(self.app).require_admin(row, self.principal.did)
        return row


class MyMembershipsHandler(WebBase):
    xrpc_reads = {"GET": "membership.listMine"}   # an XRPC query too (daemon/atproto/xrpc.py)

    @operation("Your memberships (and, on the first page, your pending requests)", paged=True,
               responses={200: S.MEMBERSHIPS})
    async def get(self) -> None:
        self.send_json(await common.memberships(self, self.principal.did))


class MyCommunitiesHandler(WebBase):
    @operation("Create a community as yourself", body=obj(S.CREATE_FIELDS, ["displayName"]),
               responses={201: S.CREATED}, errors=(409, 502))
    async def post(self) -> None:
        fields = await communities_of(self.app).create_fields(self.json_body())
        result = await lifecycle.create(self.app, self.me, **fields)
        answer = await common.created(self, result["did"], self.principal.did)
        if "recoveryKey" in result:
            answer["recoveryKey"] = result["recoveryKey"]
        self.set_header("Cache-Control", "no-store")
        self.send_json(answer, 201)


class JoinHandler(WebBase):
    """Join: the user's own `membership` record, then the community's side."""

    @operation("Join (writes your own membership record through your login, then the community's side)",
               responses={200: S.CHANGE, 201: S.CHANGE, 202: S.CHANGE}, errors=(403, 409, 502))
    async def post(self, did: str) -> None:
        row = await common.community_for(self, did)
        status, result = await membership.browser_join(self.app, row, self.principal)
        self.send_json(result, status)


class LeaveHandler(WebBase):
    """Leave (or withdraw a request): the community's side, then, best effort, the user's
    own membership record."""

    @operation("Leave, or withdraw your request", responses={200: S.CHANGE}, errors=(403, 409, 502))
    async def post(self, did: str) -> None:
        row = await common.community_for(self, did)
        self.send_json(await membership.browser_leave(self.app, row, self.principal))


class CommunityHandler(WebBase):
    @operation("A community's details, as you see it", responses={200: S.DETAILS})
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        self.send_json(await communities_of(self.app).details(row, self.principal.did, None))

    @operation("Delete a community (its primary admin)", responses={200: S.DELETED}, errors=(403, 409, 502))
    @audit_browser_denials("community.delete")
    async def delete(self, did: str) -> None:
        row = await common.community_for(self, did)
        self.send_json(await lifecycle.delete(self.app, row, self.me))


class ProfileHandler(WebBase):
    @operation("Change the community's profile (an admin)", body=obj(S.PROFILE_FIELDS),
               responses={200: S.DETAILS}, errors=(403, 409, 502))
    @audit_browser_denials("community.updateProfile")
    async def put(self, did: str) -> None:
        row = await self.admin_community(did)
        fields = common.community_fields(self.json_body(), required=False)
        if not fields:
            raise ApiError(400, "invalid_request", "Send displayName, description and/or type.")
        await lifecycle.update_profile(self.app, row, self.me, **fields)
        self.send_json(await common.created(self, row["did"], self.principal.did))


class ImageHandler(WebBase):
    """POST an image as the raw body or as the first file of a ``multipart/form-data`` form.
    The banner route also takes JSON ``{"fromProfile": true}``: reuse the user's own Bluesky
    banner. Whatever the source, the image goes through `images.clean_image` (decoded,
    capped, upright, metadata stripped, re-encoded) before it reaches the community's repo."""

    def body_limit(self) -> int:
        # room for multipart framing around an image of the allowed size
        return self.app.config.plugin("communities").max_upload_bytes + 16 * 1024

    @operation("Upload the avatar or banner (an admin): a PNG or JPEG as the body or a form's file; "
               "the banner also takes {\"fromProfile\": true}",
               body=obj({"fromProfile": BOOLEAN}), body_types=("application/json", "image/png", "image/jpeg",
                                                               "multipart/form-data"),
               responses={200: S.DETAILS}, errors=(403, 409, 502))
    @audit_browser_denials("community.upload.{1}")
    async def post(self, did: str, kind: str) -> None:
        row = await self.admin_community(did)
        ctype = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "banner" and ctype == "application/json":
            body = self.json_body()
            if body.get("fromProfile") is not True:
                raise ApiError(400, "invalid_request", 'Send an image, or {"fromProfile": true}.')
            data = await self._profile_banner()
        elif ctype == "multipart/form-data":
            data = self._form_file()
        else:
            data = self.body
        await uploads.set_image(self.app, row, self.me, kind, data)
        self.send_json(await common.created(self, row["did"], self.principal.did))

    def _form_file(self) -> bytes:
        """The first file of the multipart body; 400 `invalid_request` for a form Tornado's
        parser refuses (no boundary, no final boundary, a part without headers or a
        form-data Content-Disposition and name, more than 100 parts ...) or one without a file."""
        files: dict[str, list[Any]] = {}
        try:
            tornado.httputil.parse_body_arguments(self.request.headers["Content-Type"], self.body, {}, files)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - HTTPInputError, and anything else the parser meets
            raise ApiError(400, "invalid_request", f"The multipart form cannot be read: {exc}") from None
        found = [f for group in files.values() for f in group]
        if not found:
            raise ApiError(400, "invalid_request", "The form holds no file.")
        return found[0]["body"]

    async def _profile_banner(self) -> bytes:
        return await uploads.profile_banner(self.app, self.principal.did)


class MembersHandler(WebBase):
    @operation("A community's members", paged=True, responses={200: S.MEMBERS}, errors=(403,))
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        status = await common.require_member_view(self, row, self.principal.did)
        self.send_json_bytes(await common.members_json(self, row, admin_view=bool(status and status.is_admin)))


class PendingHandler(WebBase):
    @operation("Requests to join (an admin)", paged=True, responses={200: S.PENDING}, errors=(403,))
    @audit_browser_denials("membership.listPending")
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        await require_capability_of(self.app, row["did"], self.principal.did, "members.approve")
        limit, after = common.page_after(self)
        self.send_json(await communities_of(self.app).pending_list(row, limit=limit, after_id=after))


class MemberHandler(WebBase):
    @operation("Remove a member (an admin)", body=obj({"reason": S.REASON}), body_required=False,
               responses={200: S.CHANGE}, errors=(403, 409, 502))
    @audit_browser_denials("membership.remove", target=True)
    async def delete(self, did: str, member_did: str) -> None:
        row = await common.community_for(self, did)
        body = self.json_body(required=False)
        self.send_json(await membership.remove(self.app, row, common.path_did(member_did), self.me,
                                            common.reason_field(body)))


class MemberAdminHandler(WebBase):
    @operation("Make a member an admin", responses={200: S.ADMINS}, errors=(403, 409, 502))
    @audit_browser_denials("admin.promote", target=True)
    async def post(self, did: str, member_did: str) -> None:
        row = await common.community_for(self, did)
        self.send_json(await admins.promote(self.app, row, common.path_did(member_did), self.me))

    @operation("Make an admin a member again", responses={200: S.ADMINS}, errors=(403, 409, 502))
    @audit_browser_denials("admin.demote", target=True)
    async def delete(self, did: str, member_did: str) -> None:
        row = await common.community_for(self, did)
        self.send_json(await admins.demote(self.app, row, common.path_did(member_did), self.me))


class MemberDecisionHandler(WebBase):
    @operation("Approve or reject a request to join", body=obj({"reason": S.REASON}), body_required=False,
               responses={200: S.CHANGE}, errors=(403, 409, 502))
    @audit_browser_denials("membership.{2}", target=True)
    async def post(self, did: str, member_did: str, decision: str) -> None:
        row = await common.community_for(self, did)
        member = common.path_did(member_did)
        if decision == "approve":
            self.send_json(await membership.approve(self.app, row, member, self.me))
        else:
            body = self.json_body(required=False)
            self.send_json(await membership.reject(self.app, row, member, self.me, common.reason_field(body)))


class TransferHandler(WebBase):
    @operation("Hand the primary admin role to another admin", body=obj({"newOwnerDid": DID}, ["newOwnerDid"]),
               responses={200: S.ADMINS}, errors=(403, 409, 502))
    @audit_browser_denials("admin.transfer")
    async def post(self, did: str) -> None:
        row = await common.community_for(self, did)
        new_owner = common.body_did(self.json_body(), "newOwnerDid")
        self.send_json(await admins.transfer(self.app, row, new_owner, self.me))


class AuditLogHandler(WebBase):
    @operation("The audit log (an admin)", paged=True, responses={200: S.AUDIT}, errors=(403,))
    @audit_browser_denials("community.readAuditLog")
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        await require_capability_of(self.app, row["did"], self.principal.did, "audit.read")
        limit, before = common.page_after(self)
        self.send_json(await communities_of(self.app).audit_log(row, limit=limit, before_id=before,
                                                                action=self.get_query_argument("action", None) or None))


class AppGrantHandler(WebBase):
    """An admin grants an app access to the community (POST ``{"manage": bool}``: manage =
    act for the admins through the API; otherwise visibility only) or revokes it (DELETE)."""

    @operation("Grant an app access to the community (an admin)", body=obj({"manage": BOOLEAN}),
               body_required=False, responses={200: S.APP_ACCESS}, errors=(403,))
    @audit_browser_denials("community.grantApp")
    async def post(self, did: str, app_id: str) -> None:
        row = await self.admin_community(did)
        body = self.json_body(required=False)
        manage = validate.boolean(body, "manage", default=False)
        await self._require_app(app_id)
        self.send_json(await admins.allow_app(self.app, row, app_id, self.me, True, manage=bool(manage)))

    @operation("Revoke an app's access (an admin)", responses={200: S.APP_ACCESS}, errors=(403,))
    @audit_browser_denials("community.revokeApp")
    async def delete(self, did: str, app_id: str) -> None:
        row = await self.admin_community(did)
        self.send_json(await admins.allow_app(self.app, row, app_id, self.me, False))

    async def _require_app(self, app_id: str) -> None:
        from daemon.plugin.storage import AppsTable
        target = await AppsTable.get(self.app.db, app_id)
        if target is None or not target["active"]:
            raise ApiError(404, "app_not_found", f"No active app {app_id}.")


def routes() -> list[tuple]:
    base = r"/communities/" + common.DID
    member = base + r"/members/" + common.DID
    return [
        (r"/users/me/memberships", MyMembershipsHandler),
        (r"/users/me/communities", MyCommunitiesHandler),
        (base, CommunityHandler),
        (base + r"/join", JoinHandler),
        (base + r"/leave", LeaveHandler),
        (base + r"/profile", ProfileHandler),
        (base + r"/(avatar|banner)", ImageHandler),
        (base + r"/members", MembersHandler),
        (base + r"/members/pending", PendingHandler),
        (member, MemberHandler),
        (member + r"/admin", MemberAdminHandler),
        (member + r"/(approve|reject)", MemberDecisionHandler),
        (base + r"/admins/transfer", TransferHandler),
        (base + r"/audit-log", AuditLogHandler),
        (base + r"/apps/(app_[0-9a-f]{16})", AppGrantHandler),
    ]
