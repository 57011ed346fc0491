"""The interfaces of the built-in plugins' services other than the communities' (which is in
`daemon.plugin`): `app.service(AppsService)`, ...

    from daemon.plugin.services import AppsService

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.runtime.services import AppsService, OAuthService, RecordsService, WebhooksService, WebService

__all__ = [
    "AppsService", "WebhooksService", "OAuthService", "WebService", "RecordsService",
]
