"""The client's signing keys for `private_key_jwt`, and the per-session DPoP keys.

Client keys come from `oauth.signing_keys` (PEM, typically `{$file: ...}`) or, when none
are configured, from `<state_dir>/oauth_client_key.pem`, generated on first run. Several
keys may be listed so a key can be rotated: the first one signs, all of them are
published in the JWKS until removed. The JWKS carries public keys only.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from joserfc.jwk import ECKey

from daemon.plugin import ConfigError

log = logging.getLogger("commonroom.oauth")

GENERATED_KEY_FILE = "oauth_client_key.pem"


@dataclass(frozen=True)
class ClientKeys:
    keys: tuple[ECKey, ...]

    @property
    def signing(self) -> ECKey:
        return self.keys[0]

    @staticmethod
    def kid(key: ECKey) -> str:
        return key.thumbprint()

    def jwks(self) -> dict[str, Any]:
        """The public JWKS: no private parameter ever leaves this function."""
        out = []
        for key in self.keys:
            public = key.as_dict(private=False)
            out.append({**public, "kid": self.kid(key), "alg": "ES256", "use": "sig"})
        return {"keys": out}


def _load_pem(text: str, where: str) -> ECKey:
    try:
        private = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"not a PEM private key without a passphrase ({exc})", where) from None
    if not isinstance(private, ec.EllipticCurvePrivateKey) or not isinstance(private.curve, ec.SECP256R1):
        raise ConfigError("must be an EC P-256 key (ES256)", where)
    return ECKey.import_key(private)


def generate_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def load_client_keys(configured: tuple[str, ...], state_dir: Path) -> ClientKeys:
    if configured:
        return ClientKeys(tuple(_load_pem(pem, f"oauth.signing_keys[{i}]")
                                for i, pem in enumerate(configured)))
    path = state_dir / GENERATED_KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process won the race; read theirs
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(generate_pem())
            log.warning("no oauth.signing_keys configured: generated a client key into %s", path)
    return ClientKeys((_load_pem(path.read_text(), str(path)),))


# ------------------------------------------------------------------ DPoP keys


def new_dpop_key() -> ECKey:
    return ECKey.generate_key("P-256", private=True)


def dump_private(key: ECKey) -> str:
    return json.dumps(key.as_dict(private=True), separators=(",", ":"))


def load_private(text: str) -> ECKey:
    return ECKey.import_key(json.loads(text))
