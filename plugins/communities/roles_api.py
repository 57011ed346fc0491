"""API-key routes for roles (docs/communities.md, "Roles and capabilities"):

    GET    …/roles                           any app that sees the community
    POST   …/roles                           {adminDid, name, description?, capabilities?, collections?}
    PUT    …/roles/:name                     {adminDid, description?, capabilities?, collections?}
    DELETE …/roles/:name                     {adminDid}
    POST   …/members/:memberDid/roles        {adminDid, role}
    DELETE …/members/:memberDid/roles/:name  {adminDid}

Changes are an admin's, through an app that manages the community (as every admin action).
"""

from __future__ import annotations

from typing import Any

from daemon.plugin import BOOLEAN, DID, STRING, UserMethod, arr, obj, operation
from daemon.plugin.http import enum_of
from plugins.communities import common, roles
from plugins.communities import schemas as S
from plugins.communities.denials import audit_denials
from plugins.communities.api import ApiBase
from plugins.communities.capabilities import PER_COLLECTION, ROLE_NAME

NAME = "(" + ROLE_NAME.pattern + ")"
NAME_SCHEMA = {"type": "string", "pattern": "^" + ROLE_NAME.pattern + "$"}
CAPABILITY = enum_of("capabilities", {"type": "string"})  # the catalogue, plugins' own too (app.declarations)
GRANT = obj({"collection": {"type": "string", "description": "a collection NSID"},
             "capabilities": arr({"type": "string", "enum": sorted(PER_COLLECTION)}, minItems=1)},
            ["collection", "capabilities"])
ROLE = obj({"name": STRING, "builtin": BOOLEAN, "description": STRING, "capabilities": arr(STRING),
            "collections": arr(GRANT)}, ["name", "builtin", "capabilities", "collections"])
FIELDS = {"description": {"type": "string", "maxLength": 300}, "capabilities": arr(CAPABILITY),
          "collections": arr(GRANT, maxItems=50)}
HELD = obj({"communityDid": DID, "memberDid": DID, "roles": arr(STRING)}, ["communityDid", "memberDid", "roles"])
ERRORS = {403: "not_admin, app_not_trusted", 404: "role_not_found, not_member",
          409: "role_exists, role_builtin, role_already_held, role_not_held, too_many_roles", 502: ""}


def _admin(handler: ApiBase, body: dict[str, Any]) -> str:
    return common.body_did({"adminDid": body.get("adminDid") or handler.get_query_argument("adminDid", None)},
                           "adminDid")


class RolesHandler(ApiBase):
    user_methods = {"POST": UserMethod("role.create", "adminDid", "Define a custom role")}
    xrpc_reads = {"GET": "role.list"}   # an XRPC query too (daemon/atproto/xrpc.py)

    @operation("The community's roles: built-in and custom", responses={
        200: obj({"communityDid": DID, "roles": arr(ROLE)}, ["communityDid", "roles"])})
    async def get(self, did: str) -> None:
        row = await common.community_for(self, did)
        self.send_json(await roles.list_roles(self.app, row))

    @operation("Define a custom role (an admin, through an app that manages the community)",
               body=obj({"adminDid": DID, "name": NAME_SCHEMA, **FIELDS}, ["adminDid", "name"]),
               responses={201: ROLE}, errors=ERRORS)
    @audit_denials
    async def post(self, did: str) -> None:
        row = await common.community_for(self, did)
        body = self.json_body()
        admin = common.body_did(body, "adminDid")
        actor = await self.acting(admin, row)
        self.send_json(await roles.create_role(self.app, row, actor, body.get("name"), body), 201)


class RoleHandler(ApiBase):
    user_methods = {"PUT": UserMethod("role.update", "adminDid", "Redefine a custom role"),
                    "DELETE": UserMethod("role.delete", "adminDid", "Delete a custom role")}

    @operation("Redefine a custom role (its description and capabilities are replaced)",
               body=obj({"adminDid": DID, **FIELDS}, ["adminDid"]), responses={200: ROLE}, errors=ERRORS)
    @audit_denials
    async def put(self, did: str, name: str) -> None:
        row = await common.community_for(self, did)
        body = self.json_body()
        actor = await self.acting(common.body_did(body, "adminDid"), row)
        self.send_json(await roles.update_role(self.app, row, actor, name, body))

    @operation("Delete a custom role; its holders lose it", params=[S.did_query("adminDid")],
               body=obj({"adminDid": DID}), body_required=False,
               responses={200: obj({"communityDid": DID, "name": STRING, "deleted": BOOLEAN, "holders": arr(DID)},
                                   ["communityDid", "name", "deleted", "holders"])}, errors=ERRORS)
    @audit_denials
    async def delete(self, did: str, name: str) -> None:
        row = await common.community_for(self, did)
        actor = await self.acting(_admin(self, self.json_body(required=False)), row)
        self.send_json(await roles.delete_role(self.app, row, actor, name))


class MemberRolesHandler(ApiBase):
    user_methods = {"POST": UserMethod("role.assign", "adminDid", "Give a member a role")}

    @operation("Give a member a role (moderator, or a custom role)",
               body=obj({"adminDid": DID, "role": NAME_SCHEMA}, ["adminDid", "role"]),
               responses={200: HELD}, errors=ERRORS)
    @audit_denials
    async def post(self, did: str, member_did: str) -> None:
        row = await common.community_for(self, did)
        member = common.path_did(member_did)
        body = self.json_body()
        actor = await self.acting(common.body_did(body, "adminDid"), row)
        self.send_json(await roles.assign(self.app, row, actor, member, body.get("role")))


class MemberRoleHandler(ApiBase):
    user_methods = {"DELETE": UserMethod("role.unassign", "adminDid", "Take a role from a member")}

    @operation("Take a role from a member", params=[S.did_query("adminDid")], body=obj({"adminDid": DID}),
               body_required=False, responses={200: HELD}, errors=ERRORS)
    @audit_denials
    async def delete(self, did: str, member_did: str, name: str) -> None:
        row = await common.community_for(self, did)
        member = common.path_did(member_did)
        actor = await self.acting(_admin(self, self.json_body(required=False)), row)
        self.send_json(await roles.unassign(self.app, row, actor, member, name))


def routes() -> list[tuple]:
    base = r"/api/v1/communities/" + common.DID
    return [
        (base + r"/roles", RolesHandler),
        (base + r"/roles/" + NAME, RoleHandler),
        (base + r"/members/" + common.DID + r"/roles", MemberRolesHandler),
        (base + r"/members/" + common.DID + r"/roles/" + NAME, MemberRoleHandler),
    ]
