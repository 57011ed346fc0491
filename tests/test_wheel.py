"""The wheel holds everything the service needs at run time: built from this checkout and
installed on its own (no checkout on the path), `commonroom serve` answers the web app's pages
and their static files, and `--version` names the package's version."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest

from daemon import __version__
from tests.conftest import REPO, TEST_SECRET_KEY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the files git knows (setuptools writes build/ and *.egg-info into
    # the tree it builds), as scripts/release builds from a clean tree.
    source = out / "source"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(out), str(source)],
                           capture_output=True, text=True, timeout=300, cwd=out)
    assert build.returncode == 0, build.stderr
    wheel = next(out.glob("commonroom-*.whl"))
    assert wheel.name.startswith(f"commonroom-{__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("plugins/web/static/favicon.svg", "plugins/web/static/app.css", "plugins/web/templates/base.html",
                   "plugins/instance/templates/overview.html", "plugins/reports/templates/queue.html",
                   "plugins/instance/lexicons/community.commonroom.instance.report.json",
                   "store/migrations/0001_core.sql", "plugins/communities/migrations/0001_communities.sql",
                   f"commonroom-{__version__}.data/data/share/commonroom/systemd/commonroom.service",
                   f"commonroom-{__version__}.data/data/share/commonroom/config.yaml"):
        assert needed in names, f"{needed} is not in the wheel"
    return wheel


@pytest.fixture(scope="module")
def installed(wheel: Path) -> Path:
    out = wheel.parent
    target = out / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                              str(wheel)], capture_output=True, text=True, timeout=300, cwd=out)
    assert install.returncode == 0, install.stderr
    return target


def run_installed(target: Path, cwd: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    # The wheel's copy first on the path, the test environment's packages for its dependencies,
    # and not this checkout (the working directory is elsewhere; no PYTHONPATH to the repo).
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target)}
    return subprocess.Popen([sys.executable, "-m", "daemon.runtime.main", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]


def test_the_installed_wheel_serves_pages_and_static_files(installed: Path, tmp_path: Path) -> None:
    version = run_installed(installed, tmp_path, "--version")
    out, err = version.communicate(timeout=60)
    assert version.returncode == 0 and __version__ in out, err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "config.yaml").write_text(
        f"server: {{port: {port}, base_url: 'http://127.0.0.1:{port}'}}\n"
        f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n")
    proc = run_installed(installed, tmp_path, "-c", "config.yaml", "serve")
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.05)
        home = urllib.request.urlopen(base + "/", timeout=10)
        page = home.read().decode()
        assert home.status == 200 and "Commonroom" in page
        for asset in ("favicon", "app"):
            href = page.split(f'/static/{asset}', 1)[1].split('"', 1)[0]
            got = urllib.request.urlopen(f"{base}/static/{asset}{href}", timeout=10)
            assert got.status == 200 and got.read()
        assert urllib.request.urlopen(base + "/discover", timeout=10).status == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.pds
async def test_the_installed_wheel_creates_a_community_and_takes_a_join_on_the_devnet(
        installed: Path, tmp_path: Path, communities_config: dict, people: Any) -> None:
    """The service as a self-hoster installs it, against the devnet's PDS: an app registered
    by a signed-in person creates a community and a second person joins it."""
    import yaml

    from daemon.runtime.app import create_app, load_config
    from tests.conftest import deep_merge
    from tests.fixtures_communities import Api
    from tests.helpers import Client, login_as, register_app
    from tests.test_webhooks_crash import free_port

    port = free_port()
    raw = deep_merge(yaml.safe_load((REPO / "config.yaml").read_text()), communities_config)
    raw = deep_merge(raw, {"server": {"port": port, "base_url": f"http://127.0.0.1:{port}"},
                           "storage": {"state_dir": str(tmp_path / "state")}, "secret_key": TEST_SECRET_KEY,
                           "log_level": "warning"})
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    owner, joiner = people("owner"), people("joiner")
    config, pm = load_config(config_path)
    setup = await create_app(config, pm, start=False)   # a signed-in session, as the browser would have
    session = await login_as(setup, "did:plc:appowner")
    await setup.shutdown()
    proc = run_installed(installed, tmp_path, "-c", str(config_path), "serve")
    client = Client(f"http://127.0.0.1:{port}")
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.05)
        registered = await register_app(client, session)
        api = Api(client, registered["apiKey"], registered["appId"])
        did = (await api.create(owner, "Installed club"))["did"]
        joined = await api.join(did, joiner["did"])
        assert joined.status == 201, joined.text
        check = await client.post(f"/api/v1/communities/{did}/membership/check", api_key=api.key,
                                  json={"userDid": joiner["did"]})
        assert check.json()["isMember"] is True
    finally:
        client.close()
        proc.terminate()
        proc.communicate(timeout=30)


def test_install_systemd_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    """scripts/install-systemd --from-wheel, copied away from the checkout as an operator
    downloads it: the service's venv runs the wheel's code (no copy of a checkout in
    /opt/commonroom), the units and the default config are the wheel's, and the installed
    command checks that config once systemd hands over the key. Run again, it keeps the
    operator's config (an upgrade)."""
    import os
    import shutil as sh
    script = tmp_path / "install-systemd"
    sh.copy2(REPO / "scripts" / "install-systemd", script)  # no repository beside it
    root = tmp_path / "root"

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), "--root", str(root), "--from-wheel", str(wheel), "--no-start"],
                              capture_output=True, text=True, timeout=900, cwd=tmp_path)

    first = install()
    assert first.returncode == 0, first.stderr
    opt = root / "opt" / "commonroom"
    assert sorted(p.name for p in opt.iterdir()) == [".venv"]  # the package is the code
    commonroom = opt / ".venv" / "bin" / "commonroom"
    version = subprocess.run([str(commonroom), "--version"], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path)
    assert version.returncode == 0 and __version__ in version.stdout, version
    units = root / "etc" / "systemd" / "system"
    for name in ("commonroom.service", "commonroom-backup.timer", "commonroom-litestream.service"):
        assert (units / name).read_text() == (REPO / "systemd" / name).read_text()
    assert (units / "commonroom.service.d" / "hardening.conf").is_file()
    config = root / "etc" / "commonroom" / "config.yaml"
    assert "state_dir: /var/lib/commonroom" in config.read_text()
    creds = tmp_path / "creds"
    creds.mkdir()
    sh.copy(root / "etc" / "credstore" / "commonroom.secret_key", creds / "secret_key")
    checked = subprocess.run([str(commonroom), "-c", str(config), "check-config"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=60,
                             env={**os.environ, "CREDENTIALS_DIRECTORY": str(creds)})
    assert checked.returncode == 0, checked.stderr
    # pip show names exactly the runtime dependencies setup.cfg declares (no test tools)
    import configparser
    import re
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = {re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
                for line in cfg["options"]["install_requires"].splitlines()
                if line.strip() and not line.strip().startswith("#")}
    shown = subprocess.run([str(opt / ".venv" / "bin" / "pip"), "show", "commonroom"], capture_output=True,
                           text=True, timeout=60)
    requires = next(line for line in shown.stdout.splitlines() if line.startswith("Requires:"))
    assert {r.strip().lower() for r in requires.split(":", 1)[1].split(",") if r.strip()} == declared, requires
    # and the service's venv serves (its config pointed at a free port and a temporary state dir)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    local = tmp_path / "local.yaml"
    local.write_text(f"server: {{port: {port}, base_url: 'http://127.0.0.1:{port}'}}\n"
                     f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{TEST_SECRET_KEY}'\n")
    proc = subprocess.Popen([str(commonroom), "-c", str(local), "serve"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.05)
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/discover", timeout=10).status == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=30)

    config.write_text(config.read_text() + "# edited by the operator\n")
    again = install()
    assert again.returncode == 0, again.stderr
    assert config.read_text().endswith("# edited by the operator\n")
    refused = subprocess.run([str(script), "--root", str(root), "--from-wheel", str(tmp_path / "nope.whl")],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "no such wheel" in refused.stderr
