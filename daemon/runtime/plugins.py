"""Loading plugins, at start-up: the built-ins and the entry points, the hook rules, what
each plugin requires and the order that follows. Calling a hook at request time is the
Application's (`daemon.runtime.app.call_hook`, `Application.call_hook`)."""

from __future__ import annotations

import importlib
import inspect
import logging
from importlib.metadata import entry_points
from typing import Any, Iterable

import pluggy

from daemon.runtime import hookspecs

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "commonroom.plugins"

#: Built-in features, loaded like any other plugin; each can be disabled by its name.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "plugins.apikeys",
    "plugins.oauth",
    "plugins.communities",
    "plugins.records",
    "plugins.webhooks",
    "plugins.events",
    "plugins.web",
    "plugins.reports",
    "plugins.instance",
)

# Hooks whose implementations must be plain functions (see daemon.runtime.hookspecs).
_SYNC_ONLY_HOOKS = ("cr_authenticate", "cr_user_repo", "cr_not_found", "cr_render_page")


class PluginError(Exception):
    """A plugin could not be loaded or breaks the hook rules."""


class PluginDependencyError(PluginError):
    """A plugin needs another plugin (`cr_plugin_requires`) that is disabled or absent."""


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
        pm.register(plugin, name=getattr(plugin, "plugin_name", None))  # a test plugin may name itself
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
    check_requirements(pm, disabled)
    check_api_versions(pm)
    dependency_order(pm)  # refuses a cycle now rather than at the first migration
    return pm


# ------------------------------------------------------------------ dependencies


def _registered(pm: pluggy.PluginManager) -> list[str]:
    """Plugin names in registration order (defaults, entry points, extras)."""
    return [name for name, plugin in pm.list_name_plugin() if plugin is not None]


def results_by_plugin(pm: pluggy.PluginManager, hook_name: str,
                      names: Iterable[str] | None = None, **kwargs: Any) -> list[tuple[str, Any]]:
    """``(plugin name, result)`` of each plugin's implementation of a hook, called with
    the `kwargs` it takes, one plugin at a time, in the order of `names` (default:
    registration order). A plain hook call would mix the results and order them
    last-registered first."""
    impls: dict[str, list[Any]] = {}
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        impls.setdefault(impl.plugin_name, []).append(impl)
    return [(name, impl.function(**{arg: kwargs[arg] for arg in impl.argnames}))
            for name in (_registered(pm) if names is None else names)
            for impl in impls.get(name, ())]


def results_in_call_order(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
    """``(plugin name, result)`` of each plugin's implementation of a hook, in the order a
    plain hook call runs them (last registered first, ``tryfirst``/``trylast`` honoured):
    the results of ``pm.hook.<hook_name>(**kwargs)``, each with the plugin it came from."""
    return [(impl.plugin_name, impl.function(**{arg: kwargs[arg] for arg in impl.argnames}))
            for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls())
            if not (impl.hookwrapper or getattr(impl, "wrapper", False))]


def plugin_requirements(pm: pluggy.PluginManager) -> dict[str, tuple[str, ...]]:
    """What each registered plugin declares it needs (`cr_plugin_requires`)."""
    needs: dict[str, tuple[str, ...]] = {name: () for name in _registered(pm)}
    for name, result in results_by_plugin(pm, "cr_plugin_requires"):
        if result is None:
            continue
        if isinstance(result, str) or not all(isinstance(r, str) for r in result):
            raise PluginError(f"{name}.cr_plugin_requires must return a list of plugin names, not {result!r}")
        needs[name] += tuple(r for r in result if r not in needs[name])
    return needs


def check_requirements(pm: pluggy.PluginManager, disabled: Iterable[str] = ()) -> None:
    """Refuse a set of plugins in which one needs another that is not there, naming both:
    the configuration disabled it, or it is not installed."""
    disabled = set(disabled)
    missing: dict[str, list[str]] = {}  # required plugin -> the plugins that need it
    for name, required in plugin_requirements(pm).items():
        for other in required:
            if not pm.has_plugin(other):
                missing.setdefault(other, []).append(name)
    problems = []
    for other, needed_by in missing.items():
        who = " and ".join(repr(n) for n in needed_by)
        if other in disabled:
            problems.append(f"plugins.disabled switches off {other!r}, but {who} "
                            f"require{'s' if len(needed_by) == 1 else ''} it: enable {other!r} "
                            f"again or disable {who} too")
        else:
            problems.append(f"plugin {who} require{'s' if len(needed_by) == 1 else ''} {other!r}, "
                            "which is not installed")
    if problems:
        raise PluginDependencyError("; ".join(problems))


def _version(text: str) -> tuple[int, ...]:
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(text)
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


_COMPARE = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            "<": lambda a, b: a < b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def api_version_in(version: str, spec: str) -> bool:
    """Whether `version` ("1.0") meets every condition of `spec` (">=1.0,<2"); ValueError
    for a spec that is not one."""
    have = _version(version)
    for condition in spec.split(","):
        condition = condition.strip()
        op = next((o for o in (">=", "<=", "==", "!=", ">", "<") if condition.startswith(o)), None)
        if op is None:
            raise ValueError(condition)
        if not _COMPARE[op](have, _version(condition[len(op):])):
            return False
    return True


#: The plugin API's version, ``MAJOR.MINOR`` (`daemon.plugin.API_VERSION`; docs/plugins.md,
#: "Compatibility"): the minor grows when names are added, the major when any is removed or
#: changes meaning.
API_VERSION = "1.1"


def check_api_versions(pm: pluggy.PluginManager) -> None:
    """Refuse a plugin whose declared plugin-API range (`cr_plugin_api_version`) the running
    `API_VERSION` is outside, naming the plugin and both versions."""
    for name, spec in results_by_plugin(pm, "cr_plugin_api_version"):
        if spec is None:
            continue
        try:
            if not isinstance(spec, str):
                raise ValueError(spec)
            fits = api_version_in(API_VERSION, spec)
        except ValueError:
            raise PluginError(f"{name}.cr_plugin_api_version must return a range such as '>=1.0,<2', "
                              f"not {spec!r}") from None
        if not fits:
            raise PluginError(f"plugin {name!r} supports the plugin API {spec}, but this Commonroom's plugin API "
                              f"is {API_VERSION}: install a version of {name!r} made for plugin API {API_VERSION}, "
                              "or disable it (plugins.disabled)")


def dependency_order(pm: pluggy.PluginManager) -> list[str]:
    """Plugin names with every plugin after the plugins it requires; otherwise in
    registration order. Requirements that are not registered are ignored here
    (`check_requirements` refuses them)."""
    needs = plugin_requirements(pm)
    placed: list[str] = []
    waiting = list(needs)
    while waiting:
        ready = next((n for n in waiting if all(r in placed or r not in needs for r in needs[n])), None)
        if ready is None:
            raise PluginDependencyError(f"plugins require each other in a cycle: {_cycle(needs, waiting)}")
        placed.append(ready)
        waiting.remove(ready)
    return placed


def _cycle(needs: dict[str, tuple[str, ...]], waiting: list[str]) -> str:
    path = [waiting[0]]
    while True:
        nxt = next(r for r in needs[path[-1]] if r in waiting)
        if nxt in path:
            loop = path[path.index(nxt):] + [nxt]
            return " -> ".join(repr(n) for n in loop)
        path.append(nxt)


def plugin_names(pm: pluggy.PluginManager) -> list[str]:
    return sorted(name for name, _ in pm.list_name_plugin() if name is not None)
