"""Community accounts: the atproto accounts the daemon acts as.

Two ways to get one: *provision* a new account on the operator's PDS (``atproto.pds_url``),
or *bring your own* with a handle/DID and an app password. Passwords and PDS session tokens
are sealed with ``app.secrets`` (AES-GCM, key id inside, bound to the row), never stored
in the clear. Sessions are kept in memory and in the database, refreshed when they expire,
and one login per account is shared by all concurrent callers. The rows' queries are at
the end of this module (``community_accounts``, ``account_provisioning``).
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.atproto.identity import resolve_identity
from daemon.atproto.pds import PdsError, RepoClient, check_service_url, xrpc
from daemon.atproto.plc import (RotationKey, add_rotation_key, next_operation, plc_data, plc_last_cid,
                                sign_operation, submit_operation)
from daemon.atproto.syntax import is_did, is_handle, normalize_handle, require_did, require_handle
from daemon.base import KeyedLocks
from daemon.base import ApiError
from daemon.security.secretbox import SecretBoxError
from daemon.http.base import invalid
from store.db import Reader, Row, Transaction

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.atproto")

_EXPIRY_MARGIN = 60.0  # refresh this long before the PDS would reject a token
_APP_PASSWORD_SCOPES = frozenset({"com.atproto.appPass", "com.atproto.appPassPrivileged"})


@dataclass(frozen=True)
class CommunityAccount:
    did: str
    handle: str
    pds_url: str
    #: the did:key at the head of the DID's rotation keys, when this service provisioned it
    recovery_key: str | None = None


@dataclass(frozen=True)
class _Session:
    access_jwt: str
    refresh_jwt: str
    access_expires_at: float    # by the app's clock
    refresh_expires_at: float

    def to_json(self) -> str:
        return json.dumps({"accessJwt": self.access_jwt, "refreshJwt": self.refresh_jwt,
                           "accessExpiresAt": self.access_expires_at,
                           "refreshExpiresAt": self.refresh_expires_at})

    @classmethod
    def from_json(cls, text: str) -> _Session:
        d = json.loads(text)
        return cls(d["accessJwt"], d["refreshJwt"], d["accessExpiresAt"], d["refreshExpiresAt"])


class AccountSessions:
    """The community accounts' PDS sessions and per-account locks (``app.accounts``)."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session] = {}
        self.locks = KeyedLocks()
        self.handle_domains: tuple[str, ...] | None = None

    def lock(self, did: str) -> Any:
        """One refresh or login per account at a time (the one keyed-lock registry)."""
        return self.locks.hold(did)


# ------------------------------------------------------------------ sealing


def _password_ctx(did: str) -> str:
    return f"community_accounts.password:{did}"


def _session_ctx(did: str) -> str:
    return f"community_accounts.session:{did}"


def _pending_ctx(handle: str) -> str:
    return f"account_provisioning.password:{handle}"


def _jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a JWT, unverified (the PDS verifies; we only read lifetimes/scope)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims if isinstance(claims, dict) else {}
    except (IndexError, ValueError):
        return {}


def _lifetime(token: str, default: float) -> float:
    claims = _jwt_claims(token)
    try:
        return float(claims["exp"]) - float(claims["iat"])
    except (KeyError, TypeError, ValueError):
        return default


def _session_from(app: Application, res: dict[str, Any]) -> _Session:
    """A PDS session answer -> expiries by our clock (lifetimes from the tokens, so clock
    skew between us and the PDS does not matter)."""
    access, refresh = res.get("accessJwt"), res.get("refreshJwt")
    if not isinstance(access, str) or not isinstance(refresh, str):
        raise PdsError("the PDS's session answer holds no tokens")
    now = app.clock.time()
    return _Session(access, refresh, now + _lifetime(access, 15 * 60),
                    now + _lifetime(refresh, 24 * 3600))


# ------------------------------------------------------------------ handle domain


