"""What an installed `commonroom` needs: its dependencies declared, its command usable."""

from __future__ import annotations

import ast
import configparser
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
OUR_PACKAGES = {"daemon", "plugins", "store"}


def imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for package in OUR_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - OUR_PACKAGES - set(sys.stdlib_module_names) - {"__future__"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_requirements() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalise(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0]))
    return names


def test_every_module_the_daemon_imports_is_a_declared_dependency():
    # A module that arrives only as a dependency of a dependency (dnspython under atproto)
    # disappears when that dependency changes, and `pip install commonroom` breaks.
    by_module = packages_distributions()
    declared = declared_requirements()
    undeclared = {}
    for module in sorted(imported_top_level_modules()):
        dists = {normalise(d) for d in by_module.get(module, [])}
        assert dists, f"{module} is imported but not installed"
        if not dists & declared:
            undeclared[module] = sorted(dists)
    assert not undeclared, f"imported but not in setup.cfg install_requires: {undeclared}"
