"""One way to write a moment on every page, the site's and plugins': "23 Nov 2026, 20:40
UTC". The server writes UTC; the web plugin's `app.js` rewrites each `<time data-local>` in
the browser's own time zone (same format, the zone's short name instead of UTC), so without
scripts a person reads UTC. Public as ``daemon.plugin.when`` and ``daemon.plugin.moment``;
every page template has both (``{% raw moment(n["createdAt"]) %}``)."""

from __future__ import annotations

from datetime import datetime, timezone

from tornado.escape import xhtml_escape

FORMAT = "%-d %b %Y, %H:%M UTC"


def parse(stamp: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def when(stamp: str | None) -> str:
    """An ISO timestamp as text: "23 Nov 2026, 20:40 UTC" (for sentences)."""
    if not stamp:
        return ""
    moment = parse(stamp)
    return moment.strftime(FORMAT) if moment is not None else stamp


def moment(stamp: str | None) -> str:
    """The same as a `<time>` element the browser may show in its own time zone
    (escaped HTML: templates write it with `{% raw %}`)."""
    if not stamp:
        return ""
    parsed = parse(stamp)
    if parsed is None:
        return xhtml_escape(stamp)
    iso = parsed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f'<time datetime="{iso}" data-local>{xhtml_escape(parsed.strftime(FORMAT))}</time>'
