"""A plugin's pages and links in the site (issue 23, item 4): its own templates and static
files, pages in the site's layout for signed-in people and signed-out visitors, forms with
the CSRF field, the site's error pages, links in named slots, page names confined to the
plugin's folder, and what start-up refuses."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from commonroom_testing.app import build_config
from daemon.plugin import ApiError, Link, PageHandler, WebFolders, hookimpl
from daemon.plugin.pages import PageNameError
from daemon.plugin.testing import FakeClock
from daemon.runtime.app import create_app
from daemon.runtime.declarations import DeclarationError
from tests.fixtures_communities import seed_community
from tests.helpers import login_as

BOARD = """{% extends "base.html" %}
{% block main %}{% if notice %}<p role="status">{{ notice }}</p>{% end %}<h1>Board of {{ community }}</h1>
<link rel="stylesheet" href="{{ static('board/board.css') }}">
{% include "board/_note.html" %}
<form method="post"><input type="hidden" name="{{ csrf_field }}" value="{{ csrf }}"><button>Post</button></form>
{% end %}"""


def folders(tmp_path: Path, **templates: str) -> WebFolders:
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "static").mkdir(exist_ok=True)
    files = {"board.html": BOARD, "_note.html": "<p class=note>{{ note }}</p>", **templates}
    for name, text in files.items():
        (tmp_path / "templates" / name).write_text(text)
    (tmp_path / "static" / "board.css").write_text(".note { color: green }")
    return WebFolders(templates=str(tmp_path / "templates"), static=str(tmp_path / "static"))


class BoardPage(PageHandler):
    plugin = "board"
    notices = {"posted": "Your note is up."}

    async def get(self, ident: str) -> None:
        if ident == "missing":
            raise ApiError(404, "not_found", "No such board.")
        if ident == "closed":  # a plugin's own refusal code
            raise ApiError(403, "not_member", "Only members may read this board.")
        self.render_page("board.html", title="Board", community=ident, note="hello")

    async def submit(self, ident: str) -> None:
        self.see_other(f"/board/{ident}", done="posted")


class PrivateBoard(PageHandler):
    plugin = "board"
    login_required = True

    async def get(self) -> None:
        self.render_page("board.html", title="Mine", community="mine", note="yours")


class UploadPage(PageHandler):
    """A form that sends a file: what arrived is kept in `received` for the test to read."""
    plugin = "board"
    login_required = True
    accepts_files = True
    max_body = 64 * 1024
    received: list[tuple[str, Any]] = []

    async def submit(self) -> None:
        picture = self.files.get("picture", [])
        UploadPage.received.append((self.form.get("caption", ""), [(f.filename, f.content_type, f.body)
                                                                   for f in picture]))
        self.see_other("/board-upload", done="posted")


class Escaping(PageHandler):
    plugin = "board"

    async def get(self) -> None:
        self.render_page("../board/board.html", title="Escape")


class Borrowing(PageHandler):
    """A page of the board that switches `plugin` to render another plugin's template."""
    plugin = "board"

    async def get(self) -> None:
        self.plugin = "other"
        self.render_page("secret.html", title="Borrowed")


class Impostor(PageHandler):
    plugin = "other"   # routed by the board: refused at start-up

    async def get(self) -> None:
        self.render_page("secret.html", title="Impostor")


class Other:
    __name__ = "other"

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "secret.html").write_text('{% extends "base.html" %}{% block main %}<p>other secret</p>{% end %}')
        self.web = WebFolders(templates=str(folder))

    @hookimpl
    def cr_web_folders(self) -> WebFolders:
        return self.web


def members_only(values: dict[str, Any]) -> bool:
    return bool(values["membership"].get("isMember"))


class Board:
    __name__ = "board"  # the plugin's name (pluggy's canonical name of an object): its pages' `plugin`

    def __init__(self, web: WebFolders, links: list[Link] | None = None) -> None:
        self.web = web
        self.links = links

    @hookimpl
    def cr_web_folders(self) -> WebFolders:
        return self.web

    @hookimpl
    def cr_web_links(self) -> list[Link]:
        return self.links if self.links is not None else [
            Link("site.nav", "Boards", "/boards"),
            Link("community.page", "Board of notes", "/board/{community[handle]}", when=members_only),
            Link("person.home", "My notices", "/board-mine"),
            Link("community.settings", "Noticeboard settings", "/board/{community[did]}/settings"),
            Link("member.actions", "Notices by", lambda v: f"/board/{v['community']['handle']}?by={v['member']['did']}"),
        ]

    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/board/([^/]+)", BoardPage), (r"/board-mine", PrivateBoard), (r"/board-escape", Escaping),
                (r"/board-upload", UploadPage),
                (r"/board-borrowing", Borrowing), *self.extra_routes]

    extra_routes: list[tuple] = []


@pytest.fixture
def extra_plugins(tmp_path: Path) -> tuple:
    return (Board(folders(tmp_path)), Other(tmp_path / "other"))