async def fetch_handle_domain(app: Application) -> str:
    """The first handle domain of the configured PDS (``describeServer``'s
    ``availableUserDomains``, e.g. ``.test``), fetched once per app."""
    return (await _handle_domains(app))[0]


async def _handle_domains(app: Application) -> tuple[str, ...]:
    st = app.accounts
    if st.handle_domains is None:
        pds_url = _provisioning_pds(app)
        res = await xrpc(app, "GET", pds_url, "com.atproto.server.describeServer")
        domains = tuple(d.lower() for d in res.get("availableUserDomains") or [] if isinstance(d, str))
        if not domains:
            raise PdsError(f"the PDS at {pds_url} offers no handle domain for new accounts")
        st.handle_domains = tuple(d if d.startswith(".") else f".{d}" for d in domains)
    return st.handle_domains


def handle_domain(app: Application) -> str:
    """The handle domain new community accounts get (e.g. ``.test``). Known after
    ``await fetch_handle_domain(app)`` (or a first provision_account) ran."""
    domains = app.accounts.handle_domains
    if not domains:
        raise RuntimeError("the handle domain is not known yet: await fetch_handle_domain(app) first")
    return domains[0]


def _provisioning_pds(app: Application) -> str:
    pds_url = app.config.atproto.pds_url
    if not pds_url:
        raise ApiError(400, "provisioning_unavailable",
                       "this service does not create accounts (atproto.pds_url is not set): "
                       "bring an existing account with an app password instead")
    return check_service_url(app, pds_url)


# ------------------------------------------------------------------ provision


async def provision_account(app: Application, handle: str, *, email: str | None = None,
                            recovery_key: "RotationKey | str | None" = None) -> CommunityAccount:
    """Create a new account on ``atproto.pds_url`` and keep its generated password.

    `recovery_key` becomes the first rotation key of the new DID (``createAccount``'s
    ``recoveryKey``): a did:key its owner holds, or a `RotationKey` made for the owner, whose
    private half this function never stores. With a `RotationKey`, a rotation key of the
    service's own is then added below it (sealed; it signs the PLC operations of a move).
    A retry of a pending provisioning asks for the recovery key the first attempt named.

    `handle` is a full handle under the PDS's handle domain, or just its first label
    (``mygroup`` -> ``mygroup.test``). The password is sealed and stored *before* the PDS is
    called, so a crash or timeout after the PDS created the account loses nothing; calling
    again with the same handle reuses it (and finds the account if it was created).
    Handle taken: 409 ``handle_taken``; bad handle: 400; PDS failure: 502.
    """
    pds_url = _provisioning_pds(app)
    cfg = app.config.atproto
    domains = await _handle_domains(app)
    if isinstance(handle, str) and "." not in handle.strip():
        handle = normalize_handle(handle) + domains[0]
    handle = require_handle(handle, "handle")
    if not any(handle.endswith(d) and len(handle) > len(d) for d in domains):
        raise invalid("handle", f"must end in {' or '.join(domains)} (the PDS's handle domain)")
    now = app.clock.iso_now()
    async with app.db.transaction("accounts.provision_begin") as tx:
        pending = await get_provisioning_tx(tx, handle)
        wanted_key = recovery_key.did_key if isinstance(recovery_key, RotationKey) else recovery_key
        if pending is None:
            password = secrets.token_urlsafe(24)
            email = email or cfg.provision_email_template.format(handle=handle)
            await insert_provisioning_tx(
                tx, handle=handle, pds_url=pds_url, email=email,
                password_sealed=app.secrets.seal(password, _pending_ctx(handle)), now=now,
                recovery_key=wanted_key)
        else:
            password = app.secrets.open(pending["password_sealed"], _pending_ctx(handle))
            email, pds_url = pending["email"], pending["pds_url"]
            if pending["recovery_key"] != wanted_key:
                # The first attempt may have created the account with its key already.
                recovery_key = wanted_key = pending["recovery_key"]
    body: dict[str, Any] = {"handle": handle, "password": password, "email": email}
    if wanted_key:
        body["recoveryKey"] = wanted_key
    if cfg.invite_code:
        body["inviteCode"] = cfg.invite_code
    try:
        res = await xrpc(app, "POST", pds_url, "com.atproto.server.createAccount", json=body)
    except PdsError as exc:
        res = await _after_failed_create(app, pds_url, handle, password, exc)
    did, handle = res.get("did"), normalize_handle(res.get("handle") or handle)
    if not is_did(did):
        raise PdsError("the PDS's createAccount answer holds no DID")
    session = _session_from(app, res)
    async with app.db.transaction("accounts.provision_finish") as tx:
        await upsert_account_tx(
            tx, did=did, handle=handle, pds_url=pds_url, origin="provisioned",
            password_sealed=app.secrets.seal(password, _password_ctx(did)),
            session_sealed=app.secrets.seal(session.to_json(), _session_ctx(did)), now=now,
            recovery_key=wanted_key)
        await delete_provisioning_tx(tx, handle)
    app.accounts.sessions[did] = session
    log.info("provisioned community account %s (%s) on %s", handle, did, pds_url)
    if isinstance(recovery_key, RotationKey):
        await _add_service_rotation_key(app, did, recovery_key)
    return CommunityAccount(did, handle, pds_url, wanted_key)


