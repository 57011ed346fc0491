"""What an installed `commonroom` needs: its dependencies declared, its command usable."""

from __future__ import annotations

import ast
import configparser
import os
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from daemon import __version__

REPO = Path(__file__).resolve().parent.parent
OUR_PACKAGES = {"daemon", "plugins", "store"}


def imported_top_level_modules(packages: set[str] = OUR_PACKAGES) -> set[str]:
    found: set[str] = set()
    for package in packages:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - OUR_PACKAGES - packages - set(sys.stdlib_module_names) - {"__future__"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_requirements(extra: str | None = None) -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    if extra:
        lines += cfg["options.extras_require"][extra].splitlines()
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


def test_the_test_fixtures_ship_with_their_dependencies_in_the_test_extra():
    # Plugin authors' tests load `commonroom_testing` from an installed commonroom[test].
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert "commonroom_testing" in cfg["options.packages.find"]["include"].split()
    by_module = packages_distributions()
    declared = declared_requirements("test")
    undeclared = {module: sorted(by_module.get(module, [])) for module in imported_top_level_modules({"commonroom_testing"})
                  if not {normalise(d) for d in by_module.get(module, [])} & declared}
    assert not undeclared, f"imported by commonroom_testing but not in install_requires or [test]: {undeclared}"


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COMMONROOM_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "daemon.runtime.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_help_works_in_a_directory_without_a_config(tmp_path):
    done = run_cli(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: commonroom")
    for command in ("serve", "migrate", "check-config", "backup"):
        assert command in done.stdout
    assert "configuration error" not in done.stderr
    sub = run_cli(["serve", "--help"], tmp_path)
    assert sub.returncode == 0 and sub.stdout.startswith("usage: commonroom serve"), sub.stderr


def test_version_works_in_a_directory_without_a_config(tmp_path):
    done = run_cli(["--version"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"commonroom {__version__}"


def test_a_command_without_a_config_still_says_so(tmp_path):
    done = run_cli(["serve"], tmp_path)
    assert done.returncode == 2
    assert "configuration error" in done.stderr and "config.yaml" in done.stderr
