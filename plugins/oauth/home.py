"""The service's own small page: a login form, or who you are and a logout button.

Apps build their own interfaces on the API; this page lets a person sign in to the
service itself (and register apps with the session) without any other front end.
"""

from __future__ import annotations

import html

from daemon.http import ApiError, BaseHandler
from daemon.sessions import SID_COOKIE, authenticate_session

_STYLE = ("body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}"
          "input,button{font:inherit;padding:.4rem .6rem}input{width:100%;box-sizing:border-box}"
          "code{background:#f3f3f3;padding:0 .2rem}")

_LOGIN = """<h1>Commonroom</h1>
<p>Sign in with your AT Protocol account (for example a Bluesky handle).</p>
<form method="post" action="/login">
  <label for="input">Handle, DID or server address</label>
  <input id="input" name="input" autocomplete="username" required placeholder="alice.example.com">
  <p><button type="submit">Sign in</button></p>
</form>"""

_LOGGED_IN = """<h1>Commonroom</h1>
<p>Signed in as <strong id="handle">{handle}</strong><br><code id="did">{did}</code></p>
<p>Register and manage apps with <code>/api/v1/apps</code> from this browser session.</p>
<form id="logout" method="post" action="/logout"><button type="submit">Sign out</button></form>
<script>
document.getElementById("logout").addEventListener("submit", async (e) => {{
  e.preventDefault();
  const csrf = (document.cookie.match(/(?:^|; )csrf-token=([^;]*)/) || [])[1] || "";
  await fetch("/logout", {{method: "POST", headers: {{"x-csrf-token": decodeURIComponent(csrf)}}}});
  location.reload();
}});
</script>"""


class HomeHandler(BaseHandler):
    """GET / and GET /login."""

    serves_html = True

    async def get(self) -> None:
        body = _LOGIN
        sid = self.get_cookie(SID_COOKIE)
        if sid:
            try:
                who = await authenticate_session(self.app, sid)
                body = _LOGGED_IN.format(handle=html.escape(who.handle or who.did or ""),
                                         did=html.escape(who.did or ""))
            except ApiError:
                pass  # an ended session: show the form
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy",
                        "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
                        "connect-src 'self'; form-action 'self' *; frame-ancestors 'none'")
        self.finish(f"<!doctype html><html lang=en><meta charset=utf-8>"
                    f"<meta name=viewport content='width=device-width,initial-scale=1'>"
                    f"<title>Commonroom</title><style>{_STYLE}</style>{body}</html>")
