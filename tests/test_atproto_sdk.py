"""The atproto SDK is declared as a range of versions (setup.cfg). This module exercises,
offline, every piece of the SDK the daemon uses, through the daemon's own functions where it
has them: service-auth JWTs (``atproto_server.auth.jwt.parse_jwt``), signing keys from DID
documents (``atproto_crypto``: Multikey and the legacy bare-key forms), ES256/ES256K
signatures (``atproto_crypto.algs``); the strict string formats (``atproto_client.models.
string_formats``) are exercised by tests/test_atproto_syntax.py.

``scripts/check_atproto_range`` runs these two modules on the range's lowest and highest
versions; the suite itself runs on the version installed, which must be in the range."""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import json
from pathlib import Path

import libipld
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from packaging.specifiers import SpecifierSet

from daemon.atproto.proofs import _verify, signing_key

ROOT = Path(__file__).resolve().parent.parent
DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
#: multicodec prefixes (varint) of compressed public keys, as in did:key and Multikey
PREFIX = {"ES256": b"\x80\x24", "ES256K": b"\xe7\x01"}
CURVE = {"ES256": ec.SECP256R1(), "ES256K": ec.SECP256K1()}
ORDER = {"ES256": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
         "ES256K": 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141}


def declared_range() -> SpecifierSet:
    """The atproto range setup.cfg declares, read by scripts/check_atproto_range.py's own
    reader (the script that tries the range's ends), so both read it alike."""
    spec = importlib.util.spec_from_file_location("check_atproto_range", ROOT / "scripts" / "check_atproto_range.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.declared_range()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def compressed(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)


def sign(alg: str, key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    """A compact (r || s) signature with a low s, as atproto requires."""
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
    s = min(s, ORDER[alg] - s)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def document(method_type: str, multibase: str) -> dict:
    return {"id": DID, "verificationMethod": [
        {"id": f"{DID}#atproto", "type": method_type, "controller": DID, "publicKeyMultibase": multibase}]}


def test_the_installed_sdk_is_in_the_declared_range():
    installed = importlib.metadata.version("atproto")
    spec = declared_range()
    assert installed in spec, f"atproto {installed} is installed; setup.cfg declares {spec}"
    assert any(s.operator == "<" for s in spec), "an upper bound: a new 0.0.x may change anything"


@pytest.mark.parametrize("alg", ["ES256", "ES256K"])
def test_a_service_auth_jwt_is_parsed_and_its_signature_checked_with_the_documents_key(alg):
    from atproto_server.auth.jwt import parse_jwt
    from atproto_server.exceptions import TokenDecodeError

    key = ec.generate_private_key(CURVE[alg])
    public = compressed(key)
    multikey = libipld.encode_multibase("z", PREFIX[alg] + public)
    current = signing_key(document("Multikey", multikey), DID)
    legacy = {"ES256": "EcdsaSecp256r1VerificationKey2019", "ES256K": "EcdsaSecp256k1VerificationKey2019"}[alg]
    old = signing_key(document(legacy, libipld.encode_multibase("z", public)), DID)
    assert current is not None and old is not None and current[0] == old[0] == alg

    header = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"iss": DID, "aud": "did:web:club.test", "lxm": "x.y.z", "exp": 2}).encode())
    signing_input = f"{header}.{payload}".encode()
    signature = sign(alg, key, signing_input)
    payload_raw, parsed_input, parsed_header, parsed_signature = parse_jwt(
        f"{header}.{payload}.{b64url(signature)}")
    assert json.loads(payload_raw)["iss"] == DID and parsed_header["alg"] == alg
    assert (parsed_input, parsed_signature) == (signing_input, signature)
    assert _verify(current, signing_input, signature) and _verify(old, signing_input, signature)
    assert not _verify(current, signing_input + b"x", signature)
    other = compressed(ec.generate_private_key(CURVE[alg]))
    assert not _verify((alg, other), signing_input, signature)
    with pytest.raises((TokenDecodeError, ValueError)):
        parse_jwt("not-a-jwt")


def test_a_high_s_signature_is_refused():
    """atproto accepts only low-s signatures (one valid signature per message)."""
    key = ec.generate_private_key(ec.SECP256R1())
    data = b"header.payload"
    low = sign("ES256", key, data)
    r, s = low[:32], int.from_bytes(low[32:], "big")
    high = r + (ORDER["ES256"] - s).to_bytes(32, "big")
    assert _verify(("ES256", compressed(key)), data, low)
    assert not _verify(("ES256", compressed(key)), data, high)


def test_an_unreadable_key_yields_no_key():
    assert signing_key(document("Multikey", "zNotBase58!"), DID) is None
    assert signing_key(document("Multikey", "mAAAA"), DID) is None
    assert signing_key({"verificationMethod": []}, DID) is None
