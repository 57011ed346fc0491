"""API-key routes under /api/v1/communities (spec 4.5, 4.6).

Trust model: the app names the acting user (`userDid`, `adminDid`, `currentOwnerDid`) and
may prove them with the user's service-auth token (daemon/atproto/proofs.py, docs/identity.md):
each action that names a user declares its method id in `user_methods`. Without a proof,
where the service and the community allow that, the app vouches for its user (see
docs/communities.md). For admin actions (`adminDid` / `currentOwnerDid`) only apps the
community trusts are believed: its creator app and apps an admin granted management;
others get 403 `app_not_trusted`.
"""

from __future__ import annotations

from typing import Any

from daemon.plugin import (ApiError, BOOLEAN, BaseHandler, DID, Row, STRING, UserMethod, encode_cursor, obj,
                           operation, query, require_did, validate)
from daemon.plugin.atproto import is_cid, require_at_uri
from daemon.plugin.http import LeanHandler
from plugins.communities import admins, common, invites, lifecycle, membership, policy, views
from plugins.communities import schemas as S
from plugins.communities.capabilities import require_capability_of
from plugins.communities.denials import audit_denials
from plugins.communities.public import communities_of
from plugins.communities.steps import Actor
from plugins.communities.steps import ROSTER_HIDDEN, checked_status, path_did, require_community, require_manager
from plugins.communities import store

APP_ID = r"(app_[0-9a-f]{16})"


class CommunityRoute:
    """Finds the community a route's path names (for `ApiBase` and the lean routes)."""

    app: Any
    principal: Any

    async def community(self, raw_did: str) -> Row:
        """The community the path names, as this app may see it (404 otherwise)."""
        return await require_community(self.app, path_did(raw_did), self.principal)


class ApiBase(CommunityRoute, BaseHandler):
    """An API-key route of this plugin: finds the path's community and names the acting user."""

    auth = "app"
    #: What each HTTP method does in a user's name (daemon/atproto/proofs.py, docs/identity.md).
    user_methods: dict[str, Any] = {}

    async def acting(self, did: str, community: Any = None, action: str | None = None) -> Actor:
        """The acting user `did` as the request names them, proven or not (a bad proof, or a
        missing one where required, is a 401)."""
        spec = self.user_methods.get(self.request.method)
        method = spec.get(action) if isinstance(spec, dict) else spec
        requires = bool(community is not None and community["require_user_proof"])
        proven = await self.app.proofs.acting_user(self, did, method, requires)
        actor = Actor(did, self.principal.app_id, proven)
        if community is not None and method is not None:
            self.acted = (community, actor, method.name)  # for @audit_denials
        return actor


class CommunitiesHandler(ApiBase):
    user_methods = {"POST": UserMethod("community.create", "creatorDid", "Create a community")}
    xrpc_reads = {"GET": "community.list"}   # an XRPC query too (daemon/atproto/xrpc.py)

    @operation("Create a community (a new account on the PDS, or an adopted one)",
               body=obj({"creatorDid": DID, **S.CREATE_FIELDS}, ["creatorDid", "displayName"]),
               responses={201: S.CREATED, 202: obj({"request": obj({"id": STRING, "state": STRING,
                                                                    "message": STRING})}, ["request"])},
               errors={403: "creation_not_allowed", 409: "The handle or account is taken", 502: ""})
    async def post(self) -> None:
        body = self.json_body()
        creator = require_did(body.get("creatorDid"), "creatorDid")
        actor = await self.acting(creator)
        fields = await communities_of(self.app).create_fields(body)
        result = await lifecycle.create(self.app, actor, **fields)
        if "held" in result:   # waiting for an operator's approval (cr_hold_action)
            self.send_json({"request": result["held"]}, 202)
            return
        answer = await common.created(self, result["did"], creator)
        if "recoveryKey" in result:
            answer["recoveryKey"] = result["recoveryKey"]
        self.set_header("Cache-Control", "no-store")
        self.send_json(answer, 201)

    @operation("List or search the communities this app may see", paged=True, params=[
        query("query", description="full-text search"), query("q", description="the same as query"),
        S.did_query("userDid", "mark each community's isMember/isAdmin for this user")],
        responses={200: S.page("communities", S.SUMMARY)})
    async def get(self) -> None:
        limit, cursor = self.page_params(1, "i")
        user_did = common.query_did(self, "userDid")
        text = self.get_query_argument("query", None) or self.get_query_argument("q", None)
        query = store.fts_query(text) if text else None
        if text and query is None:
            self.send_json({"communities": []})
            return
        rows = await store.list_communities(
            self.app.db, query=query, user_did=user_did, app_id=self.principal.app_id,
            limit=limit + 1, before_id=int(cursor[0]) if cursor else None,
            withheld=await self.app.withheld_communities())
        out: dict[str, Any] = {"communities": []}
        for row in rows[:limit]:
            summary = views.community_summary(row)
            if user_did and not await common.sees_roster(self.app, row, self.principal.app_id):
                # The user's membership is hidden from this app (as on membership/check);
                # a private community is listed only to its members, so it is left out
                # (the query already leaves such ones out, before the page is cut).
                if row["type"] == "private":
                    continue
                summary.pop("isMember", None)
                summary.pop("isAdmin", None)
            out["communities"].append(summary)
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)


