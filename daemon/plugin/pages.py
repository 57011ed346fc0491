"""The parts of pages most plugins do not touch: the exceptions a page raises or the core raises for it,
the form's field and media type, `safe_next` for a `next` path, the slots' catalogue.

    from daemon.plugin.pages import SLOTS, safe_next

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.runtime.declarations import SLOTS
from daemon.runtime.pages import CSRF_FIELD, FORM_TYPE, PageNameError, safe_next, SignInRequired

__all__ = [
    "PageNameError", "SignInRequired", "CSRF_FIELD", "FORM_TYPE", "safe_next", "SLOTS",
]
