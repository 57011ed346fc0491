"""Proofs of the acting user (docs/identity.md).

An app that names a user (`userDid`, `adminDid`, `currentOwnerDid`, `creatorDid`) may prove
that the user is there: it sends, beside its API key, the user's atproto service-auth JWT
in ``Authorization: Bearer <jwt>``, obtained from the user's PDS with
``com.atproto.server.getServiceAuth`` (``aud`` = this service's DID, ``lxm`` = the action's
method id). The service checks:

* the claims: ``iss`` is the DID the body names, ``aud`` is this service's DID, ``lxm`` is
  the route's method id, ``exp`` is in the future and not further than
  `identity.max_proof_lifetime_seconds`, ``iat`` not in the future;
* the signature (ES256K or ES256), against the ``#atproto`` signing key of the user's DID
  document (through the identity cache; on a bad signature the document is fetched once
  more, for a key that was just rotated);
* that the token's ``jti`` was not used before (a bounded in-memory cache; each id is
  kept until its token expires).

Policy: `identity.user_proof` is ``off`` (tokens ignored), ``optional`` (a token is
verified when sent, and a bad one refused) or ``required``; a community's admins can
require proofs there. Browser sessions are proven by their OAuth login.
"""

from __future__ import annotations

import heapq
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from daemon.atproto import syntax
from daemon.base import ApiError
from daemon.http.base import strict_json_loads

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application
    from daemon.runtime.config import Config

_ALGS = frozenset({"ES256K", "ES256"})
_CLOCK_SKEW = 30.0


@dataclass(frozen=True)
class UserMethod:
    """What a route does in a user's name: its method id and the body or query field that
    names the user. Declared on handler classes as ``user_methods = {"POST": UserMethod(...)}``
    (or, for a route whose path chooses the action, ``{"POST": {"approve": UserMethod(...),
    "reject": UserMethod(...)}}``).

    `name` is a full NSID under the plugin's own authority (``com.example.notices.post``,
    with a lexicon the plugin ships, `cr_lexicons`), or, for the built-ins, a two-part name
    under the service's `atproto.namespace` (``membership.join``)."""

    name: str
    field: str
    description: str = ""

    def id(self, namespace: str) -> str:
        """The method id: `name` itself when it is a full NSID, else ``<namespace>.<name>``."""
        return self.name if self.name.count(".") >= 2 else f"{namespace}.{self.name}"


# ------------------------------------------------------------------ the service's DID


def service_did(config: "Config") -> str:
    """`identity.service_did`, or did:web of `server.base_url`'s host."""
    if config.identity.service_did:
        return config.identity.service_did
    parts = urlsplit(config.server.base_url)
    host = (parts.hostname or "localhost").lower()
    try:
        if ipaddress.ip_address(host).is_loopback:
            host = "localhost"  # the one host atproto accepts in a did:web with a port
    except ValueError:
        pass
    return f"did:web:{host}" + (f"%3A{parts.port}" if parts.port else "")


def did_document(config: "Config") -> dict[str, Any]:
    did = service_did(config)
    return {
        "@context": ["https://www.w3.org/ns/did/v1"],
        "id": did,
        "service": [{"id": "#commonroom", "type": "CommonroomService",
                     "serviceEndpoint": config.server.base_url.rstrip("/")}],
    }


def method_id(app: "Application", method: UserMethod) -> str:
    return method.id(app.config.atproto.namespace)


# ------------------------------------------------------------------ replays


