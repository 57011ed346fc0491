"""`commonroom lexicons --check | --write`: a plugin's method lexicons made from its routes'
declarations (`operation`, `UserMethod`), as the built-ins' are, so a route and its lexicon
cannot say two things. For every XRPC method of a plugin that ships lexicons
(`cr_lexicons`), the file ``<folder>/<method id>.json`` must be what
`daemon.atproto.xrpc_lexicons.method_lexicon` makes of the method's routes; ``--check``
names the first field where they differ, ``--write`` writes them.

Lexicons of records, or of methods no route declares, are left alone.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from daemon.runtime.plugins import results_by_plugin


@dataclass(frozen=True)
class LexiconFile:
    """One method's lexicon as its plugin's routes declare it."""

    plugin: str
    method_id: str
    path: Path
    document: dict[str, Any]

    @property
    def text(self) -> str:
        return json.dumps(self.document, indent=2, ensure_ascii=False) + "\n"


def wanted(app: Any, only: str | None = None) -> list[LexiconFile]:
    """The lexicon files the plugins' routes call for (of plugin `only`, if given)."""
    from daemon.atproto.xrpc import methods
    from daemon.atproto.xrpc_lexicons import method_lexicon
    folders = {plugin: Path(folder) for plugin, folder in results_by_plugin(app.pm, "cr_lexicons")
               if folder is not None}
    owners: dict[type, str] = {}
    for route in app.routes:
        owners.setdefault(route[1], app.route_plugins.get(route[0], "core"))
    out = []
    for mid, method in methods(app).items():
        plugin = owners.get(method.routes[0].handler, "core")
        if plugin not in folders or (only is not None and plugin != only):
            continue
        document = method_lexicon(method, app.config.atproto.namespace)
        out.append(LexiconFile(plugin, mid, folders[plugin] / f"{document['id']}.json", document))
    return out


def first_difference(wanted: Any, found: Any, path: str = "") -> str | None:
    """The first place where `found` (the file) differs from `wanted` (the routes), as a
    dotted path with what each says; None if they agree."""
    if isinstance(wanted, dict) and isinstance(found, dict):
        for key in [*wanted, *(k for k in found if k not in wanted)]:
            here = f"{path}.{key}" if path else str(key)
            if key not in found:
                return f"{here}: the route declares {_short(wanted[key])}, the lexicon has nothing"
            if key not in wanted:
                return f"{here}: the lexicon has {_short(found[key])}, the route declares nothing"
            diff = first_difference(wanted[key], found[key], here)
            if diff is not None:
                return diff
        return None
    if isinstance(wanted, list) and isinstance(found, list) and len(wanted) == len(found):
        for i, (w, f) in enumerate(zip(wanted, found)):
            diff = first_difference(w, f, f"{path}[{i}]")
            if diff is not None:
                return diff
        return None
    if wanted != found:
        return f"{path}: the route declares {_short(wanted)}, the lexicon has {_short(found)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


def problems(files: list[LexiconFile]) -> Iterator[str]:
    """One line for each file that is missing, unreadable or differs from its routes."""
    for f in files:
        if not f.path.exists():
            yield f"{f.plugin}: {f.path.name}: missing (the routes declare the method {f.method_id})"
            continue
        try:
            found = json.loads(f.path.read_text())
        except ValueError as exc:
            yield f"{f.plugin}: {f.path.name}: not JSON ({exc})"
            continue
        diff = first_difference(f.document, found)
        if diff is not None:
            yield f"{f.plugin}: {f.path.name}: {diff}"


async def run(config: Any, pm: Any, *, write: bool, only: str | None = None) -> int:
    """The command: build the application on a throwaway state directory (the configured
    database is not touched), then check or write. Exit status 1 when a check fails."""
    from daemon.runtime.app import create_app
    with tempfile.TemporaryDirectory(prefix="commonroom-lexicons-") as state:
        scratch = dataclasses.replace(
            config, base_dir=state, storage=dataclasses.replace(config.storage, state_dir=state),
            server=dataclasses.replace(config.server, role="primary"))
        app = await create_app(scratch, pm, start=False)
        try:
            files = wanted(app, only)
        finally:
            await app.shutdown()
    if only is not None and not files:
        print(f"commonroom lexicons: plugin {only!r} ships no lexicons of methods (cr_lexicons)")
        return 1
    if write:
        for f in files:
            if not f.path.exists() or f.path.read_text() != f.text:
                f.path.write_text(f.text)
                print(f"wrote {f.path}")
        return 0
    found = list(problems(files))
    for line in found:
        print(line)
    if not found:
        print(f"{len(files)} method lexicons agree with their routes")
    return 1 if found else 0
