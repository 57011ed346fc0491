"""Commonroom: a self-hostable community service for the AT Protocol."""

__version__ = "0.2.0"

import pluggy as _pluggy

#: Decorator for plugin hook implementations: ``@hookimpl def cr_routes(app): ...``
hookimpl = _pluggy.HookimplMarker("commonroom")
