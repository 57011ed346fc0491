"""What the webhooks plugin offers other plugins: ``app.webhooks``, the interface
`daemon.runtime.services.WebhooksService`, registered through `cr_services`. Each method delegates
to the webhook rules the JSON routes use (service.py); the object also holds the plugin's
running parts: the dispatcher (from `cr_startup`) and the metrics (from `cr_metrics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from plugins.webhooks import service

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application
    from plugins.webhooks.delivery import Dispatcher
    from plugins.webhooks.metrics import WebhookMetrics
    from daemon.plugin import Row


class Webhooks:
    """`daemon.runtime.services.WebhooksService`, bound to one application."""

    max_concurrency = service.MAX_CONCURRENCY

    def __init__(self, app: "Application") -> None:
        self.app = app
        #: The delivery loop, from start-up to shutdown (delivery.py).
        self.dispatcher: Dispatcher | None = None
        #: The plugin's metrics, once `/metrics` is set up (metrics.py).
        self.metrics: WebhookMetrics | None = None

    def settings(self) -> Any:
        return service.settings(self.app)

    def webhook_json(self, row: "Row") -> dict[str, Any]:
        return service.webhook_json(row)

    def delivery_json(self, row: "Row") -> dict[str, Any]:
        return service.delivery_json(row)

    async def checked_url(self, body: dict[str, Any], required: bool) -> str | None:
        return await service.checked_url(self.app, body, required)

    async def owned(self, app_id: str, webhook_id: str) -> "Row":
        return await service.owned(self.app, app_id, webhook_id)

    async def list_webhooks(self, app_id: str, limit: int, after: Any) -> list["Row"]:
        return await service.list_webhooks(self.app, app_id, limit, after)

    async def delivery_counts(self, webhook_id: str) -> dict[str, int]:
        return await service.delivery_counts(self.app, webhook_id)

    async def list_deliveries(self, app_id: str, webhook_id: str, limit: int, before: Any,
                              status: str | None) -> list["Row"]:
        return await service.list_deliveries(self.app, app_id, webhook_id, limit, before, status)

    async def create(self, app_id: str, **fields: Any) -> tuple["Row", str]:
        return await service.create(self.app, app_id, **fields)

    async def update(self, app_id: str, webhook_id: str, **fields: Any) -> "Row":
        return await service.update(self.app, app_id, webhook_id, **fields)

    async def delete(self, app_id: str, webhook_id: str) -> None:
        await service.delete(self.app, app_id, webhook_id)

    async def rotate_secret(self, app_id: str, webhook_id: str) -> tuple["Row", str, str | None]:
        return await service.rotate_secret(self.app, app_id, webhook_id)

    async def delivery_detail(self, app_id: str, webhook_id: str, delivery_id: int) -> dict[str, Any]:
        return await service.delivery_detail(self.app, app_id, webhook_id, delivery_id)

    async def redeliver(self, app_id: str, webhook_id: str, delivery_id: int) -> "Row":
        return await service.redeliver(self.app, app_id, webhook_id, delivery_id)


def webhooks_of(app: "Application") -> Webhooks:
    """This plugin's own service object (its private parts included)."""
    return cast(Webhooks, app.webhooks)