class CommunityHandler(ApiBase):
    user_methods = {"DELETE": UserMethod("community.delete", "adminDid", "Delete a community")}
    xrpc_reads = {"GET": "community.get"}

    @operation("A community's details (a private one shows little to non-members)",
               params=[S.did_query("userDid", "show this user's membership")], responses={200: S.DETAILS})
    async def get(self, did: str) -> None:
        row = await self.community(did)
        self.send_json(await communities_of(self.app).details(row, common.query_did(self, "userDid"),
                                                              self.principal.app_id))

    @operation("Delete a community (its primary admin, through a trusted app)",
               params=[S.did_query("adminDid")], body=obj({"adminDid": DID}), body_required=False,
               responses={200: S.DELETED}, errors=(403, 409, 502))
    @audit_denials
    async def delete(self, did: str) -> None:
        row = await self.community(did)
        body = self.json_body(required=False)
        admin = body.get("adminDid") or self.get_query_argument("adminDid", None)
        admin = require_did(admin, "adminDid")
        self.send_json(await lifecycle.delete(self.app, row, await self.acting(admin, row)))


class MoveHandler(ApiBase):
    """Move the community's account to another PDS (docs/communities.md, "Moving to another
    PDS"): its primary admin, through a managing app. 202 once the account exists on the new
    PDS; the rest runs in the background, its progress at GET."""

    user_methods = {"POST": UserMethod("community.move", "adminDid", "Move a community to another PDS")}

    @operation("Move the community to another PDS (its primary admin, through a managing app)",
               body=obj({"adminDid": DID, "pdsUrl": STRING, "inviteCode": {"type": "string", "maxLength": 200}},
                        ["adminDid", "pdsUrl"]),
               responses={202: S.MOVE}, errors=(400, 403, 409, 502, 503))
    async def post(self, did: str) -> None:
        row = await self.community(did)
        body = self.json_body()
        admin = require_did(body.get("adminDid"), "adminDid")
        to_pds = validate.string(body, "pdsUrl", min_len=8, max_len=300)
        if not to_pds.startswith(("https://", "http://")):
            raise validate.invalid("pdsUrl", "must be the PDS's address (https://…)")
        invite = validate.string(body, "inviteCode", required=False, min_len=1, max_len=200)
        # Moving hands the identity to another PDS: the primary admin must prove it is them
        # (their service-auth token), whatever the community's requireUserProof says.
        if not await self.app.proofs.acting_user(self, admin, self.user_methods["POST"], True):
            raise ApiError(401, "user_proof_required",
                           "Moving a community needs the primary admin's service-auth token (identity.user_proof "
                           "is off here: move it from the web app's Danger zone, or ask the operator).")
        actor = Actor(admin, self.principal.app_id, True)  # proven once: a token is good for one request
        self.send_json(await communities_of(self.app).move(row, actor, to_pds, invite_code=invite), 202)

    @operation("The progress of the community's move (state none when it is not moving)", responses={200: S.MOVE})
    async def get(self, did: str) -> None:
        row = await self.community(did)
        self.send_json(await communities_of(self.app).move_progress(row))


