"""config.yaml: typed, frozen, unknown keys and wrong types named by key path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from daemon.runtime.app import load_config, load_secret_key
from daemon.runtime.config import Config, ConfigError

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return p


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "daemon.runtime.main", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=60)


def test_shipped_config_is_valid_and_loads_defaults():
    config, pm = load_config(REPO / "config.yaml")
    assert config.server.port == 8080
    assert config.rate_limits.api.requests == 100
    assert config.rate_limits.auth.requests == 20 and config.rate_limits.auth.window_seconds == 900
    with pytest.raises(Exception):
        config.server.port = 1  # frozen


@pytest.mark.parametrize("text, path, words", [
    ("server:\n  prot: 80\n", "server.prot", "unknown key"),
    ("bogus: 1\n", "bogus", "unknown key"),
    ("server:\n  port: eighty\n", "server.port", "expected an integer"),
    ("rate_limits:\n  api: {requests: 10, window_seconds: soon}\n", "rate_limits.api.window_seconds",
     "expected a number"),
    ("log_level: loud\n", "log_level", "expected one of"),
    ("storage:\n  mmap_mb: -1\n", "storage.mmap_mb", "must be 0 (off) or more"),
    ("server:\n  trusted_proxies: 10.0.0.1\n", "server.trusted_proxies", "expected a list"),
    ("secret_key: {$env: COMMONROOM_TEST_UNSET_VAR}\n", "secret_key", "COMMONROOM_TEST_UNSET_VAR is not set"),
])
def test_bad_config_names_the_key_path(tmp_path, text, path, words):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert info.value.path == path
    assert words in str(info.value)


def test_cli_check_config_fails_with_key_path_and_nonzero_status(tmp_path):
    bad = write(tmp_path, "server:\n  port: [1]\n")
    result = run_cli("-c", str(bad), "check-config")
    assert result.returncode != 0
    assert "server.port" in result.stderr
    good = run_cli("-c", str(REPO / "config.yaml"), "check-config")
    assert good.returncode == 0, good.stderr


def test_secrets_from_env_and_file(tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text("ab" * 32 + "\n")
    monkeypatch.setenv("CR_TEST_HOST", "0.0.0.0")
    config, _ = load_config(write(tmp_path, "secret_key: {$file: key}\nserver:\n  host: {$env: CR_TEST_HOST}\n"))
    assert config.secret_key == "ab" * 32
    assert config.server.host == "0.0.0.0"


def test_missing_secret_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "secret_key: {$file: nowhere}\n"))
    assert info.value.path == "secret_key"


def test_secret_key_is_generated_once_with_a_warning(tmp_path, caplog):
    config = Config.from_mapping({"storage": {"state_dir": "st"}}, base_dir=tmp_path)
    box = load_secret_key(config)
    key_path = tmp_path / "st" / "secret_key"
    assert key_path.exists() and oct(key_path.stat().st_mode & 0o777) == "0o600"
    assert "generated" in caplog.text
    sealed = box.seal("hello", "ctx")
    assert load_secret_key(config).open(sealed, "ctx") == "hello"  # same key next start


def test_disabled_plugin_section_is_not_an_unknown_key(tmp_path):
    config, pm = load_config(write(tmp_path, yaml.safe_dump({"plugins": {"disabled": ["webhooks"]},
                                                             "webhooks": {"anything": 1}})))
    assert not pm.has_plugin("webhooks")