class ReplayCache:
    """Token ids seen, each kept until its token's expiry. At `size` entries the ones that
    expire soonest are dropped first (they are the least useful to replay)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def first_use(self, key: str, expires: float, now: float) -> bool:
        """Record `key`; False if it was seen before and has not expired."""
        while self._heap and (self._heap[0][0] <= now or len(self._expiry) >= self.size):
            exp, old = heapq.heappop(self._heap)
            if self._expiry.get(old) == exp:
                del self._expiry[old]
        seen = self._expiry.get(key)
        if seen is not None and seen > now:
            return False
        self._expiry[key] = expires
        heapq.heappush(self._heap, (expires, key))
        return True


# ------------------------------------------------------------------ verification


def _refuse(code: str, message: str) -> ApiError:
    return ApiError(401, code, message, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


class Proofs:
    """The application's proof checker (``app.proofs``)."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        self.did = service_did(app.config)
        self.replays = ReplayCache(app.config.identity.replay_cache_size)

    async def acting_user(self, handler: Any, user_did: str, method: UserMethod | None,
                          community_requires: bool = False) -> bool:
        """Whether `user_did`, named by the request, is proven. Raises 401 for a bad proof,
        or for a missing one where the policy requires it."""
        principal = handler.principal
        if principal is not None and principal.kind == "session":
            return principal.did == user_did
        policy = self.app.config.identity.user_proof
        if policy == "off" or method is None:
            return False
        sent = handler.request.headers.get("Authorization")
        if sent:
            scheme, _, token = sent.strip().partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise _refuse("proof_bad_signature",
                              "Authorization must be `Bearer <service-auth JWT>` from the user's PDS.")
            await self.verify(token.strip(), user_did=user_did, lxm=method_id(self.app, method))
            return True
        if policy == "required" or community_requires:
            where = "this service" if policy == "required" else "this community"
            raise _refuse("user_proof_required",
                          f"{where} requires proof of the acting user: send their service-auth token "
                          f"(com.atproto.server.getServiceAuth with aud={self.did} and "
                          f"lxm={method_id(self.app, method)}) in `Authorization: Bearer <token>`.")
        return False

    async def verify(self, token: str, *, user_did: str | None, lxm: str) -> str:
        """Check `token` (see the module docstring) and return its issuer. `user_did` None
        (an XRPC call, daemon/atproto/xrpc.py): the issuer is whoever the token names, a DID."""
        from atproto_server.auth.jwt import parse_jwt
        from atproto_server.exceptions import TokenDecodeError

        if len(token) > 8192:
            raise _refuse("proof_bad_signature", "The proof is not a service-auth token (too long).")
        try:
            payload_raw, signing_input, header, signature = parse_jwt(token)
            claims = strict_json_loads(payload_raw)  # no claim named twice
        except (TokenDecodeError, ValueError, UnicodeDecodeError, RecursionError):
            # RecursionError: claims nested deeper than the parser goes (they fit in 8 KiB)
            raise _refuse("proof_bad_signature", "The proof is not a JWT.") from None
        alg = header.get("alg") if isinstance(header, dict) else None
        # `alg` comes from the sender: a list or an object is as unusable as an unknown name
        if not isinstance(claims, dict) or not isinstance(alg, str) or alg not in _ALGS:
            raise _refuse("proof_bad_signature", "The proof must be a JWT signed with ES256K or ES256.")
        if user_did is None:
            user_did = claims.get("iss") if syntax.is_did(claims.get("iss")) else None
            if user_did is None:
                raise _refuse("proof_bad_signature", "The proof names no user (its iss is not a DID).")
        if claims.get("iss") != user_did:
            raise _refuse("proof_wrong_user", f"The proof was issued by {str(claims.get('iss'))[:200]!r}, "
                                              f"not by the user the request names ({user_did}).")
        # A PDS forwarding an `atproto-proxy: <did>#commonroom` call may name the service
        # entry as well (the devnet PDS sends the bare DID): both are this service.
        if claims.get("aud") not in (self.did, f"{self.did}#commonroom"):
            raise _refuse("proof_wrong_audience", f"The proof is for {str(claims.get('aud'))[:200]!r}; "
                                                  f"this service is {self.did}.")
        if claims.get("lxm") != lxm:
            raise _refuse("proof_wrong_method", f"The proof is for the method {str(claims.get('lxm'))[:200]!r}; "
                                                f"this action is {lxm}.")
        now = self.app.clock.time()
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool) or exp <= now:
            raise _refuse("proof_expired", "The proof has expired (or has no exp).")
        if exp - now > self.app.config.identity.max_proof_lifetime_seconds:
            raise _refuse("proof_expired", f"The proof lives too long: at most "
                                           f"{self.app.config.identity.max_proof_lifetime_seconds} s are accepted.")
        if isinstance(iat, (int, float)) and not isinstance(iat, bool) and iat > now + _CLOCK_SKEW:
            raise _refuse("proof_expired", "The proof was issued in the future.")
        jti = claims.get("jti")
        if not isinstance(jti, str) or not 8 <= len(jti) <= 256:
            raise _refuse("proof_bad_signature", "The proof has no usable jti.")
        if not await self._signed_by(user_did, alg, signing_input, signature):
            raise _refuse("proof_bad_signature", f"The proof's signature does not verify with {user_did}'s "
                                                 "current atproto signing key.")
        if not self.replays.first_use(f"{user_did} {jti}", float(exp), now):
            raise _refuse("proof_replayed", "This proof was used before: get a new token for each request.")
        return user_did

    async def _signed_by(self, did: str, alg: str, signing_input: bytes, signature: bytes) -> bool:
        from daemon.atproto.identity import resolve_did
        for fresh in (False, True):
            try:
                info = await resolve_did(self.app, did, fresh=fresh)
            except ApiError as exc:
                if exc.status >= 500:
                    raise
                return False
            key = signing_key(info.doc, did)
            if key is not None and key[0] == alg and _verify(key, signing_input, signature):
                return True
        return False