class HandoverHandler(ApiBase):
    """Hand the community over to another Commonroom (docs/communities.md, "Handing a
    community over"): its primary admin, through a managing app, always proven. The answer
    holds the sealed bundle and its passphrase, once (`Cache-Control: no-store`); this
    instance then forgets the community and answers 410 `community_moved` for it."""

    user_methods = {"POST": UserMethod("community.handover", "adminDid",
                                       "Hand a community over to another Commonroom")}

    @operation("Hand the community over to another Commonroom (its primary admin, through a managing app): "
               "the sealed bundle and its passphrase, shown once",
               body=obj({"adminDid": DID, "to": {"type": "string", "maxLength": 300,
                                                 "description": "the new instance's address (optional)"}},
                        ["adminDid"]),
               responses={200: S.HANDOVER}, errors=(400, 401, 403, 409, 410, 502))
    async def post(self, did: str) -> None:
        import base64

        row = await self.community(did)
        body = self.json_body()
        admin = require_did(body.get("adminDid"), "adminDid")
        to = common.destination(validate.string(body, "to", required=False, max_len=300))
        # The bundle carries a password to the account: the primary admin proves it is them,
        # whatever the community's requireUserProof says (as for a move).
        if not await self.app.proofs.acting_user(self, admin, self.user_methods["POST"], True):
            raise ApiError(401, "user_proof_required",
                           "Handing a community over needs the primary admin's service-auth token "
                           "(identity.user_proof is off here: hand it over from the web app's Danger zone).")
        actor = Actor(admin, self.principal.app_id, True)
        answer = await communities_of(self.app).hand_over(row, actor, to=to)
        self.set_header("Cache-Control", "no-store")
        self.send_json({**answer, "bundle": base64.b64encode(answer["bundle"]).decode("ascii")})


class JoinHandler(ApiBase):
    user_methods = {"POST": UserMethod("membership.join", "userDid", "Join, or ask to join, a community")}

    @operation("Join: a member at once (201), or a request awaiting an admin (202)",
               body=obj({"userDid": DID, "membershipUri": STRING, "membershipCid": STRING,
                         "inviteCode": S.INVITE_CODE}, ["userDid"]),
               description="With inviteCode: a member at once whatever the type (410 if the invite is "
                           "expired, used up or revoked, 404 if unknown). 403 banned while a ban holds.",
               responses={200: S.CHANGE, 201: S.CHANGE, 202: S.CHANGE}, errors=(403, 409, 410, 502))
    async def post(self, did: str) -> None:
        row = await self.community(did)
        body = self.json_body()
        user = require_did(body.get("userDid"), "userDid")
        code = validate.string(body, "inviteCode", required=False, min_len=1, max_len=64)
        actor = await self.acting(user, row)
        uri, cid = membership_ref(body)
        invite = await invites.usable(self.app, code, row["did"]) if code is not None else None
        status, result = await membership.join(self.app, row, user, actor,
                                            membership_uri=uri, membership_cid=cid, invite=invite)
        self.send_json(result, status)


class LeaveHandler(ApiBase):
    user_methods = {"POST": UserMethod("membership.leave", "userDid", "Leave a community, or withdraw a request")}

    @operation("Leave a community, or withdraw a request to join", body=obj({"userDid": DID}, ["userDid"]),
               responses={200: S.CHANGE}, errors=(403, 409, 502))
    async def post(self, did: str) -> None:
        row = await self.community(did)
        user = require_did(self.json_body().get("userDid"), "userDid")
        self.send_json(await membership.leave(self.app, row, user, await self.acting(user, row)))


LIST_MEMBERS = UserMethod("membership.listMembers", "userDid",
                          "List the members as a member (needed only where the roster is members-only "
                          "and hidden from the app)")


