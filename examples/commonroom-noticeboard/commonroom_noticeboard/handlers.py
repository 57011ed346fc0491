"""The noticeboard's API routes (in the OpenAPI document, API-key auth): list a community's
notices, post one as a member proven by their service-auth token, remove one."""

from __future__ import annotations

from urllib.parse import unquote

from daemon.plugin import (DATETIME, DID, DID_PATTERN, NO_CONTENT, STRING, Actor, BaseHandler, UserMethod,
                           encode_cursor, obj, operation, page, prove_acting_user, query, require_did)

from commonroom_noticeboard import board

NOTICES = r"/api/v1/communities/" + DID_PATTERN + r"/notices"
NOTICE = obj({"id": STRING, "communityDid": DID,
              "authorDid": {**DID, "description": "who wrote it; absent where the community hides its members "
                                                  "from the reader (rosterVisibility)"},
              "text": STRING, "createdAt": DATETIME},
             ["id", "communityDid", "text", "createdAt"])


class NoticesHandler(BaseHandler):
    """GET/POST /api/v1/communities/:did/notices."""

    auth = "app"
    user_methods = {"POST": UserMethod("com.example.noticeboard.post", "authorDid",
                                       "Post a notice to a community's noticeboard")}

    @operation("A community's notices, newest first", paged=True,
               params=[query("viewerDid", DID, description="who reads: a private community's board shows "
                                                          "only to its members")],
               responses={200: page("notices", NOTICE)}, errors={404: "community_not_found"})
    async def get(self, raw_did: str) -> None:
        viewer = self.get_query_argument("viewerDid", "") or ""
        community, seen = await board.visible_community(self.app, unquote(raw_did),
                                                        Actor(viewer, self.principal.app_id))
        limit, cursor = self.page_params(1, "i")
        notices = await board.latest(self.app, community, limit=limit, before_id=cursor[0] if cursor else None,
                                     authors=seen.members)
        out: dict = {"notices": notices}
        if len(notices) == limit:
            out["cursor"] = encode_cursor([int(notices[-1]["id"])])
        self.send_json(out)

    @operation("Post a notice as a member (their service-auth token for com.example.noticeboard.post)",
               body=obj({"authorDid": DID, "text": STRING}, ["authorDid", "text"]),
               responses={201: obj({"notice": NOTICE}, ["notice"])},
               errors={403: "not_member", 404: "community_not_found"})
    async def post(self, raw_did: str) -> None:
        body = self.json_body()
        author = require_did(body.get("authorDid"), "authorDid")
        community, _ = await board.visible_community(self.app, unquote(raw_did),
                                                     Actor(author, self.principal.app_id))
        await prove_acting_user(self, author, required=True)   # a member-only action: always proven
        notice = await board.post_notice(self.app, community, author, body.get("text"),
                                         app_id=self.principal.app_id)
        self.send_json({"notice": notice}, 201)


class NoticeHandler(BaseHandler):
    """DELETE /api/v1/communities/:did/notices/:id."""

    auth = "app"
    user_methods = {"DELETE": UserMethod("com.example.noticeboard.remove", "moderatorDid",
                                         "Remove a notice (notices.remove)")}

    @operation("Remove a notice, as a member holding notices.remove",
               body=obj({"moderatorDid": DID}, ["moderatorDid"]), responses={204: NO_CONTENT},
               errors={403: "not_allowed", 404: "community_not_found, notice_not_found"})
    async def delete(self, raw_did: str, notice_id: str) -> None:
        body = self.json_body()
        who = require_did(body.get("moderatorDid"), "moderatorDid")
        actor = Actor(who, self.principal.app_id, proven=await prove_acting_user(self, who, required=True))
        community, _ = await board.visible_community(self.app, unquote(raw_did), actor)
        await board.remove_notice(self.app, community, notice_id, actor)
        self.set_status(204)
        self.finish()


def routes() -> list[tuple]:
    return [(NOTICES, NoticesHandler), (NOTICES + r"/([0-9]{1,18})", NoticeHandler)]


