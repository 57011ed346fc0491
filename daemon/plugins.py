"""Loading plugins and calling hooks."""

from __future__ import annotations

import importlib
import inspect
import logging
from importlib.metadata import entry_points
from typing import Any, Iterable

import pluggy

from daemon import hookspecs

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "commonroom.plugins"

#: Built-in features, loaded like any other plugin; each can be disabled by its name.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "plugins.apikeys",
    "plugins.oauth",
    "plugins.communities",
    "plugins.records",
    "plugins.webhooks",
)

# Hooks whose implementations must be plain functions (see daemon.hookspecs).
_SYNC_ONLY_HOOKS = ("cr_authenticate", "cr_user_repo")


class PluginError(Exception):
    """A plugin could not be loaded or breaks the hook rules."""


def plugin_name(module_path: str) -> str:
    return module_path.rsplit(".", 1)[-1]


def build_plugin_manager(disabled: Iterable[str] = (), extra: Iterable[Any] = (),
                         load_entry_points: bool = True) -> pluggy.PluginManager:
    """Register the default plugins, then third-party entry points, minus `disabled`.

    `extra` are plugin objects registered last (tests). A misspelt hook implementation
    (decorated, but no such hook) fails here.
    """
    disabled = set(disabled)
    pm = pluggy.PluginManager("commonroom")
    pm.add_hookspecs(hookspecs)
    for module_path in DEFAULT_PLUGINS:
        name = plugin_name(module_path)
        if name in disabled:
            log.info("plugin %s disabled by config", name)
            continue
        pm.register(importlib.import_module(module_path), name=name)
    if load_entry_points:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in disabled:
                log.info("plugin %s disabled by config", ep.name)
                continue
            if pm.has_plugin(ep.name):
                raise PluginError(f"plugin name {ep.name!r} is already taken")
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(f"cannot load plugin {ep.name!r} ({ep.value}): {exc}") from exc
            pm.register(plugin, name=ep.name)
            log.info("loaded plugin %s from %s", ep.name, ep.value)
    for plugin in extra:
        pm.register(plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from exc
    for hook_name in _SYNC_ONLY_HOOKS:
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            if inspect.iscoroutinefunction(impl.function):
                raise PluginError(
                    f"{impl.plugin_name}.{hook_name} must be a plain def that returns None "
                    "or an awaitable (an async def would claim every request)")
    return pm


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def call_hook(hook: Any, **kwargs: Any) -> list[Any]:
    """Call a broadcast hook and await every awaitable result, in order."""
    results = hook(**kwargs)
    return [await maybe_await(r) for r in results]


def plugin_names(pm: pluggy.PluginManager) -> list[str]:
    return sorted(name for name, _ in pm.list_name_plugin() if name is not None)