class MembersHandler(CommunityRoute, LeanHandler):
    """A page of members. Apps render member lists on every community view, so it is a
    lean route (`daemon.http.lean`) and the page's JSON is built by SQLite
    (`common.members_json`)."""

    auth = "app"
    user_methods = {"GET": LIST_MEMBERS}

    @operation("A community's members", paged=True, params=[
        S.did_query("userDid", "the viewer (a private community shows members to members only)"),
        S.did_query("adminDid", "an admin viewing: adds membershipUri and appId"),
        query("public", {"type": "string", "enum": ["", "true", "false", "1", "0", "yes", "no"]},
              description="with adminDid: the public view"),
        query("search", description="part of a handle or name")],
        responses={200: S.MEMBERS},
        errors={401: "a bad service-auth token (proof_*)", 403: "members_hidden, roster_hidden, app_not_trusted"})
    async def get(self, did: str) -> None:
        row = await self.community(did)
        admin = common.query_did(self, "adminDid")
        public = common.query_bool(self, "public")  # checked even when unused: bad input is a 400
        if admin:
            await require_manager(self.app.db, row, self.principal.app_id)
        viewer = admin or common.query_did(self, "userDid")
        if (viewer and not admin and row["roster_visibility"] == "members"
                and not await common.sees_roster(self.app, row, self.principal.app_id)):
            # Any member's DID would do (the admins' are public), so an app the community
            # does not trust must prove the member it names.
            proven = bool(self.request.headers.get("Authorization")) and \
                await self.app.proofs.acting_user(self, viewer, LIST_MEMBERS)
            if not proven:
                raise ROSTER_HIDDEN(row["did"])
        status = await common.require_member_view(self, row, viewer, as_admin=bool(admin))
        admin_view = bool(admin and status and status.is_admin and not public)
        self.send_json_bytes(await common.members_json(self, row, admin_view=admin_view))


class PendingHandler(ApiBase):
    user_methods = {"GET": UserMethod("membership.listPending", "adminDid", "List join requests (admins)")}

    @operation("Requests to join awaiting an admin", paged=True,
               params=[S.did_query("adminDid", required=True)], responses={200: S.PENDING}, errors=(403,))
    @audit_denials
    async def get(self, did: str) -> None:
        row = await self.community(did)
        await require_manager(self.app.db, row, self.principal.app_id)
        admin = common.query_did(self, "adminDid", required=True)
        await self.acting(admin, row)
        await require_capability_of(self.app, row["did"], admin, "members.approve")
        limit, after = common.page_after(self)
        self.send_json(await communities_of(self.app).pending_list(row, limit=limit, after_id=after))


class DecisionHandler(ApiBase):
    user_methods = {"POST": {"approve": UserMethod("membership.approve", "adminDid", "Approve a join request"),
                             "reject": UserMethod("membership.reject", "adminDid", "Reject a join request")}}

    @operation("Approve or reject a request to join",
               body=obj({"adminDid": DID, "memberDid": DID, "userDid": DID, "reason": S.REASON}, ["adminDid"]),
               responses={200: S.CHANGE}, errors=(403, 409, 502))
    @audit_denials
    async def post(self, did: str, decision: str) -> None:
        row = await self.community(did)
        body = self.json_body()
        admin = require_did(body.get("adminDid"), "adminDid")
        field = "memberDid" if "memberDid" in body else "userDid"
        member = require_did(body.get(field), field)
        actor = await self.acting(admin, row, decision)
        if decision == "approve":
            self.send_json(await membership.approve(self.app, row, member, actor))
        else:
            self.send_json(await membership.reject(self.app, row, member, actor, common.reason_field(body)))


class MemberHandler(ApiBase):
    user_methods = {"DELETE": UserMethod("membership.remove", "adminDid", "Remove a member")}

    @operation("Remove a member", params=[S.did_query("adminDid")],
               body=obj({"adminDid": DID, "reason": S.REASON}), body_required=False,
               responses={200: S.CHANGE}, errors=(403, 409, 502))
    @audit_denials
    async def delete(self, did: str, member_did: str) -> None:
        row = await self.community(did)
        member = common.path_did(member_did)
        body = self.json_body(required=False)
        admin = require_did(body.get("adminDid") or self.get_query_argument("adminDid", None), "adminDid")
        self.send_json(await membership.remove(self.app, row, member, await self.acting(admin, row),
                                            common.reason_field(body)))


