"""Holes the second security probe found (issue 22) in the network, proof, parsing and
backup layers: a token header whose ``alg`` is a list, duplicate JSON keys, encoded invite
codes in logs, connection floods, and the smaller findings that go with them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.fixtures_communities import Api, seed_community

ADMIN = "did:plc:seedadmin"
USER = "did:plc:seeduser"


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _token(header: dict[str, Any], claims: dict[str, Any] | str) -> str:
    payload = claims if isinstance(claims, str) else _b64(claims)
    return f"{_b64(header)}.{payload}.{base64.urlsafe_b64encode(b'x' * 64).decode().rstrip('=')}"


# ------------------------------------------------------------------ hole 6: proofs


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"identity": {"user_proof": "optional"}}


async def test_a_token_whose_alg_is_not_a_string_is_a_proof_error_not_a_500(app: Any, client: Any) -> None:
    api = await Api.make(app, client)
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id)
    now = int(time.time())
    claims = {"iss": USER, "aud": app.proofs.did, "lxm": "community.commonroom.membership.join",
              "exp": now + 30, "iat": now, "jti": "j" * 16}
    for alg in (["ES256K"], {"ES256K": 1}, 256, None):
        resp = await client.post(api.path(did, "/members/join"), api_key=api.key, json={"userDid": USER},
                                 headers={"Authorization": f"Bearer {_token({'alg': alg, 'typ': 'JWT'}, claims)}"})
        assert resp.status == 401, (alg, resp.text)
        assert resp.json()["error"] == "proof_bad_signature", resp.text
    # A claim named twice (the last would win here, the first elsewhere) is not a token either.
    twice = base64.urlsafe_b64encode(
        f'{{"iss": "did:plc:other", "iss": "{USER}", "aud": "{app.proofs.did}"}}'.encode()).decode().rstrip("=")
    resp = await client.post(api.path(did, "/members/join"), api_key=api.key, json={"userDid": USER},
                             headers={"Authorization": f"Bearer {_token({'alg': 'ES256K'}, twice)}"})
    assert resp.status == 401 and resp.json()["error"] == "proof_bad_signature", resp.text


# ------------------------------------------------------------------ keys in the configuration


def test_a_malformed_previous_secret_key_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"storage: {{state_dir: {tmp_path / 'st'}}}\n"
                      f"previous_secret_keys: ['{'ab' * 32}', 'not a key']\n")
    for command in ("serve", "check-config", "migrate"):
        result = subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), command],
                                capture_output=True, text=True, cwd=REPO, timeout=60)
        assert result.returncode == 2, (command, result.stderr)
        assert "configuration error: previous_secret_keys[1]: a secret key must be 32 bytes" in result.stderr
        assert "Traceback" not in result.stderr
    config.write_text(f"storage: {{state_dir: {tmp_path / 'st'}, backup_key: 'short'}}\n")
    result = subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), "check-config"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2 and "storage.backup_key: a secret key must be 32 bytes" in result.stderr
