"""The home page at `/` and `GET /login`.

The oauth plugin routes both (plugins/oauth/handlers.py); the page itself is the web
plugin's home (plugins/web, see docs/web.md): signed out, what this service is and the
sign-in form that posts to `POST /login`; signed in, the person's communities.
`GET /login` sends the browser to that page, keeping a safe `next` path.
"""

from __future__ import annotations

from urllib.parse import urlencode

from plugins.web.base import safe_next
from plugins.web.pages import HomePage


class HomeHandler(HomePage):
    """GET / (the web plugin's home page). `LoginHandler.get` calls ``HomeHandler.get``
    with itself (GET /login): that one is redirected to the home page."""

    async def get(self) -> None:
        if not isinstance(self, HomePage):  # GET /login
            target = safe_next(self.get_query_argument("next", None))
            self.redirect("/" + (f"?{urlencode({'next': target})}" if target else ""), status=303)
            return
        await super().get()
