"""scripts/install-systemd into a temporary root: what it installs verifies with
systemd-analyze, the installed copy runs, a second run keeps the configuration and the
key, and --uninstall removes the code but keeps the data. (User creation and systemctl
need a real root and a running systemd, which the test machine does not have: the script
skips them under --root, and says so.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "install-systemd"
UNITS = ("commonroom.service", "commonroom-backup.service", "commonroom-backup.timer")


def _install(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "--root", str(root), *extra], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_install_into_a_root_verifies_runs_is_idempotent_and_uninstalls(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = _install(root)
    assert first.returncode == 0, first.stderr
    assert "not creating the system user" in first.stderr
    units = root / "etc" / "systemd" / "system"
    for name in UNITS:
        assert (units / name).is_file()
    assert (units / "commonroom.service.d" / "hardening.conf").is_file()
    # systemd's default of 1,024 open files is what a flood of half-open connections exhausted.
    assert "\nLimitNOFILE=65536\n" in (units / "commonroom.service").read_text()
    assert (units / "timers.target.wants" / "commonroom-backup.timer").is_symlink()

    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/test installs the systemd package"
    verified = subprocess.run([analyze, "verify", *(str(units / n) for n in UNITS)],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr
    assert "Unknown" not in verified.stderr and "ignoring" not in verified.stderr, verified.stderr

    key = root / "etc" / "credstore" / "commonroom.secret_key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_text().strip()) == 64
    config = root / "etc" / "commonroom" / "config.yaml"
    text = config.read_text()
    assert "state_dir: /var/lib/commonroom" in text and "CREDENTIALS_DIRECTORY" in text

    # The installed copy is its own: its venv runs it, and the config it wrote is valid
    # once systemd hands over the credential (simulated by CREDENTIALS_DIRECTORY).
    creds = tmp_path / "creds"
    creds.mkdir()
    shutil.copy(key, creds / "secret_key")
    commonroom = root / "opt" / "commonroom" / ".venv" / "bin" / "commonroom"
    checked = subprocess.run([str(commonroom), "-c", str(config), "check-config"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=60,
                             env={**os.environ, "CREDENTIALS_DIRECTORY": str(creds)})
    assert checked.returncode == 0, checked.stderr

    # Again: an upgrade. The operator's config and the key stay as they are.
    config.write_text(text + "# edited by the operator\n")
    before = key.read_text()
    second = _install(root)
    assert second.returncode == 0, second.stderr
    assert config.read_text().endswith("# edited by the operator\n") and key.read_text() == before

    gone = _install(root, "--uninstall")
    assert gone.returncode == 0, gone.stderr
    assert not (root / "opt" / "commonroom").exists()
    assert not any((units / n).exists() for n in UNITS)
    assert config.exists() and key.read_text() == before  # the data stays