def cookie(session: Any) -> dict[str, str]:
    return {"Cookie": f"sid={session.sid}"}


async def test_a_plugin_page_is_drawn_in_the_sites_layout_for_a_signed_out_visitor(app, client):
    resp = await client.get("/board/club.test")
    assert resp.status == 200, resp.text
    page = resp.text
    assert "<h1>Board of club.test</h1>" in page and '<p class=note>hello</p>' in page
    assert '<header class="site-header">' in page and '<footer class="site-footer">' in page
    assert ">Sign in</a>" in page and resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    css = re.search(r'href="(/static/board/board\.[0-9a-f]{12}\.css)"', page).group(1)
    served = await client.get(css)
    assert served.status == 200 and served.text == ".note { color: green }"
    assert served.headers["Content-Type"].startswith("text/css")


async def test_a_signed_in_person_sees_themselves_and_posts_the_form_with_its_csrf_field(app, client):
    session = await login_as(app, "did:plc:boardreader", "reader.test")
    page = (await client.get("/board/club.test", headers=cookie(session))).text
    assert "Signed in as <strong class=\"who-handle\">reader.test</strong>" in page
    assert f'name="_csrf" value="{session.csrf}"' in page
    posted = await client.post("/board/club.test", body=f"_csrf={session.csrf}",
                               headers={**cookie(session), "Content-Type": "application/x-www-form-urlencoded"})
    assert posted.status == 303 and posted.headers["Location"] == "/board/club.test?done=posted"
    after = await client.get(posted.headers["Location"], headers=cookie(session))
    assert '<p role="status">Your note is up.</p>' in after.text        # the flash message
    assert '<p role="status">' not in (await client.get("/board/club.test?done=forged")).text   # fixed words only
    forged = await client.post("/board/club.test", body="_csrf=wrong",
                               headers={**cookie(session), "Content-Type": "application/x-www-form-urlencoded"})
    assert forged.status == 403 and "This form could not be sent" in forged.text and "site-header" in forged.text


async def test_the_sites_error_and_sign_in_pages_answer_for_a_plugins_page(app, client):
    missing = await client.get("/board/missing")
    assert missing.status == 404 and "<h1>Page not found</h1>" in missing.text and "site-header" in missing.text
    signin = await client.get("/board-mine")
    assert signin.status == 401 and "Sign in to continue" in signin.text
    session = await login_as(app, "did:plc:boardmine", "mine.test")
    mine = await client.get("/board-mine", headers=cookie(session))
    assert mine.status == 200 and "<p class=note>yours</p>" in mine.text


def multipart(fields: dict[str, str], files: dict[str, tuple[str, str, bytes]],
              boundary: str = "b0undaryXYZ") -> tuple[bytes, dict[str, str]]:
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts += [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"; filename="{name}"\r\n'
              f"Content-Type: {ctype}\r\n\r\n".encode() + body + b"\r\n"
              for k, (name, ctype, body) in files.items()]
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), {
        "Content-Type": f"multipart/form-data; boundary={boundary}"}


async def test_a_plugins_form_may_send_a_file_when_its_page_accepts_files(app, client):
    """`PageHandler.accepts_files`: the fields in `form`, the files in `files`, the CSRF field
    checked as in any form; a page that does not accept files answers 415; the page's
    `max_body` caps the upload (413); a body that is not a form is a 400 page."""
    UploadPage.received.clear()
    session = await login_as(app, "did:plc:boarduploader", "uploader.test")
    photo = bytes(range(256)) * 8
    body, headers = multipart({"_csrf": session.csrf, "caption": "Our stall, Saturday"},
                              {"picture": ("stall.png", "image/png", photo)})
    sent = await client.post("/board-upload", body=body, headers={**cookie(session), **headers})
    assert sent.status == 303 and sent.headers["Location"] == "/board-upload?done=posted"
    assert UploadPage.received == [("Our stall, Saturday", [("stall.png", "image/png", photo)])]

    body, headers = multipart({"_csrf": "forged", "caption": "x"}, {"picture": ("a.png", "image/png", b"x")})
    forged = await client.post("/board-upload", body=body, headers={**cookie(session), **headers})
    assert forged.status == 403 and "This form could not be sent" in forged.text
    body, headers = multipart({"_csrf": session.csrf}, {"picture": ("big.png", "image/png", b"x" * 70_000)})
    too_big = await client.post("/board-upload", body=body, headers={**cookie(session), **headers})
    assert too_big.status == 413
    broken = await client.post("/board-upload", body=b"--nope\r\n\r\n", headers={
        **cookie(session), "Content-Type": "multipart/form-data; boundary=other"})
    assert broken.status == 400 and "site-header" in broken.text
    assert len(UploadPage.received) == 1                               # none of those reached submit

    body, headers = multipart({"_csrf": session.csrf}, {"picture": ("a.png", "image/png", b"x")})
    not_here = await client.post("/board/club.test", body=body, headers={**cookie(session), **headers})
    assert not_here.status == 415 and "site-header" in not_here.text


