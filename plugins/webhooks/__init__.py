"""Webhooks: apps register endpoints and receive signed, durable, at-least-once deliveries
of the domain events of the communities they may see (docs/webhooks.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import hookimpl

from plugins.webhooks import delivery, handlers, metrics, operator, owner
from plugins.webhooks.delivery import cr_event_tx  # noqa: F401 (the hook lives with the queue it fills)
from plugins.webhooks.service import Webhooks, webhooks_of
from plugins.webhooks.settings import WebhooksConfig, check


@hookimpl
def cr_config_section() -> tuple[str, type]:
    return ("webhooks", WebhooksConfig)


@hookimpl
def cr_plugin_requires() -> list[str]:
    # Deliveries are the events of communities an app may see (the communities plugin's
    # visibility rules); subscriptions may name a community.
    return ["communities"]


@hookimpl
def cr_migrations() -> tuple[str, str]:
    return ("webhooks", str(Path(__file__).parent / "migrations"))


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return handlers.routes() + owner.routes()


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    # The webhook rules, shared with the developer pages (daemon/runtime/services.py), and the
    # plugin's dispatcher and metrics.
    return {"webhooks": Webhooks(app)}


@hookimpl
def cr_cli_commands() -> dict[str, Any]:
    return operator.cli_commands()


@hookimpl
def cr_metrics(app: Any, registry: Any) -> Any:
    webhooks_of(app).metrics = m = metrics.WebhookMetrics(app, registry)
    return m.refresh


@hookimpl
def cr_events_needed(app: Any) -> Any:
    # A pending delivery reads its event when it is sent: keep those in the outbox.
    return delivery.oldest_pending_event_seq(app.db)


@hookimpl
def cr_startup(app: Any) -> None:
    check(app.config.plugin("webhooks"))
    if app.read_only:
        # A follower serves the webhook listings from its copy; the primary delivers.
        from plugins.webhooks.settings import WebhooksConfig
        if app.config.plugin("webhooks") != WebhooksConfig():
            from daemon.plugin import ConfigError
            raise ConfigError("a follower delivers no webhooks (the primary does): leave this "
                              "section out of a follower's config.yaml", "webhooks")
        return
    webhooks_of(app).dispatcher = d = delivery.Dispatcher(app)
    d.start()


@hookimpl
def cr_shutdown(app: Any) -> Any:
    d = webhooks_of(app).dispatcher
    return d.stop() if d is not None else None