def signing_key(doc: dict[str, Any], did: str) -> tuple[str, bytes] | None:
    """The document's atproto signing key: (JWT alg, public key bytes), or None.

    Current documents carry it as a ``Multikey`` (multicodec-prefixed, as in a did:key);
    older ones (the PLC directory's legacy form) as ``EcdsaSecp256k1VerificationKey2019`` /
    ``EcdsaSecp256r1VerificationKey2019`` with the bare key bytes (atproto's DID spec)."""
    from atproto_crypto.did import parse_multikey
    from atproto_crypto.multibase import multibase_to_bytes
    legacy = {"EcdsaSecp256k1VerificationKey2019": "ES256K", "EcdsaSecp256r1VerificationKey2019": "ES256"}
    for method in doc.get("verificationMethod") or []:
        if not (isinstance(method, dict) and method.get("id") in ("#atproto", f"{did}#atproto")):
            continue
        multibase = method.get("publicKeyMultibase")
        if not isinstance(multibase, str) or not multibase.startswith("z"):
            return None
        try:
            if method.get("type") in legacy:
                return legacy[method["type"]], multibase_to_bytes(multibase)
            parsed = parse_multikey(multibase)
            return parsed.jwt_alg, parsed.key_bytes
        except Exception:  # noqa: BLE001  (a key we cannot read verifies nothing)
            return None
    return None


def _verify(key: tuple[str, bytes], signing_input: bytes, signature: bytes) -> bool:
    from atproto_crypto.algs import ALGORITHM_TO_CLASS
    alg, key_bytes = key
    algorithm = ALGORITHM_TO_CLASS.get(alg)
    if algorithm is None or len(signature) != 64:
        return False
    try:
        return bool(algorithm().verify_signature(key_bytes, signing_input, signature))
    except Exception:  # noqa: BLE001  (a malformed key or signature is not a valid signature)
        return False


# ------------------------------------------------------------------ routes


def user_method_list(app: "Application") -> list[dict[str, Any]]:
    """Every (route, HTTP method) that acts in a user's name, with its method id."""
    from daemon.http.metrics import route_template
    out = []
    for route in app.routes:
        declared = getattr(route[1], "user_methods", None) or {}
        template = route_template(route[0])
        for http_method, spec in declared.items():
            choices = spec.items() if isinstance(spec, dict) else [(None, spec)]
            for action, method in choices:
                path = template
                if action is not None:
                    path = next((template.replace("{" + g + "}", action) for g in _alternations(template)
                                 if action in g.split("|")), template)
                out.append({"id": method_id(app, method), "httpMethod": http_method, "path": path,
                            "userField": method.field, "description": method.description})
    return sorted(out, key=lambda m: (m["path"], m["httpMethod"]))


def _alternations(template: str) -> list[str]:
    import re
    return [g for g in re.findall(r"\{([^}]+)\}", template) if "|" in g]


def _handlers() -> tuple[type, type]:
    from daemon.http.base import BaseHandler
    from daemon.http.openapi import arr, obj, operation

    string = {"type": "string"}

    class DidDocumentHandler(BaseHandler):
        """``GET /.well-known/did.json``: this service's did:web document."""

        @operation("This service's DID document (did:web): the audience of user proofs",
                   responses={200: obj({"@context": arr(string), "id": string, "service": arr(obj(
                       {"id": string, "type": string, "serviceEndpoint": string}))}, ["id", "service"])})
        async def get(self) -> None:
            self.put_header("Cache-Control", "public, max-age=300")
            self.send_json(did_document(self.app.config))

    class MethodIdsHandler(BaseHandler):
        """``GET /api/v1/method-ids``: the actions that name a user, with the method id a
        proof of that user must carry (public, no key)."""

        @operation("The actions that name a user, with the method id a proof of that user carries",
                   responses={200: obj({
                       "serviceDid": string, "userProof": {"type": "string", "enum": ["off", "optional", "required"]},
                       "methods": arr(obj({"id": string, "httpMethod": string, "path": string,
                                           "userField": string, "description": string},
                                          ["id", "httpMethod", "path", "userField"]))},
                       ["serviceDid", "userProof", "methods"])})
        async def get(self) -> None:
            self.send_json({"serviceDid": self.app.proofs.did,
                            "userProof": self.app.config.identity.user_proof,
                            "methods": user_method_list(self.app)})

    return DidDocumentHandler, MethodIdsHandler


def routes() -> list[tuple]:
    did_doc, method_ids = _handlers()
    return [(r"/\.well-known/did\.json", did_doc), (r"/api/v1/method-ids", method_ids)]


# ------------------------------------------------------------------ for plugins


async def prove_acting_user(handler: Any, user_did: str, *, required: bool = False) -> bool:
    """Whether the request proves that `user_did`, whom it names, is acting: a browser
    session of that user, or the user's service-auth token (``Authorization: Bearer``)
    for the method id the handler declares for this HTTP method in ``user_methods``.

    Raises 401 for a bad token, and for a missing one where `identity.user_proof` is
    ``required`` or `required` is True (an action that must be proven: pass it). Returns
    False for an unproven request the policy lets through (``off``, or ``optional``
    without a token): the app's word for the user, as every API-key route takes it."""
    spec = (getattr(handler, "user_methods", None) or {}).get(handler.request.method)
    if isinstance(spec, dict):
        spec = spec.get(handler.request.path.rstrip("/").rsplit("/", 1)[-1])
    if spec is None:
        raise LookupError(f"{type(handler).__name__} declares no user_methods entry for {handler.request.method}")
    return await handler.app.proofs.acting_user(handler, user_did, spec, community_requires=required)