class AdminsHandler(ApiBase):
    user_methods = {"POST": {
        "promote": UserMethod("admin.promote", "adminDid", "Make a member an admin"),
        "demote": UserMethod("admin.demote", "adminDid", "Make an admin a member again"),
        "transfer": UserMethod("admin.transfer", "currentOwnerDid", "Hand the primary admin role over")}}

    @operation("Promote or demote an admin, or transfer the primary role",
               body=obj({"adminDid": DID, "memberDid": DID, "currentOwnerDid": DID, "newOwnerDid": DID}),
               description="promote/demote: {adminDid, memberDid}; transfer: {currentOwnerDid, newOwnerDid}.",
               responses={200: S.ADMINS}, errors=(403, 409, 502))
    @audit_denials
    async def post(self, did: str, action: str) -> None:
        row = await self.community(did)
        body = self.json_body()
        if action == "transfer":
            owner = require_did(body.get("currentOwnerDid"), "currentOwnerDid")
            new_owner = require_did(body.get("newOwnerDid"), "newOwnerDid")
            actor = await self.acting(owner, row, action)
            self.send_json(await admins.transfer(self.app, row, new_owner, actor))
            return
        admin = require_did(body.get("adminDid"), "adminDid")
        member = require_did(body.get("memberDid"), "memberDid")
        actor = await self.acting(admin, row, action)
        op = admins.promote if action == "promote" else admins.demote
        self.send_json(await op(self.app, row, member, actor))


CHECK = UserMethod("membership.check", "userDid",
                   "Ask whether oneself is a member (needed only where the roster is hidden from the app)")


class CheckHandler(LeanHandler):
    """`{isMember, isAdmin, isPending}` from the index: one SQLite lookup, no PDS. Apps call
    it on every page view, so it is a lean route (`daemon.http.lean`). Where the community
    hides its roster from the app, only for a user whose service-auth token the request
    carries (`checked_status`; 403 ``roster_hidden`` otherwise)."""

    auth = "app"
    follower_serves = frozenset({"POST"})  # a read, sent as POST: a follower answers it
    user_methods = {"GET": CHECK, "POST": CHECK}
    read_route = True   # a POST that changes nothing: sampled in the access log like a GET

    @operation("Is this user a member, an admin, pending? (one index lookup, no PDS)",
               body=obj({"userDid": DID}, ["userDid"]), responses={200: S.STATUS},
               errors={401: "a bad service-auth token (proof_*)", 403: "roster_hidden"})
    async def post(self, did: str) -> None:
        user = require_did(self.json_body().get("userDid"), "userDid")
        await self._answer(did, user)

    @operation("Is this user a member, an admin, pending? (one index lookup, no PDS)",
               params=[S.did_query("userDid", required=True)], responses={200: S.STATUS},
               errors={401: "a bad service-auth token (proof_*)", 403: "roster_hidden"})
    async def get(self, did: str) -> None:
        await self._answer(did, common.query_did(self, "userDid", required=True))

    async def _answer(self, did: str, user: str) -> None:
        async def proves_user() -> bool:
            # a token is looked at only where the roster is hidden; without one: not proven
            if not self.request.headers.get("Authorization"):
                return False
            return await self.app.proofs.acting_user(self, user, CHECK)

        status = await checked_status(self.app, common.path_did(did), user, self.principal, proves_user)
        self.send_json(status.json())


class AuditLogHandler(ApiBase):
    user_methods = {"GET": UserMethod("community.readAuditLog", "adminDid", "Read the audit log (admins)")}

    @operation("The community's audit log, newest first", paged=True, params=[
        S.did_query("adminDid", required=True), query("action", description="only entries of this action")],
        responses={200: S.AUDIT}, errors=(403,))
    @audit_denials
    async def get(self, did: str) -> None:
        row = await self.community(did)
        await require_manager(self.app.db, row, self.principal.app_id)
        admin = common.query_did(self, "adminDid", required=True)
        await self.acting(admin, row)
        await require_capability_of(self.app, row["did"], admin, "audit.read")
        limit, before = common.page_after(self)
        self.send_json(await communities_of(self.app).audit_log(row, limit=limit, before_id=before,
                                                                action=self.get_query_argument("action", None) or None))


