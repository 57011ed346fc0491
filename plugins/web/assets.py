"""Templates and static files of the web app.

Static files are served under names that carry a hash of their content
(``/static/app.3f2a9c1b04de.css``), so a browser may keep them for a year
(``immutable``) and a new release is fetched at once: its pages name new files."""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import tornado.template

from daemon.plugin import ApiError, BaseHandler

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"

#: Content types of the static files we ship (nothing else is served).
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon"}
STATIC_PATTERN = r"/static/([a-z0-9_-]+)\.([0-9a-f]{12})(\.[a-z]+)"
ONE_YEAR = 365 * 24 * 3600


@dataclass(frozen=True)
class StaticFile:
    url: str
    body: bytes
    content_type: str


class WebAssets:
    """The compiled templates and the static files (read once, at start-up)."""

    def __init__(self) -> None:
        self.templates = tornado.template.Loader(str(TEMPLATE_DIR), autoescape="xhtml_escape")
        self.files: dict[str, StaticFile] = {}          # "app.css" -> file
        self.by_url: dict[str, StaticFile] = {}
        for path in sorted(STATIC_DIR.iterdir()):
            if path.suffix not in _TYPES or not path.is_file():
                continue
            body = path.read_bytes()
            digest = hashlib.sha256(body).hexdigest()[:12]
            url = f"/static/{path.stem}.{digest}{path.suffix}"
            item = StaticFile(url, body, _TYPES[path.suffix] or mimetypes.guess_type(path.name)[0] or "")
            self.files[path.name] = item
            self.by_url[url] = item
        for name in TEMPLATE_DIR.glob("*.html"):
            self.templates.load(name.name)  # compile now: a syntax error fails at start-up

    def url(self, name: str) -> str:
        """The cache-busting URL of static file `name` (KeyError if there is none)."""
        return self.files[name].url


class WebPages:
    """The web plugin's state, ``app.web`` (`cr_services`; `daemon.runtime.services.WebService`):
    the static files and templates, loaded on first use."""

    def __init__(self) -> None:
        self._assets: WebAssets | None = None

    @property
    def assets(self) -> WebAssets:
        if self._assets is None:
            self._assets = WebAssets()
        return self._assets

    def url(self, name: str) -> str:
        return self.assets.url(name)


def web_assets(app: "Application") -> WebAssets:
    return cast(WebPages, app.web).assets


class StaticHandler(BaseHandler):
    """GET /static/<name>.<hash>.<ext>: only the current version of a shipped file (an old
    hash is a 404, never a stale file cached for a year under a new name)."""

    serves_html = True  # the pages' static files: not part of the API document

    async def get(self, stem: str, digest: str, ext: str) -> None:
        item = web_assets(self.app).by_url.get(self.request.path)
        if item is None:
            raise ApiError(404, "not_found", "No such static file (it may be from an older release).")
        self.set_header("Content-Type", item.content_type)
        self.set_header("Cache-Control", f"public, max-age={ONE_YEAR}, immutable")
        self.finish(item.body)
