"""The links plugins add to named places of the pages (`cr_web_links`, `daemon.plugin.pages.SLOTS`),
the web plugin's own navigation among them: what a template's ``links(slot, **values)``
returns."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from daemon.plugin import Link

log = logging.getLogger("commonroom.web")


def _escaped(value: Any) -> Any:
    """Slot values with every string URL-escaped, for ``href.format_map``."""
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    if isinstance(value, str):
        return quote(value, safe=":@%")
    return value


def slot_links(app: Any, slot: str, values: dict[str, Any]) -> list[dict[str, str]]:
    """The links of `slot` for these values: ``[{label, href}]``. A plugin's link whose
    `when` or `href` fails is left out (and logged): one plugin's bug never breaks a page."""
    out = []
    for link in app.declarations.links[slot]:
        try:
            if link.when is not None and not link.when(values):
                continue
            href = link.href(values) if callable(link.href) else \
                link.href.format_map(_escaped({k: v for k, v in values.items() if k != "app"}))
        except Exception:  # noqa: BLE001
            log.exception("the link %r of slot %s failed", link.label, slot)
            continue
        if href:
            out.append({"label": link.label, "href": href})
    return out


def _signed_in(values: dict[str, Any]) -> bool:
    return values.get("me") is not None


#: The site's own navigation, added like any plugin's links.
NAVIGATION = [
    Link("site.nav", "Home", "/"),
    Link("site.nav", "Discover", "/discover"),
    Link("site.nav", "Create", "/new", when=_signed_in),
    Link("site.nav", "My apps", "/apps", when=_signed_in),
]