class AppVisibilityHandler(ApiBase):
    """Grant (POST ``{adminDid, manage?}``) or revoke (DELETE) an app's access: visibility
    of a private community, or with ``manage: true`` management (acting for the admins).
    Only an app that itself manages the community may call this (403 `app_not_trusted`)."""

    user_methods = {"POST": UserMethod("community.grantApp", "adminDid", "Let an app see or manage a community"),
                    "DELETE": UserMethod("community.revokeApp", "adminDid", "Take an app's access away")}

    @operation("Grant an app access (visibility, or with manage: acting for the admins)",
               params=[S.did_query("adminDid")], body=obj({"adminDid": DID, "manage": BOOLEAN}),
               body_required=False, responses={200: S.APP_ACCESS}, errors=(403,))
    @audit_denials
    async def post(self, did: str, app_id: str) -> None:
        await self._change(did, app_id, True)

    @operation("Revoke an app's access", params=[S.did_query("adminDid")], body=obj({"adminDid": DID}),
               body_required=False, responses={200: S.APP_ACCESS}, errors=(403,))
    @audit_denials
    async def delete(self, did: str, app_id: str) -> None:
        await self._change(did, app_id, False)

    async def _change(self, did: str, app_id: str, allow: bool) -> None:
        row = await self.community(did)
        body = self.json_body(required=False)
        admin = require_did(body.get("adminDid") or self.get_query_argument("adminDid", None), "adminDid")
        manage = bool(validate.boolean(body, "manage", default=False)) if allow else False
        if allow:
            from daemon.plugin.storage import AppsTable
            target = await AppsTable.get(self.app.db, app_id)
            if target is None or not target["active"]:
                raise ApiError(404, "app_not_found", f"No active app {app_id}.")
        actor = await self.acting(admin, row)
        self.send_json(await admins.allow_app(self.app, row, app_id, actor, allow, manage=manage))


class SettingsHandler(ApiBase):
    """``GET`` (any app that sees the community) / ``PUT {adminDid, requireUserProof}``
    (admins, through an app that manages it): settings kept only in this service."""

    user_methods = {"PUT": UserMethod("community.updateSettings", "adminDid", "Change a community's settings")}
    xrpc_reads = {"GET": "community.getSettings"}

    @operation("A community's settings kept in this service (e.g. whether proofs are required)",
               responses={200: S.SETTINGS})
    async def get(self, did: str) -> None:
        row = await self.community(did)
        self.send_json(policy.settings_json(row))

    @operation("Change a community's settings (an admin, through an app that manages it)",
               body=obj({"adminDid": DID, "requireUserProof": BOOLEAN, **S.VISIBILITY_FIELDS}, ["adminDid"]),
               description="At least one of requireUserProof, rosterVisibility and listed.",
               responses={200: S.SETTINGS},
               errors={401: "a missing or bad proof of the acting user", 403: "not_admin, app_not_trusted"})
    @audit_denials
    async def put(self, did: str) -> None:
        row = await self.community(did)
        body = self.json_body()
        admin = require_did(body.get("adminDid"), "adminDid")
        required = validate.boolean(body, "requireUserProof")
        visibility = common.visibility_fields(body)
        if required is None and not visibility:
            raise validate.invalid("requireUserProof", "give at least one of requireUserProof, rosterVisibility "
                                   "and listed")
        actor = await self.acting(admin, row)
        self.send_json(await policy.update(self.app, row, actor, require_user_proof=required, **visibility))


def routes() -> list[tuple]:
    base = r"/api/v1/communities/" + common.DID
    return [
        (base + r"/settings", SettingsHandler),
        (base + r"/membership/check", CheckHandler),
        (r"/api/v1/communities", CommunitiesHandler),
        (base, CommunityHandler),
        (base + r"/members/join", JoinHandler),
        (base + r"/members/leave", LeaveHandler),
        (base + r"/members/pending", PendingHandler),
        (base + r"/members/(approve|reject)", DecisionHandler),
        (base + r"/members", MembersHandler),
        (base + r"/members/" + common.DID, MemberHandler),
        (base + r"/admins/(promote|demote|transfer)", AdminsHandler),
        (base + r"/audit-log", AuditLogHandler),
        (base + r"/move", MoveHandler),
        (base + r"/handover", HandoverHandler),
        (base + r"/apps/" + APP_ID, AppVisibilityHandler),
    ]


def membership_ref(body: dict[str, Any]) -> tuple[str | None, str | None]:
    uri = body.get("membershipUri")
    if uri is not None:
        uri = require_at_uri(uri, "membershipUri")
    cid = body.get("membershipCid")
    if cid is not None and not is_cid(cid):
        raise validate.invalid("membershipCid", "must be a CID")
    return uri, cid
