"""Templates and static files of the web app, and of the plugins that ship their own
(`cr_web_folders`).

Static files are served under names that carry a hash of their content
(``/static/app.3f2a9c1b04de.css``; a plugin's ``/static/<plugin>/board.3f2a9c1b04de.css``),
so a browser may keep them for a year (``immutable``) and a new release is fetched at
once: its pages name new files.

Template names: the site's own are plain (``base.html``, ``_card.html``); a plugin's are
``<plugin>/<file>``, read only from that plugin's folder. A name that could leave its
folder (``..``, an absolute path, a link pointing out) is refused, at start-up for the
names templates use (every template is compiled then)."""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import tornado.template

from daemon.plugin import ApiError, BaseHandler
from daemon.plugin.pages import PageNameError

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"

#: Content types of the static files we ship (nothing else is served).
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon"}
STATIC_PATTERN = r"/static/([a-z0-9_-]+)\.([0-9a-f]{12})(\.[a-z]+)"
PLUGIN_STATIC_PATTERN = r"/static/([a-z0-9_-]+)/([a-z0-9_-]+)\.([0-9a-f]{12})(\.[a-z]+)"
_NAME = re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*\.html$")
ONE_YEAR = 365 * 24 * 3600


@dataclass(frozen=True)
class StaticFile:
    url: str
    body: bytes
    content_type: str


class SiteLoader(tornado.template.BaseLoader):
    """The site's templates and each plugin's: ``<plugin>/<file>`` from that plugin's
    folder, any other name from the site's. Names are never relative to the template that
    uses them, and never leave their folder."""

    def __init__(self, folders: dict[str, Path]) -> None:
        super().__init__(autoescape="xhtml_escape")
        self.folders = {plugin: folder.resolve() for plugin, folder in folders.items()}
        self.site = TEMPLATE_DIR.resolve()

    def resolve_path(self, name: str, parent_path: str | None = None) -> str:
        return name

    def path_of(self, name: str) -> Path:
        plugin, sep, rest = name.partition("/")
        folder, inside = (self.folders[plugin], rest) if sep and plugin in self.folders else (self.site, name)
        path = (folder / inside).resolve() if _NAME.match(inside) else None
        if path is None or not path.is_relative_to(folder):
            raise PageNameError(f"template {name!r} is outside its folder (plain names and sub-folders "
                                "ending in .html)")
        return path

    def _create_template(self, name: str) -> tornado.template.Template:
        return tornado.template.Template(self.path_of(name).read_bytes(), name=name, loader=self)


class WebAssets:
    """The compiled templates and the static files (read once, at start-up)."""

    def __init__(self, plugin_folders: dict[str, Any] | None = None) -> None:
        plugin_folders = plugin_folders or {}
        templates = {p: Path(f.templates) for p, f in plugin_folders.items() if f.templates}
        self.templates = SiteLoader(templates)
        self.files: dict[str, StaticFile] = {}          # "app.css", "<plugin>/board.css" -> file
        self.by_url: dict[str, StaticFile] = {}
        self._add_static(STATIC_DIR, "")
        for plugin, folders in plugin_folders.items():
            if folders.static:
                self._add_static(Path(folders.static), plugin + "/")
        for name in TEMPLATE_DIR.glob("*.html"):
            self.templates.load(name.name)  # compile now: a syntax error fails at start-up
        for plugin, folder in templates.items():
            for path in sorted(folder.rglob("*.html")):
                self.templates.load(f"{plugin}/{path.relative_to(folder).as_posix()}")

    def _add_static(self, folder: Path, prefix: str) -> None:
        for path in sorted(folder.iterdir()):
            if path.suffix not in _TYPES or not path.is_file():
                continue
            body = path.read_bytes()
            digest = hashlib.sha256(body).hexdigest()[:12]
            url = f"/static/{prefix}{path.stem}.{digest}{path.suffix}"
            item = StaticFile(url, body, _TYPES[path.suffix] or mimetypes.guess_type(path.name)[0] or "")
            self.files[prefix + path.name] = item
            self.by_url[url] = item

    def has_template(self, name: str) -> bool:
        """Whether `name` is a plugin's template (``<plugin>/<file>``); PageNameError for a
        name that leaves its folder."""
        plugin = name.partition("/")[0]
        return plugin in self.templates.folders and self.templates.path_of(name).is_file()

    def url(self, name: str) -> str:
        """The cache-busting URL of static file `name` (KeyError if there is none)."""
        return self.files[name].url


class WebPages:
    """The web plugin's state, ``app.web`` (`cr_services`; `daemon.runtime.services.WebService`):
    the static files and templates, loaded on first use."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        self._assets: WebAssets | None = None

    @property
    def assets(self) -> WebAssets:
        if self._assets is None:
            self._assets = WebAssets(self.app.declarations.web_folders)
        return self._assets

    def url(self, name: str) -> str:
        return self.assets.url(name)


def web_assets(app: "Application") -> WebAssets:
    return cast(WebPages, app.web).assets


class StaticHandler(BaseHandler):
    """GET /static/<name>.<hash>.<ext>: only the current version of a shipped file (an old
    hash is a 404, never a stale file cached for a year under a new name)."""

    serves_html = True  # the pages' static files: not part of the API document

    async def get(self, *parts: str) -> None:
        item = web_assets(self.app).by_url.get(self.request.path)
        if item is None:
            raise ApiError(404, "not_found", "No such static file (it may be from an older release).")
        self.set_header("Content-Type", item.content_type)
        self.set_header("Cache-Control", f"public, max-age={ONE_YEAR}, immutable")
        self.finish(item.body)