async def _add_service_rotation_key(app: Application, did: str, recovery: RotationKey) -> None:
    """Sign, with the owner's fresh recovery key, an operation that puts a key of the
    service's own second in the DID's rotation keys. Sealed and stored before the directory
    hears of it; a failure is logged, not fatal: the service then needs the owner (or the
    PDS's e-mail token) for the operations of a move."""
    key = RotationKey.generate()
    async with app.db.transaction("accounts.rotation_key") as tx:
        await tx.execute("UPDATE community_accounts SET rotation_key_sealed = ? WHERE did = ?",
                         (app.secrets.seal(key.hex, _rotation_ctx(did)), did))
    try:
        await add_rotation_key(app, did, recovery, key.did_key, position=1)
    except (ApiError, PdsError) as exc:
        log.warning("could not add the service's rotation key to %s: %s", did, exc)


def _rotation_ctx(did: str) -> str:
    return f"community_accounts.rotation_key:{did}"


async def service_rotation_key(app: Application, did: str) -> RotationKey | None:
    """The rotation key this service holds for a community account, if any."""
    row = await app.db.fetchone("SELECT rotation_key_sealed FROM community_accounts WHERE did = ?", (did,))
    if row is None or not row["rotation_key_sealed"]:
        return None
    return RotationKey.from_hex(app.secrets.open(row["rotation_key_sealed"], _rotation_ctx(did)))


async def request_plc_token(app: Application, did: str) -> str:
    """Ask the community's PDS to e-mail the token it signs a PLC operation with
    (``com.atproto.identity.requestPlcOperationSignature``); the address it goes to."""
    account = await account_row(app.db, did)
    if account is None or account["origin"] != "provisioned":
        raise ApiError(404, "account_not_found", f"This service provisioned no account {did}.")
    await xrpc(app, "POST", account["pds_url"], "com.atproto.identity.requestPlcOperationSignature",
               auth=await _access_token(app, did))
    return app.config.atproto.provision_email_template.format(handle=account["handle"])


