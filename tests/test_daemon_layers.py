"""`daemon/` is in layers by concern (docs/plugins.md, "The core's layers"): base < http <
security < atproto < sync < runtime. A module imports only its own layer or those below
(`if TYPE_CHECKING:` imports aside; the clock and keyed locks every layer uses are the
bottom layer's, `daemon.base`), so the old import circle (app <-> http <-> lean <-> plugins <-> events <->
hookspecs <-> sessions) cannot come back."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = {"base": -1, "http": 0, "security": 1, "atproto": 2, "sync": 3, "runtime": 4}


def upward_imports() -> list[str]:
    bad = []
    for path in sorted((ROOT / "daemon").glob("*/*.py")):
        layer = path.parent.name
        if layer == "plugin":   # the public plugin API: above every layer
            continue
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.dump(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] == "daemon" and len(parts) > 1 and parts[1] in ORDER \
                    and ORDER[parts[1]] > ORDER[layer]:
                bad.append(f"{path.relative_to(ROOT)} imports {node.module}")
    return bad


def test_every_daemon_module_sits_in_a_layer() -> None:
    # daemon/plugin/ is the public plugin API: it re-exports from every layer, above them all
    loose = [p.name for p in (ROOT / "daemon").glob("*.py") if p.name != "__init__.py"]
    assert loose == [], "put new core modules in a layer's folder"
    assert {p.name for p in (ROOT / "daemon").iterdir()
            if p.is_dir() and p.name not in ("__pycache__", "plugin")} == set(ORDER)


def test_no_layer_imports_a_higher_one() -> None:
    assert upward_imports() == []


def test_the_bottom_layer_imports_nothing_of_daemon_or_tornado() -> None:
    for path in sorted((ROOT / "daemon" / "base").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] not in ("daemon", "tornado"), f"{path.name}: {node.module}"
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] not in ("daemon", "tornado") for a in node.names), path.name


def test_the_shared_types_are_one_class_wherever_they_are_imported_from() -> None:
    import daemon.plugin
    from daemon.base import ApiError, Principal
    from daemon.http import base
    assert base.ApiError is ApiError is daemon.plugin.ApiError
    assert base.Principal is Principal is daemon.plugin.Principal


def test_no_module_of_the_product_uses_a_private_tornado_helper() -> None:
    for folder in ("daemon", "plugins"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            assert "httputil._" not in path.read_text(), path
