"""Documentation that must not fall behind the code."""

from __future__ import annotations

import re
from pathlib import Path

from daemon.runtime import hookspecs
from daemon.runtime.app import plugin_sections
from daemon.runtime.config import Config, field_paths
from daemon.runtime.plugins import build_plugin_manager

REPO = Path(__file__).resolve().parent.parent
DOCS = "\n".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))


def test_every_config_key_is_documented():
    pm = build_plugin_manager(load_entry_points=False)
    paths = field_paths(Config)
    for name, section in plugin_sections(pm).items():
        paths += field_paths(section, name)
    missing = [p for p in paths if f"`{p}`" not in DOCS]
    assert not missing, f"config keys missing from docs/*.md: {missing}"


def test_every_hook_is_documented():
    hooks = [n for n in dir(hookspecs) if n.startswith("cr_")]
    plugin_doc = (REPO / "docs" / "plugins.md").read_text()
    assert hooks
    missing = [h for h in hooks if f"`{h}`" not in plugin_doc]
    assert not missing, f"hooks missing from docs/plugins.md: {missing}"
    for h in hooks:
        assert getattr(hookspecs, h).__doc__, f"{h} has no docstring"


def test_ci_runs_the_readme_test_command_unchanged():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^\s*(scripts/\S+)\s*(?:#.*)?$", readme, re.M)
    assert "scripts/serve" in commands and "scripts/test" in commands
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^scripts/test$", ci, re.M)
