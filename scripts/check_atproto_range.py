#!/usr/bin/env python3
"""Check that the atproto SDK range declared in setup.cfg works: run the tests of every SDK
piece the daemon uses (tests/test_atproto_sdk.py, tests/test_atproto_syntax.py) on given
versions of the SDK. Usage:

    .venv/bin/python scripts/check_atproto_range.py [VERSION ...]

Without versions: the lowest and the highest released version inside the declared range
(asked of the package index with ``pip index versions``). Each version is installed without
its dependencies into a scratch directory that is put in front of .venv's packages, after
checking that the dependencies it declares are met by what .venv has (a version whose
dependencies clash with ours cannot be in the range). Exit status 0 when every version
passes. Widening the range (a new SDK release) means running this on the new bound.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_atproto_sdk.py", "tests/test_atproto_syntax.py"]


def declared_range() -> SpecifierSet:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    for line in config["options"]["install_requires"].splitlines():
        match = re.fullmatch(r"\s*atproto\s*([<>=!~].*)", line)
        if match:
            return SpecifierSet(match.group(1).replace(" ", ""))
    raise SystemExit("atproto is not in setup.cfg's install_requires")


def released() -> list[Version]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "atproto",
                          "--disable-pip-version-check"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"Available versions:\s*(.+)", out)
    if not match:
        raise SystemExit(f"pip index versions atproto said:\n{out}")
    return sorted(Version(v.strip()) for v in match.group(1).split(","))


def unmet_dependencies(target: Path) -> list[str]:
    """The dependencies the installed SDK declares that .venv does not satisfy."""
    (dist,) = importlib.metadata.distributions(path=[str(target)], name="atproto")
    unmet = []
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            have = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{requirement} (not installed)")
            continue
        if not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement} (have {have})")
    return unmet


def check(version: str) -> bool:
    with tempfile.TemporaryDirectory(prefix=f"atproto-{version}-") as scratch:
        target = Path(scratch)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", "--target", str(target), f"atproto=={version}"], check=True)
        unmet = unmet_dependencies(target)
        if unmet:
            print(f"atproto {version}: its dependencies clash with ours: {'; '.join(unmet)}")
            return False
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
        probe = "import importlib.metadata as m, atproto_client; print(m.version('atproto'), atproto_client.__file__)"
        seen = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        print(f"atproto {version}: testing with {seen.stdout.strip()}")
        # (a version outside the declared range fails test_atproto_sdk.py's range check)
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", *TESTS],
                                env=env, cwd=ROOT)
        return result.returncode == 0


def main() -> int:
    versions = sys.argv[1:]
    if not versions:
        spec = declared_range()
        inside = [v for v in released() if spec.contains(v)]
        if not inside:
            raise SystemExit(f"no released atproto version is in {spec}")
        versions = sorted({str(inside[0]), str(inside[-1])}, key=Version)
        print(f"setup.cfg declares atproto{spec}: checking {', '.join(versions)}")
    failed = [v for v in versions if not check(v)]
    print("all passed" if not failed else f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
