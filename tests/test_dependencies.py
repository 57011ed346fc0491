"""The declared dependencies (setup.cfg) are what the product code imports: none is declared
and imported nowhere (an operator installs and patches it for nothing), and none is used
without being declared (it would come only as another package's dependency, and go when
that package drops it)."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The product code: what `pip install commonroom` ships. The test fixtures for plugin
#: authors (commonroom_testing) may also use the [test] extras.
PRODUCT = ("daemon", "plugins", "store")
FIXTURES = ("commonroom_testing",)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(key: str, extra: str | None = None) -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    text = config["options.extras_require"][extra] if extra else config["options"][key]
    lines = (line.strip() for line in text.splitlines())
    return {canonical(re.split(r"[<>=!~\[;\s]", line, maxsplit=1)[0]) for line in lines
            if line and not line.startswith("#")}


def imported_modules(*packages: str) -> dict[str, set[str]]:
    """Top-level module → the files importing it (absolute imports, lazy ones too)."""
    out: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    out.setdefault(name.partition(".")[0], set()).add(str(path.relative_to(ROOT)))
    return out


def distributions_of(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Distribution (canonical name) → the third-party modules of it that are imported."""
    owners = importlib.metadata.packages_distributions()
    out: dict[str, set[str]] = {}
    for module in modules:
        if module in sys.stdlib_module_names:
            continue
        for dist in owners.get(module, ()):
            out.setdefault(canonical(dist), set()).add(module)
    return out


def test_every_declared_dependency_is_imported_by_the_product_code():
    used = distributions_of(imported_modules(*PRODUCT))
    unused = sorted(declared("install_requires") - set(used))
    assert not unused, (f"declared in setup.cfg's install_requires but imported nowhere in "
                        f"{', '.join(PRODUCT)}: {unused} (use it, or drop it with the reason)")


def test_every_third_party_import_of_the_product_code_is_declared():
    own = {canonical("commonroom")}
    runtime = declared("install_requires")
    for packages, allowed, where in ((PRODUCT, runtime, "install_requires"),
                                     (FIXTURES, runtime | declared("", "test"), "install_requires or [test]")):
        modules = imported_modules(*packages)
        owners = importlib.metadata.packages_distributions()
        unknown = sorted(m for m in modules if m not in sys.stdlib_module_names and m not in owners)
        assert not unknown, f"imports of no installed distribution in {packages}: {unknown}"
        missing = {dist: sorted(mods) for dist, mods in distributions_of(modules).items()
                   if dist not in allowed | own}
        assert not missing, f"imported by {packages} but not declared in {where}: {missing}"