async def add_recovery_key(app: Application, did: str, recovery_key: str, *, token: str | None = None) -> list[str]:
    """Give a community account made before recovery keys (its DID lists only its PDS's
    rotation key) the owner's `recovery_key` first and a key of this service's second, so the
    owner controls the identity and the service can sign a move. Signed by the service's own
    key when the DID lists it; otherwise by the PDS, which wants the `token` it e-mails to the
    account's address (`request_plc_token`). A key already there that is neither the PDS's nor
    the service's is the owner's: it is never replaced (409 ``recovery_key_present``).
    Returns the DID's rotation keys afterwards."""
    account = await account_row(app.db, did)
    if account is None or account["origin"] != "provisioned":
        raise ApiError(404, "account_not_found", f"This service provisioned no account {did}.")
    data = await plc_data(app, did)
    keys: list[str] = list(data.get("rotationKeys") or [])
    auth = await _access_token(app, did)
    recommended = await xrpc(app, "GET", account["pds_url"], "com.atproto.identity.getRecommendedDidCredentials",
                             auth=auth)
    pds_keys = set(recommended.get("rotationKeys") or [])
    service = await service_rotation_key(app, did)
    owners = [k for k in keys if k not in pds_keys and (service is None or k != service.did_key)]
    if owners:
        raise ApiError(409, "recovery_key_present",
                       f"The identity of {did} already lists a recovery key ({owners[0]}): this service never "
                       "replaces its owner's key; the owner can, with that key.")
    if service is None:
        service = RotationKey.generate()
        async with app.db.transaction("accounts.rotation_key") as tx:
            await tx.execute("UPDATE community_accounts SET rotation_key_sealed = ? WHERE did = ?",
                             (app.secrets.seal(service.hex, _rotation_ctx(did)), did))
    wanted = [recovery_key, service.did_key] + [k for k in keys if k not in (recovery_key, service.did_key)]
    if service.did_key in keys:
        op = next_operation(data, await plc_last_cid(app, did), rotationKeys=wanted[:5])
        await submit_operation(app, did, sign_operation(op, service))
    else:
        if not token:
            raise ApiError(400, "plc_token_required",
                           f"Only the PDS can sign this change, with the token it e-mails to the account's "
                           f"address ({app.config.atproto.provision_email_template.format(handle=account['handle'])}"
                           "): ask for it first, then give it.")
        try:
            signed = await xrpc(app, "POST", account["pds_url"], "com.atproto.identity.signPlcOperation",
                                json={"token": token.strip(), "rotationKeys": wanted[:5]}, auth=auth)
            await xrpc(app, "POST", account["pds_url"], "com.atproto.identity.submitPlcOperation",
                       json={"operation": signed.get("operation")}, auth=auth)
        except PdsError as exc:
            if exc.transient:
                raise
            raise ApiError(400, "plc_refused", f"The PDS did not sign the change: {exc.message}") from None
    log.info("added a recovery key (and this service's rotation key) to %s", did)
    return list((await plc_data(app, did)).get("rotationKeys") or [])


async def _after_failed_create(app: Application, pds_url: str, handle: str, password: str,
                               exc: PdsError) -> dict[str, Any]:
    """createAccount failed. If the handle is taken *by us* (an earlier attempt got through
    but its answer was lost), log in with the kept password; otherwise map the error."""
    if exc.transient:
        raise exc  # the pending row stays: a retry reuses the password
    taken = exc.pds_error == "HandleNotAvailable" or \
        exc.message.lower().startswith("handle already taken")
    if taken:
        try:
            return await xrpc(app, "POST", pds_url, "com.atproto.server.createSession",
                              json={"identifier": handle, "password": password})
        except PdsError as login_exc:
            if login_exc.transient:
                raise
        await _drop_pending(app, handle)
        raise ApiError(409, "handle_taken", f"the handle {handle} is already taken") from None
    await _drop_pending(app, handle)
    if exc.pds_error in ("InvalidHandle", "UnsupportedDomain", "HandleNotAvailable"):
        raise invalid("handle", exc.message) from None
    if exc.pds_error == "InvalidRequest" and "email" in exc.message.lower():
        raise invalid("email", exc.message) from None
    raise exc


async def _drop_pending(app: Application, handle: str) -> None:
    async with app.db.transaction("accounts.provision_abandon") as tx:
        await delete_provisioning_tx(tx, handle)


# ------------------------------------------------------------------ bring your own


