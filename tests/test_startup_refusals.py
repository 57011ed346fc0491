"""A daemon that refuses to start says why in one line and nothing else: no traceback, no
warning after the message (a coroutine of a plugin made but never awaited used to print
`RuntimeWarning: coroutine 'cr_startup' was never awaited`), and exits with status 2. Each
refusal runs the real command in a process of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_SECRET_KEY

FOLLOWER = ("server: {role: follower}\nfollower: {primary_url: 'http://127.0.0.1:1'}\n"
            "replication: {url: 'file:///nonexistent/replica'}\n")

REFUSALS = {
    "an unknown key": ("colour: blue\n", "colour: unknown key"),
    "a port that cannot be": ("server: {port: 70000}\n", "server.port: must be from 0 to 65535"),
    "a follower without the primary's address": (
        "server: {role: follower}\nreplication: {url: 'file:///nonexistent/replica'}\n",
        "follower.primary_url: required when server.role is follower (writes are sent there)"),
    "a follower without its copy": (
        FOLLOWER.replace("primary_url:", "replica: missing.sqlite3, primary_url:"), None),
    "a follower with a webhooks section": (FOLLOWER + "webhooks: {allow_http: true}\n",
                                           "webhooks: a follower delivers no webhooks (the primary does): "
                                           "leave this section out of a follower's config.yaml"),
    "a follower that would follow the network": (FOLLOWER + "sync: {source: firehose}\n", None),
}


def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "default", "-m", "daemon.runtime.main", "-c", str(config), *args],
                          capture_output=True, text=True, timeout=120, cwd=config.parent,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A primary's database, migrated by the real command: a follower's copy of it."""
    state = tmp_path_factory.mktemp("primary")
    config = state / "primary.yaml"
    config.write_text(f"storage: {{state_dir: {state}}}\nsecret_key: '{TEST_SECRET_KEY}'\n")
    done = run(config, "migrate")
    assert done.returncode == 0, done.stderr
    return next(state.glob("*.sqlite3"))


@pytest.mark.parametrize("what", sorted(REFUSALS))
def test_a_refused_start_prints_only_its_message(tmp_path: Path, migrated: Path, what: str) -> None:
    body, message = REFUSALS[what]
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(migrated, state / "replica.sqlite3")
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{state_dir: {state}}}\nsecret_key: '{TEST_SECRET_KEY}'\n" + body)
    done = run(config, "serve")
    assert done.returncode == 2, (what, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, f"{what}: more than the message on stderr:\n{done.stderr}"
    assert lines[0].startswith("commonroom: configuration error: ")
    if message is not None:
        assert lines[0] == f"commonroom: configuration error: {message}"
    assert done.stdout == ""