async def test_a_plugins_own_refusal_gets_the_sites_permission_page(app, client):
    closed = await client.get("/board/closed")
    assert closed.status == 403 and "<h1>You do not have permission for this</h1>" in closed.text
    assert "Only members may read this board." in closed.text and "site-header" in closed.text


def test_the_slots_documentation_names_the_keys_the_community_page_slot_gets():
    from daemon.plugin.pages import SLOTS
    from plugins.communities.schemas import DETAILS
    community = DETAILS["properties"]["community"]["properties"]
    named = re.search(r"`community`: ([^;)]*)", SLOTS["community.page"]).group(1)
    keys = [k.strip() for k in named.split(",") if k.strip() not in ("its JSON", "...")]
    assert keys and all(k in community for k in keys), (keys, sorted(community))


async def test_a_page_name_outside_the_plugins_folder_is_never_rendered(app, client):
    resp = await client.get("/board-escape")
    assert resp.status == 500 and "Something went wrong" in resp.text and "Board of" not in resp.text
    borrowed = await client.get("/board-borrowing")   # another plugin's folder, by changing `plugin`
    assert borrowed.status == 500 and "other secret" not in borrowed.text
    from daemon.runtime.pages import page_name
    for bad in ("../x.html", "/etc/passwd", "a/../../b.html", "board.txt", "a\\b.html", ""):
        with pytest.raises(PageNameError):
            page_name("board", bad)


async def test_plugins_links_appear_in_their_slots_with_the_sites_own(app, client):
    member, outsider = "did:plc:boardmember", "did:plc:boardoutsider"
    did = await seed_community(app, "did:plc:boardadmin", members=(member,))
    handle = f"{did[8:20]}.test"
    admin = await login_as(app, "did:plc:boardadmin", "admin.test")

    home = (await client.get("/")).text
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', home, re.S).group(1)
    assert re.findall(r">([^<]+)</a>", nav) == ["Home", "Discover", "Boards"]   # signed out: no Create
    signed_in_home = (await client.get("/", headers=cookie(admin))).text
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', signed_in_home, re.S).group(1)
    assert re.findall(r">([^<]+)</a>", nav) == ["Home", "Discover", "Create", "My apps", "Boards"]
    assert 'href="/" aria-current="page"' in nav
    assert '<a href="/board-mine">My notices</a>' in signed_in_home

    as_member = (await client.get(f"/c/{handle}", headers=cookie(await login_as(app, member, "m.test")))).text
    assert f'<a href="/board/{handle}">Board of notes</a>' in as_member
    as_outsider = (await client.get(f"/c/{handle}", headers=cookie(await login_as(app, outsider, "o.test")))).text
    assert "Board of notes" not in as_outsider

    settings = (await client.get(f"/c/{handle}/settings", headers=cookie(admin))).text
    assert f'<a href="/board/{did}/settings">Noticeboard settings</a>' in settings
    members = (await client.get(f"/c/{handle}/settings/members", headers=cookie(admin))).text
    assert f'href="/board/{handle}?by={member}">Notices by' in members


def _tables(path: Path) -> list[str]:
    if not path.exists():
        return []
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: Board(folders(tmp), [Link("sidebar", "Boards", "/boards")]),
     (DeclarationError, "plugin 'board' adds the link 'Boards' to the unknown slot 'sidebar'")),
    (lambda tmp: Board(folders(tmp), [Link("site.nav", "Boards", "/boards")] * 2),
     (DeclarationError, "plugin 'board' adds the link 'Boards' to the slot 'site.nav' twice")),
    (lambda tmp: Board(WebFolders(templates=str(tmp / "nowhere"))),
     (DeclarationError, "plugin 'board' declares the templates folder")),
    (lambda tmp: type("Routing", (Board,), {"extra_routes": [(r"/impostor", Impostor)]})(folders(tmp)),
     (DeclarationError, "plugin 'board' routes /impostor to Impostor, a page of the plugin 'other'")),
    (lambda tmp: Board(folders(tmp, **{"sneaky.html": '{% include "board/../../../etc/hostname" %}'})),
     (PageNameError, "is outside its folder")),
])
def test_start_up_refuses_bad_web_declarations_before_any_migration(tmp_path, io_loop, make, message):
    from daemon.runtime.plugins import build_plugin_manager
    config, _ = build_config(tmp_path / "state")
    pm = build_plugin_manager(load_entry_points=False)
    pm.register(make(tmp_path), name="board")
    error, text = message
    with pytest.raises(error, match=re.escape(text)):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))
    assert _tables(config.database_path) == []


@pytest.mark.parametrize("config_overrides", [{"plugins": {"disabled": ["web"]}}])
async def test_without_the_web_plugin_a_plugins_page_answers_plain_text(app, client):
    resp = await client.get("/board/club.test")
    assert resp.status == 200 and resp.text == "Board\n"