async def bring_own_account(app: Application, identifier: str, app_password: str) -> CommunityAccount:
    """Use an existing account: `identifier` is its handle or DID, `app_password` an app
    password. Logs in first; nothing is stored unless that works.

    Wrong password: 400 ``invalid_credentials``; the account's real password instead of an
    app password: 400 ``app_password_required``; unknown handle/DID: 400.
    """
    if not isinstance(identifier, str) or not (is_did(identifier.strip()) or
                                               is_handle(normalize_handle(identifier))):
        raise invalid("identifier", "must be the account's handle (alice.example.com) or DID")
    if not isinstance(app_password, str) or not app_password.strip():
        raise invalid("appPassword", "is required")
    app_password = app_password.strip()
    info = await resolve_identity(app, identifier)
    if not info.pds_url:
        raise ApiError(400, "no_pds", f"{info.did} has no PDS in its DID document")
    pds_url = check_service_url(app, info.pds_url)
    try:
        res = await xrpc(app, "POST", pds_url, "com.atproto.server.createSession",
                         json={"identifier": info.did, "password": app_password})
    except PdsError as exc:
        if exc.pds_status == 401 or exc.pds_error == "AuthenticationRequired":
            raise ApiError(400, "invalid_credentials",
                           f"the PDS of {info.handle or info.did} rejected that app password") from None
        if exc.pds_error in ("AccountTakedown", "AccountDeactivated"):
            raise ApiError(400, "account_unavailable", exc.message) from None
        raise
    if res.get("did") != info.did:
        raise PdsError(f"the PDS logged in {res.get('did')!r} instead of {info.did}")
    scope = _jwt_claims(res.get("accessJwt", "")).get("scope")
    if scope not in _APP_PASSWORD_SCOPES:
        await _end_session(app, pds_url, res.get("refreshJwt"))
        raise ApiError(400, "app_password_required",
                       "that is the account's own password: create an app password in the "
                       "account's settings and use that instead")
    handle = info.handle or "handle.invalid"  # atproto's marker for an unverifiable handle
    session = _session_from(app, res)
    async with app.db.transaction("accounts.bring_own") as tx:
        await upsert_account_tx(
            tx, did=info.did, handle=handle, pds_url=pds_url, origin="brought",
            password_sealed=app.secrets.seal(app_password, _password_ctx(info.did)),
            session_sealed=app.secrets.seal(session.to_json(), _session_ctx(info.did)),
            now=app.clock.iso_now())
    app.accounts.sessions[info.did] = session
    log.info("linked community account %s (%s)", handle, info.did)
    return CommunityAccount(info.did, handle, pds_url)


async def _end_session(app: Application, pds_url: str, refresh_jwt: Any) -> None:
    if not isinstance(refresh_jwt, str):
        return
    try:
        await xrpc(app, "POST", pds_url, "com.atproto.server.deleteSession", auth=refresh_jwt)
    except PdsError as exc:
        log.info("could not end a PDS session: %s", exc.message)


async def handover_credential(app: Application, did: str, name: str) -> str:
    """A credential another service can sign in to the community account `did` with, for
    handing the account over: a new app password named `name`, made on its PDS
    (``com.atproto.server.createAppPassword``) when this service holds the account's own
    password (a provisioned account); for a brought account (this service holds only an app
    password, which may not make another) the app password its owner gave, which the owner
    can revoke in the account's settings. 404 without stored credentials; PDS errors as
    ``pds`` raises them. The answer is a secret: never log it."""
    row = await account_row(app.db, did)
    if row is None:
        raise ApiError(404, "not_found", f"no credentials are stored for the account {did}")
    if row["origin"] != "provisioned":
        try:
            return app.secrets.open(row["password_sealed"], _password_ctx(did))
        except SecretBoxError as exc:
            raise ApiError(500, "credentials_unreadable",
                           f"the stored credentials of {did} cannot be decrypted ({exc})") from None
    token = await _access_token(app, did)
    try:
        res = await xrpc(app, "POST", row["pds_url"], "com.atproto.server.createAppPassword",
                         json={"name": name}, auth=token)
    except PdsError as exc:
        if not exc.is_auth_failure:
            raise
        res = await xrpc(app, "POST", row["pds_url"], "com.atproto.server.createAppPassword",
                         json={"name": name}, auth=await _access_token(app, did, token))
    password = res.get("password")
    if not isinstance(password, str) or not password:
        raise PdsError("the PDS's createAppPassword answer holds no password")
    log.info("made an app password for handing over %s", did)
    return password


