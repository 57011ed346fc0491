"""The board's page, in the site's layout: ``/c/<handle or DID>/notices``. Everyone who may
see the community reads it (signed out too); signed-in members post from its form."""

from __future__ import annotations

from urllib.parse import quote

from daemon.plugin import Actor, ApiError, Community, PageHandler, Visibility

from commonroom_noticeboard import board

IDENT = r"([^/]+)"


class BoardPage(PageHandler):
    plugin = "noticeboard"   # the entry-point name: templates come from this plugin's folder
    notices = {"posted": "Your notice is on the board."}   # flash messages: see_other(..., done=)

    async def get(self, ident: str) -> None:
        me = self.me
        community, seen = await board.visible_community(self.app, ident, Actor(me["did"] if me else "", None))
        notices, names = await self.notices_of(community, seen)
        self.render_page("board.html", title=f"Noticeboard of {community.name}", community=community,
                         notices=notices, names=names, can_post=seen.status.is_member, error=None,
                         max_length=self.app.config.plugin("noticeboard").max_length)

    async def notices_of(self, community: Community, seen: Visibility) -> tuple[list[dict], dict[str, str]]:
        """The latest notices, with their authors only where the reader may see the members,
        and how the site names those authors (`person_names`: their handles)."""
        notices = await board.latest(self.app, community, limit=self.app.config.plugin("noticeboard").page_size,
                                     authors=seen.members)
        return notices, await self.person_names(n["authorDid"] for n in notices if "authorDid" in n)

    async def submit(self, ident: str) -> None:
        assert self.me is not None  # a form's POST always has a session
        community, seen = await board.visible_community(self.app, ident, Actor(self.me["did"], None, proven=True))
        try:
            await board.post_notice(self.app, community, self.me["did"], self.form.get("text", ""), app_id=None)
        except ApiError as exc:
            if exc.status not in (400, 403, 429):
                raise
            notices, names = await self.notices_of(community, seen)
            self.render_page("board.html", title=f"Error: Noticeboard of {community.name}", status=exc.status,
                             community=community, notices=notices, names=names, can_post=exc.status != 403,
                             error=exc.message, text=self.form.get("text", ""),
                             max_length=self.app.config.plugin("noticeboard").max_length)
            return
        self.see_other(f"/c/{quote(community.handle)}/notices", done="posted")


def routes() -> list[tuple]:
    return [(r"/c/" + IDENT + r"/notices", BoardPage)]
