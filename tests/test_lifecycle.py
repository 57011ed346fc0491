"""The real daemon process: start-up, readiness (sd_notify), graceful SIGTERM, systemd unit."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, tmp_path: Path, notify_socket: str | None = None) -> None:
        self.port = free_port()
        self.config = tmp_path / "config.yaml"
        self.config.write_text(
            f"server: {{host: 127.0.0.1, port: {self.port}, base_url: 'http://127.0.0.1:{self.port}',"
            f" shutdown_timeout_seconds: 10}}\n"
            f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{'22' * 32}'\n")
        env = {**os.environ, "PYTHONPATH": str(REPO),
               "COMMONROOM_EXTRA_PLUGINS": "tests.plugin_testroutes:plugin"}
        if notify_socket:
            env["NOTIFY_SOCKET"] = notify_socket
        self.proc = subprocess.Popen([str(VENV_BIN / "commonroom"), "-c", str(self.config), "serve"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited: {self.proc.stdout.read()}")
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("daemon did not become healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def daemon_factory(tmp_path):
    started = []

    def start(**kw):
        d = Daemon(tmp_path, **kw)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def test_serve_answers_health_and_logs_its_address(daemon_factory):
    d = daemon_factory()
    d.wait_healthy()
    with urllib.request.urlopen(d.url("/health")) as r:
        body = json.load(r)
    assert body["status"] == "ok" and body["version"]
    d.proc.send_signal(signal.SIGTERM)
    out, _ = d.proc.communicate(timeout=30)
    assert d.proc.returncode == 0
    assert f"listening on http://127.0.0.1:{d.port}" in out


def test_sigterm_during_a_slow_request_lets_it_finish_then_exits_0(daemon_factory):
    d = daemon_factory()
    d.wait_healthy()
    result = {}

    def slow():
        try:
            with urllib.request.urlopen(d.url("/test/slow?seconds=2"), timeout=20) as r:
                result["status"], result["body"] = r.status, json.load(r)
        except Exception as exc:  # pragma: no cover - reported below
            result["error"] = repr(exc)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.5)
    d.proc.send_signal(signal.SIGTERM)
    t.join(30)
    assert result.get("status") == 200 and result["body"] == {"slept": True}, result
    assert d.proc.wait(30) == 0
    # and it no longer accepts connections
    with pytest.raises(OSError):
        urllib.request.urlopen(d.url("/health"), timeout=2)


def test_sigterm_while_a_small_body_arrives_answers_it_then_exits_0(daemon_factory):
    """A small declared body is read whole before its handler starts, so the request is not
    "in flight" yet while it arrives; the drain still waits for it (the server counts the
    connections between head and body) instead of closing the connection under it."""
    d = daemon_factory()
    d.wait_healthy()
    body = b'{"padding": "' + b"x" * 200 + b'"}'
    with socket.create_connection(("127.0.0.1", d.port), timeout=20) as sock:
        sock.sendall(b"POST /test/public-echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
        time.sleep(0.5)
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        sock.sendall(body[10:])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["bytes"] == len(body)
    assert d.proc.wait(30) == 0


def test_ready_reaches_the_notify_socket(daemon_factory, tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30)
    try:
        d = daemon_factory(notify_socket=path)
        message = sock.recv(4096).decode()
        assert "READY=1" in message
        # READY is only sent once the port accepts requests
        with urllib.request.urlopen(d.url("/health"), timeout=5) as r:
            assert r.status == 200
        d.proc.send_signal(signal.SIGTERM)
        assert "STOPPING=1" in sock.recv(4096).decode()
        assert d.proc.wait(30) == 0
    finally:
        sock.close()


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/test installs the systemd package"
    result = subprocess.run([analyze, "verify", str(REPO / "systemd" / "commonroom.service")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Unknown" not in result.stderr and "ignoring" not in result.stderr, result.stderr
    unit = (REPO / "systemd" / "commonroom.service").read_text()
    for needed in ("Type=notify", "Restart=on-failure", "StateDirectory=", "User=commonroom"):
        assert needed in unit
    hardening = (REPO / "systemd" / "commonroom.service.d" / "hardening.conf").read_text()
    for needed in ("ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes"):
        assert needed in hardening