# ------------------------------------------------------------------ acting as an account


async def get_account(app: Application, did: str) -> CommunityAccount | None:
    row = await account_row(app.db, did)
    return CommunityAccount(row["did"], row["handle"], row["pds_url"]) if row else None


async def community_repo(app: Application, did: str) -> RepoClient:
    """A client acting as the community account `did` (404 if we hold no credentials)."""
    did = require_did(did, "did")
    row = await account_row(app.db, did)
    if row is None:
        raise ApiError(404, "not_found", f"no credentials are stored for the account {did}")

    async def tokens(stale: str | None) -> str:
        return await _access_token(app, did, stale)

    return RepoClient(app, did, row["pds_url"], tokens)


def _usable(session: _Session | None, stale: str | None, now: float) -> bool:
    return session is not None and session.access_jwt != stale \
        and session.access_expires_at - _EXPIRY_MARGIN > now


async def _access_token(app: Application, did: str, stale: str | None = None) -> str:
    """A valid access token for `did`; `stale` is one the PDS just rejected."""
    st = app.accounts
    session = st.sessions.get(did)
    if _usable(session, stale, app.clock.time()):
        return session.access_jwt  # type: ignore[union-attr]
    async with st.lock(did):  # one refresh/login per account, whoever asks
        session = st.sessions.get(did)
        if _usable(session, stale, app.clock.time()):
            return session.access_jwt  # type: ignore[union-attr]
        row = await account_row(app.db, did)
        if row is None:
            st.sessions.pop(did, None)
            raise ApiError(404, "not_found", f"no credentials are stored for the account {did}")
        if session is None and row["session_sealed"]:
            try:
                session = _Session.from_json(app.secrets.open(row["session_sealed"], _session_ctx(did)))
            except (SecretBoxError, ValueError, KeyError) as exc:
                log.warning("stored PDS session of %s unusable (%s): logging in again", did, exc)
            if _usable(session, stale, app.clock.time()):
                st.sessions[did] = session  # type: ignore[assignment]
                return session.access_jwt  # type: ignore[union-attr]
        fresh: _Session | None = None
        if session is not None and session.refresh_expires_at - _EXPIRY_MARGIN > app.clock.time():
            try:
                res = await xrpc(app, "POST", row["pds_url"], "com.atproto.server.refreshSession",
                                 auth=session.refresh_jwt)
                fresh = _session_from(app, res)
            except PdsError as exc:
                if exc.transient:
                    raise
                log.info("refreshing the PDS session of %s failed (%s): logging in again",
                         did, exc.pds_error or exc.message)
        if fresh is None:
            fresh = await _login(app, row)
        await _save_session(app, row, fresh)
        st.sessions[did] = fresh
        return fresh.access_jwt


async def _login(app: Application, row: Any) -> _Session:
    did = row["did"]
    try:
        password = app.secrets.open(row["password_sealed"], _password_ctx(did))
    except SecretBoxError as exc:
        raise ApiError(500, "credentials_unreadable",
                       f"the stored credentials of {did} cannot be decrypted ({exc})") from None
    try:
        res = await xrpc(app, "POST", row["pds_url"], "com.atproto.server.createSession",
                         json={"identifier": did, "password": password})
    except PdsError as exc:
        if exc.pds_status == 401 or exc.pds_error == "AuthenticationRequired":
            raise PdsError(f"the PDS rejected the stored credentials of {row['handle']} ({did}): "
                           "was the app password revoked? Link the account again with a new one",
                           pds_status=exc.pds_status, pds_error=exc.pds_error, nsid=exc.nsid) from None
        raise
    return _session_from(app, res)


