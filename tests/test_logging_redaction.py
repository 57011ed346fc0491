"""Secrets never reach the logs: the daemon's own log output (a real `commonroom serve`
process, its stderr captured) after requests that carry an OAuth code, state, tokens and
keys in their URLs."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from daemon.security.redact import REDACTED, RedactSecrets, redact

REPO = Path(__file__).resolve().parent.parent
API_KEY = "cr_" + "7e" * 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def daemon(tmp_path):
    """A `commonroom serve` process at debug level; yields (port, function that stops it
    and returns everything it logged)."""
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        f"server: {{host: 127.0.0.1, port: {port}, base_url: 'http://127.0.0.1:{port}'}}\n"
        f"storage: {{state_dir: {tmp_path / 'state'}}}\nsecret_key: '{'33' * 32}'\nlog_level: debug\n"
        "access_log: {successful_reads: 1}\n")  # every line, to look for secrets in
    log_path = tmp_path / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("COMMONROOM_CONFIG", None)
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), "serve"],
                                env=env, stdout=log_file, stderr=subprocess.STDOUT)

    def stop() -> str:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        return log_path.read_text()

    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the daemon did not start"
                time.sleep(0.1)
        yield port, stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def fetch(port: int, path: str, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_daemon_logs_no_oauth_code_state_token_or_key(daemon):
    port, stop = daemon
    secrets = {"code": "cod-Jq8sX2mWv9", "state": "st-Rz4kP0tLx7", "token": "tok-Hb3nD6yQe1",
               "refresh": "ref-Wc5gT8uAa2", "key": API_KEY, "password": "pw-Ns7vB1oKi4"}
    callback = (f"/oauth/callback?code={secrets['code']}&state={secrets['state']}"
                f"&iss=https%3A%2F%2Fpds.example.com")
    assert fetch(port, callback) == 400                               # an unknown login: a warning line
    assert fetch(port, f"/health?access_token={secrets['token']}&refresh_token={secrets['refresh']}") == 200
    assert fetch(port, f"/api/v1/apps?api_key={secrets['key']}&password={secrets['password']}") == 401
    assert fetch(port, "/api/v1/apps", headers={"X-Api-Key": API_KEY}) == 401
    logged = stop()

    # the lines were written (so the check below is not vacuous), with the values hidden
    callback_lines = [line for line in logged.splitlines() if "/oauth/callback?" in line]
    assert callback_lines and "WARNING commonroom.access" in callback_lines[0], logged
    assert f"code={REDACTED}" in callback_lines[0] and f"state={REDACTED}" in callback_lines[0]
    assert "iss=https%3A%2F%2Fpds.example.com" in callback_lines[0]   # not a secret: kept
    assert f"access_token={REDACTED}" in logged and f"api_key={REDACTED}" in logged
    for name, value in secrets.items():
        assert value not in logged, f"the {name} is in the log:\n{logged}"


@pytest.mark.parametrize("text, expected", [
    ("GET /oauth/callback?state=s1&code=c1&iss=x", f"GET /oauth/callback?state={REDACTED}&code={REDACTED}&iss=x"),
    ("/x?access_token=a&refreshToken=b&id_token=c&client_secret=d&apiKey=e&API-KEY=f",
     f"/x?access_token={REDACTED}&refreshToken={REDACTED}&id_token={REDACTED}&client_secret={REDACTED}"
     f"&apiKey={REDACTED}&API-KEY={REDACTED}"),
    ("form code_verifier=v&client_assertion=j&password=p&limit=20",
     f"form code_verifier={REDACTED}&client_assertion={REDACTED}&password={REDACTED}&limit=20"),
    ("status_code=200 postcode=AB1 errorcode=7", "status_code=200 postcode=AB1 errorcode=7"),
    ('PDS said {"access_token": "a\\"b", "sub": "did:plc:x"}', f'PDS said {{"access_token": "{REDACTED}", "sub": "did:plc:x"}}'),
    ("key " + API_KEY + " refused", f"key {REDACTED} refused"),
    ("Authorization: DPoP eyJhbGciOi.eyJzdWIi.c2ln", f"Authorization: DPoP {REDACTED}"),
    ("did:plc:abc joined community did:plc:def", "did:plc:abc joined community did:plc:def"),
    ("200 GET /api/v1/invites/Zk3_q-8xYbT2wLmN0pQrS4uV 2.1ms", f"200 GET /api/v1/invites/{REDACTED} 2.1ms"),
    ("302 GET /invite/Zk3_q-8xYbT2wLmN0pQrS4uV 2.1ms", f"302 GET /invite/{REDACTED} 2.1ms"),
    ("login returnTo=%2Finvite%2FZk3_q-8xYbT2wLmN0pQrS4uV", f"login returnTo=%2Finvite%2F{REDACTED}"),
    ("return_to='/invite/Zk3_q-8xYbT2wLmN0pQrS4uV'", f"return_to='/invite/{REDACTED}'"),
    ("DELETE /api/v1/communities/did:plc:x/invites/inv_12", "DELETE /api/v1/communities/did:plc:x/invites/inv_12"),
    # Percent-encoded codes are the same working codes (the router decodes the segment).
    ("302 GET /invite/%5Ak3_q-8xYbT2wLmN0pQrS4uV 2.1ms", f"302 GET /invite/{REDACTED} 2.1ms"),
    ("GET /invite/%5A%6B%33%5F%71%2D%38%78%59%62%54%32%77%4C%6D%4E%30 2.1ms", f"GET /invite/{REDACTED} 2.1ms"),
    ("GET /invites/%255Ak3_q-8xYbT2wLmN0pQrS4uV?x=1", f"GET /invites/{REDACTED}?x=1"),
    ("returnTo=%2Finvite%2F%255Ak3_q-8xYbT2wLmN0pQrS4uV", f"returnTo=%2Finvite%2F{REDACTED}"),
    ("404 GET /INVITE/Zk3_q-8xYbT2wLmN0pQrS4uV", f"404 GET /INVITE/{REDACTED}"),
    ("DELETE /api/v1/communities/did:plc:x/invites/inv%5F12", "DELETE /api/v1/communities/did:plc:x/invites/inv%5F12"),
])
def test_redact_hides_the_documented_secrets_and_nothing_else(text, expected):
    assert redact(text) == expected


def test_the_filter_also_cleans_arguments_and_tracebacks():
    record = logging.LogRecord("commonroom.x", logging.ERROR, __file__, 1, "failed %s", ("/cb?code=c9",), None)
    try:
        raise ValueError("bad token=t9")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert RedactSecrets().filter(record)
    text = logging.Formatter().format(record)
    assert "c9" not in text and "t9" not in text and f"code={REDACTED}" in text and f"token={REDACTED}" in text
