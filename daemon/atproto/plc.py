"""did:plc rotation keys and the operations they sign.

A did:plc document lists *rotation keys*, most powerful first: any one of them may sign an
operation that changes the document (its PDS, its handle, its keys), and within 72 hours a
higher key may override an operation signed by a lower one. A community account that
Commonroom provisions gets the creator's **recovery key** above the PDS's own key
(``createAccount``'s ``recoveryKey``), so whoever holds it controls the identity with no
help from the PDS or from this service (docs/communities.md, "Who owns a community").

Keys here are secp256k1 (``did:key:zQ3s…``, the PDS's own kind). An operation is signed over
its DAG-CBOR encoding without ``sig`` (ECDSA SHA-256, low-S, raw r‖s, base64url with no
padding), and names the CID of the operation before it as ``prev``: the PLC directory's
rules, encoded with libipld and signed with cryptography, not by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.atproto.pds import PdsError, check_service_url, request
from daemon.base import ApiError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

    from daemon.runtime.app import Application

_ORDER = 0xFFFFFFFF_FFFFFFFF_FFFFFFFF_FFFFFFFE_BAAEDCE6_AF48A03B_BFD25E8C_D0364141
_K256_PREFIX = "did:key:zQ3s"  # secp256k1 public keys in did:key form all start so
_MAX_PLC_BYTES = 256 * 1024


@dataclass(frozen=True)
class RotationKey:
    """A secp256k1 key that can sign PLC operations; `hex` is its private half, the form
    the PDS and the atproto tools (``goat``) take."""

    private: "ec.EllipticCurvePrivateKey"

    @classmethod
    def generate(cls) -> "RotationKey":
        from cryptography.hazmat.primitives.asymmetric import ec
        return cls(ec.generate_private_key(ec.SECP256K1()))

    @classmethod
    def from_hex(cls, text: str) -> "RotationKey":
        from cryptography.hazmat.primitives.asymmetric import ec
        value = int(text.strip(), 16)
        if not 0 < value < _ORDER:
            raise ValueError("not a secp256k1 private key")
        return cls(ec.derive_private_key(value, ec.SECP256K1()))

    @property
    def hex(self) -> str:
        return format(self.private.private_numbers().private_value, "064x")

    @property
    def did_key(self) -> str:
        from atproto_crypto.consts import SECP256K1_JWT_ALG
        from atproto_crypto.did import format_did_key
        from cryptography.hazmat.primitives import serialization
        uncompressed = self.private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return format_did_key(SECP256K1_JWT_ALG, uncompressed)

    def sign(self, data: bytes) -> bytes:
        """ECDSA over SHA-256 as atproto wants it: 64 bytes r‖s with a low s."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
        r, s = decode_dss_signature(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
        if s > _ORDER // 2:
            s = _ORDER - s
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def require_did_key(value: Any, field: str) -> str:
    """A secp256k1 or P-256 did:key a person gives as their recovery key (400 otherwise)."""
    from atproto_crypto.did import parse_did_key

    from daemon.http.base import invalid
    if not isinstance(value, str) or not value.startswith("did:key:z") or len(value) > 128:
        raise invalid(field, "must be a did:key (did:key:z…), the public half of a key you hold")
    try:
        parse_did_key(value)
    except Exception:
        raise invalid(field, "is not the did:key of a secp256k1 or P-256 key") from None
    return value


def operation_cid(operation: dict[str, Any]) -> str:
    """The CID (v1, dag-cbor, sha-256, base32) the PLC directory gives an operation."""
    import libipld
    digest = hashlib.sha256(libipld.encode_dag_cbor(operation)).digest()
    return libipld.encode_multibase("b", b"\x01\x71\x12\x20" + digest)


def sign_operation(unsigned: dict[str, Any], key: RotationKey) -> dict[str, Any]:
    """`unsigned` (no ``sig``) signed by `key`."""
    import libipld
    body = {k: v for k, v in unsigned.items() if k != "sig"}
    sig = base64.urlsafe_b64encode(key.sign(libipld.encode_dag_cbor(body))).rstrip(b"=").decode()
    return {**body, "sig": sig}


def next_operation(current: dict[str, Any], prev_cid: str, **changes: Any) -> dict[str, Any]:
    """An unsigned operation after the one whose data is `current` (the directory's
    ``/data``: rotationKeys, verificationMethods, alsoKnownAs, services), with `changes`."""
    fields = ("rotationKeys", "verificationMethods", "alsoKnownAs", "services")
    op = {"type": "plc_operation", **{k: current[k] for k in fields}, "prev": prev_cid}
    op.update(changes)
    return op


# ------------------------------------------------------------------ the directory


def _plc_base(app: "Application") -> str:
    return check_service_url(app, app.config.atproto.plc_url, "PLC directory")


async def _get_json(app: "Application", url: str, did: str) -> Any:
    resp = await request(app, "GET", url, what="PLC directory", label=did, max_bytes=_MAX_PLC_BYTES)
    if resp.status_code in (404, 410):
        raise ApiError(400, "unknown_did", f"{did} is not known to the PLC directory ({resp.status_code})")
    if resp.status_code != 200:
        raise PdsError(f"the PLC directory answered {resp.status_code} for {did}", pds_status=resp.status_code)
    return json.loads(resp.content)


async def plc_data(app: "Application", did: str) -> dict[str, Any]:
    """The DID's current PLC data: rotationKeys, verificationMethods, alsoKnownAs, services."""
    return await _get_json(app, f"{_plc_base(app)}/{did}/data", did)


async def plc_last_cid(app: "Application", did: str) -> str:
    """The CID of the DID's newest operation, the ``prev`` of the next one."""
    log = await _get_json(app, f"{_plc_base(app)}/{did}/log/audit", did)
    if not isinstance(log, list) or not log or not isinstance(log[-1].get("cid"), str):
        raise PdsError(f"the PLC directory's audit log for {did} is empty")
    return log[-1]["cid"]


async def plc_last_operation(app: "Application", did: str) -> dict[str, Any]:
    """The DID's newest operation, ``{"operation": {...}, "cid": ...}`` (its audit log's last
    entry), to build the next one from."""
    log = await _get_json(app, f"{_plc_base(app)}/{did}/log/audit", did)
    if not isinstance(log, list) or not log or not isinstance(log[-1].get("operation"), dict):
        raise PdsError(f"the PLC directory's audit log for {did} is empty")
    return {"operation": log[-1]["operation"], "cid": log[-1]["cid"]}


async def submit_operation(app: "Application", did: str, operation: dict[str, Any]) -> None:
    """Send a signed operation to the directory; 400 ``plc_refused`` with its words when it
    says no (a wrong key, a stale ``prev``)."""
    resp = await request(app, "POST", f"{_plc_base(app)}/{did}", what="PLC directory", label=did,
                         json=operation, max_bytes=_MAX_PLC_BYTES)
    if resp.status_code >= 500:
        raise PdsError(f"the PLC directory answered {resp.status_code} for {did}", pds_status=resp.status_code)
    if resp.status_code != 200:
        try:
            message = json.loads(resp.content).get("message") or resp.text
        except ValueError:
            message = resp.text
        raise ApiError(400, "plc_refused", f"the PLC directory refused the operation for {did}: {message[:300]}")


async def add_rotation_key(app: "Application", did: str, signer: RotationKey, new_key: str,
                           *, position: int) -> None:
    """Put `new_key` at `position` of the DID's rotation keys (no-op when it is there),
    signed by `signer`, which must be one of them."""
    data = await plc_data(app, did)
    keys = [k for k in data["rotationKeys"] if k != new_key]
    if new_key in data["rotationKeys"] and data["rotationKeys"].index(new_key) == position:
        return
    keys.insert(position, new_key)
    op = next_operation(data, await plc_last_cid(app, did), rotationKeys=keys[:5])
    await submit_operation(app, did, sign_operation(op, signer))