async def _save_session(app: Application, row: Any, session: _Session) -> None:
    did = row["did"]
    reseal = None
    if app.secrets.needs_reseal(row["password_sealed"]):  # the secret key was rotated
        reseal = app.secrets.seal(app.secrets.open(row["password_sealed"], _password_ctx(did)),
                                  _password_ctx(did))
    async with app.db.transaction("accounts.session") as tx:
        await update_session_tx(tx, did, app.secrets.seal(session.to_json(), _session_ctx(did)),
                                      app.clock.iso_now(), password_sealed=reseal)


async def forget_account(app: Application, did: str) -> None:
    """Delete the stored credentials of `did` (the community is gone). Idempotent."""
    st = app.accounts
    async with st.lock(did):
        async with app.db.transaction("accounts.forget") as tx:
            await delete_account_tx(tx, did)
        st.sessions.pop(did, None)


# ------------------------------------------------------------------ the account rows
# `community_accounts` (sealed credentials) and `account_provisioning` (creations under
# way): the core's tables, whose queries live with the sessions that use them.


async def account_row(db: Reader, did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM community_accounts WHERE did = ?", (did,))


async def upsert_account_tx(tx: Transaction, *, did: str, handle: str, pds_url: str, origin: str,
                            password_sealed: str, session_sealed: str | None, now: str,
                            recovery_key: str | None = None) -> None:
    await tx.execute(
        "INSERT INTO community_accounts (did, handle, pds_url, origin, password_sealed, "
        "session_sealed, created_at, updated_at, recovery_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (did) DO UPDATE SET handle = excluded.handle, pds_url = excluded.pds_url, "
        "origin = excluded.origin, password_sealed = excluded.password_sealed, "
        "session_sealed = excluded.session_sealed, updated_at = excluded.updated_at, "
        "recovery_key = COALESCE(excluded.recovery_key, community_accounts.recovery_key)",
        (did, handle, pds_url, origin, password_sealed, session_sealed, now, now, recovery_key))


async def update_session_tx(tx: Transaction, did: str, session_sealed: str | None, now: str,
                            password_sealed: str | None = None) -> None:
    """Store a new PDS session (and, on key rotation, the password re-sealed)."""
    if password_sealed is None:
        await tx.execute("UPDATE community_accounts SET session_sealed = ?, updated_at = ? WHERE did = ?",
                         (session_sealed, now, did))
    else:
        await tx.execute(
            "UPDATE community_accounts SET session_sealed = ?, password_sealed = ?, updated_at = ? "
            "WHERE did = ?", (session_sealed, password_sealed, now, did))


async def delete_account_tx(tx: Transaction, did: str) -> bool:
    cur = await tx.execute("DELETE FROM community_accounts WHERE did = ?", (did,))
    return cur.rowcount > 0


async def get_provisioning_tx(tx: Transaction, handle: str) -> Row | None:
    return await tx.fetchone("SELECT * FROM account_provisioning WHERE handle = ?", (handle,))


async def insert_provisioning_tx(tx: Transaction, *, handle: str, pds_url: str, email: str,
                                 password_sealed: str, now: str, recovery_key: str | None = None) -> None:
    await tx.execute(
        "INSERT INTO account_provisioning (handle, pds_url, email, password_sealed, created_at, "
        "recovery_key) VALUES (?, ?, ?, ?, ?, ?)",
        (handle, pds_url, email, password_sealed, now, recovery_key))


async def delete_provisioning_tx(tx: Transaction, handle: str) -> None:
    await tx.execute("DELETE FROM account_provisioning WHERE handle = ?", (handle,))
