"""Moving a community account to another PDS (docs/communities.md, "Moving to another PDS").

The atproto account migration, run by the service for an account whose credentials it holds:

1. ``account``: ``getServiceAuth`` on the old PDS (aud: the new PDS's DID, lxm: createAccount),
   then ``createAccount`` on the new PDS with the existing DID (the account starts deactivated);
2. ``repo``: ``sync.getRepo`` (a CAR file) from the old PDS, ``repo.importRepo`` into the new;
3. ``blobs``: ``listMissingBlobs`` on the new PDS, each ``getBlob`` from the old, ``uploadBlob``;
4. ``identity``: ``getRecommendedDidCredentials`` from the new PDS, and a PLC operation that
   points the DID at it, signed with the service's own rotation key (the owner's recovery key
   stays first);
5. ``activate``: ``activateAccount`` on the new PDS, ``deactivateAccount`` on the old (not
   deleted).

A move is a row of ``account_moves`` holding the next step and the new password (sealed, kept
*before* ``createAccount`` is called). Every step is safe to run again, so a crash at any point
is resumed by running the move again (``resume_move``; the communities plugin does it at start).
Until ``identity`` the old account is untouched and the move can be abandoned
(``abandon_move``); from ``identity`` on it can only finish. While the row exists every write
command on the account's repo is refused with 503 ``community_moving`` (daemon/atproto/writes.py).
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from daemon.atproto.accounts import account_row, service_rotation_key, _password_ctx
from daemon.atproto.pds import PdsError, check_service_url, request, xrpc
from daemon.atproto.plc import next_operation, plc_data, plc_last_operation, sign_operation, submit_operation
from daemon.base import ApiError
from store.db import Reader, Row, Transaction

if TYPE_CHECKING:
    from daemon.runtime.app import Application

log = logging.getLogger(__name__)

STEPS = ("account", "repo", "blobs", "identity", "activate", "finish")
#: before this step the old account is untouched and the move can be abandoned
POINT_OF_NO_RETURN = "identity"
_MAX_REPO_BYTES = 512 * 1024 * 1024
_MAX_BLOB_BYTES = 64 * 1024 * 1024
MOVING_RETRY_AFTER = 30


def moving_error(did: str) -> ApiError:
    return ApiError(503, "community_moving",
                    f"{did} is moving to another PDS: it is read-only until the move finishes. Try again shortly.",
                    headers={"Retry-After": str(MOVING_RETRY_AFTER)})


async def move_of(db: Reader, did: str) -> Row | None:
    """The unfinished move of `did`, if any (its ``step`` is the next to run)."""
    return await db.fetchone("SELECT did, from_pds, to_pds, step, error, started_at, updated_at "
                             "FROM account_moves WHERE did = ?", (did,))


async def unfinished_moves(db: Reader) -> list[Row]:
    return await db.fetchall("SELECT did, from_pds, to_pds, step FROM account_moves ORDER BY started_at")


async def begin_move_tx(app: "Application", tx: Transaction, did: str, to_pds: str, *,
                        invite_code: str | None = None) -> None:
    """Record a move of `did` to `to_pds` (from here on its repo is read-only). Refuses (400)
    a move to the PDS it is on, an account this service did not create, and one for which
    it holds no rotation key; 409 while a move is under way."""
    to_pds = require_pds_url(app, to_pds)
    row = await account_row(tx, did)
    if row is None:
        raise ApiError(404, "not_found", f"no credentials are stored for the account {did}")
    if await move_of(tx, did) is not None:
        raise ApiError(409, "move_in_progress", f"{did} is already moving; its move resumes by itself")
    if row["pds_url"].rstrip("/") == to_pds:
        raise ApiError(400, "same_pds", f"{did} is already hosted by {to_pds}")
    if row["origin"] != "provisioned":
        raise ApiError(400, "move_not_possible",
                       "an account brought with an app password can be moved only by its owner (their PDS "
                       "and their keys); this service holds no password or rotation key for it")
    if not row["rotation_key_sealed"]:
        raise ApiError(400, "move_not_possible",
                       "this service holds no rotation key for this account (it was created before recovery "
                       "keys, or the key could not be added): its owner can move it with the recovery key")
    now = app.clock.iso_now()
    password = secrets.token_urlsafe(24)
    await tx.execute(
        "INSERT INTO account_moves (did, from_pds, to_pds, step, password_sealed, invite_code_sealed, "
        "started_at, updated_at) VALUES (?, ?, ?, 'account', ?, ?, ?, ?)",
        (did, row["pds_url"], to_pds, app.secrets.seal(password, _move_ctx(did)),
         app.secrets.seal(invite_code, _invite_ctx(did)) if invite_code else None, now, now))


async def writes_settled(app: "Application", did: str, *, seconds: float = 20.0) -> bool:
    """Wait (up to `seconds`) until no write to `did`'s repo begun before its move is still
    open; False when one still is (the move should then be abandoned)."""
    deadline = app.clock.monotonic() + seconds
    while await app.db.fetchval("SELECT COUNT(*) FROM write_intents WHERE community_did = ?", (did,)):
        if app.clock.monotonic() > deadline:
            return False
        await app.clock.sleep(0.1)
    return True


def require_pds_url(app: "Application", url: Any) -> str:
    """A PDS's address as a move accepts it: an http(s) origin whose host name parses (400
    ``invalid_request`` naming ``pdsUrl`` otherwise), through the outbound guard's rules."""
    import httpx

    from daemon.http.base import invalid
    if not isinstance(url, str) or len(url) > 300:
        raise invalid("pdsUrl", "must be the new PDS's address, such as https://pds.example.com")
    try:
        parsed = httpx.URL(url.strip().rstrip("/"))
        host = parsed.host
        if parsed.scheme not in ("https", "http") or not host or parsed.path not in ("", "/") \
                or parsed.query or parsed.fragment or any(not label for label in host.split(".")):
            raise ValueError(url)
        httpx.Request("GET", parsed)  # what the client will build
    except (ValueError, httpx.InvalidURL, UnicodeError):
        raise invalid("pdsUrl", "is not a PDS's address (https://host, nothing after the host)") from None
    return check_service_url(app, str(parsed).rstrip("/"), "PDS")


async def service_key_listed(app: "Application", did: str) -> bool:
    """Whether the rotation key this service holds for `did` is among its DID's rotation
    keys (the owner may have removed it with the recovery key, or adding it failed)."""
    key = await service_rotation_key(app, did)
    if key is None:
        return False
    return key.did_key in (await plc_data(app, did)).get("rotationKeys", [])


def _move_ctx(did: str) -> str:
    return f"account_moves.password:{did}"


def _invite_ctx(did: str) -> str:
    return f"account_moves.invite_code:{did}"


async def abandon_move(app: "Application", did: str) -> bool:
    """Forget a move that has not reached the point of no return: the directory does not
    name the new PDS yet (the old account was never touched; a half-made account on the new
    PDS stays deactivated there). False when it does, or when that cannot be read now."""
    row = await move_of(app.db, did)
    if row is None:
        return True
    step = STEPS.index(row["step"])
    if step > STEPS.index(POINT_OF_NO_RETURN):
        return False
    if step == STEPS.index(POINT_OF_NO_RETURN):
        try:  # the operation may have been accepted just before a crash
            data = await plc_data(app, did)
        except (ApiError, PdsError):
            return False
        if (data.get("services", {}).get("atproto_pds") or {}).get("endpoint", "").rstrip("/") == row["to_pds"]:
            return False
    async with app.db.transaction("accounts.move_abandon") as tx:
        await tx.execute("DELETE FROM account_moves WHERE did = ? AND step = ?", (did, row["step"]))
    return True


#: A callback run in the transaction that finishes the move: the owner of the account's
#: index (the communities plugin) points it at the new PDS there.
Finished = Callable[[Transaction, str, str], Awaitable[None]]

#: Tests only: called after each step is recorded (a crash injected there).
after_step: Callable[[str, str], None] | None = None


async def resume_move(app: "Application", did: str, finished: Finished, *, until: str | None = None) -> None:
    """Run the move of `did` from its recorded step to the end (or up to the step `until`,
    not run). Safe to call again after any failure; a PDS failure leaves the step to run
    again (and records its message)."""
    while True:
        row = await app.db.fetchone("SELECT * FROM account_moves WHERE did = ?", (did,))
        if row is None:
            return
        step = row["step"]
        if step == until:
            return
        try:
            await _STEP_FUNCTIONS[step](app, row, finished)
        except Exception as exc:
            async with app.db.transaction("accounts.move_failed") as tx:
                await tx.execute("UPDATE account_moves SET error = ?, updated_at = ? WHERE did = ?",
                                 (str(exc)[:500], app.clock.iso_now(), did))
            raise
        if step == "finish":
            return
        nxt = STEPS[STEPS.index(step) + 1]
        async with app.db.transaction("accounts.move_step") as tx:
            await tx.execute("UPDATE account_moves SET step = ?, error = NULL, updated_at = ? WHERE did = ?",
                             (nxt, app.clock.iso_now(), did))
        log.info("moving %s to %s: %s done", did, row["to_pds"], step)
        if after_step is not None:
            after_step(did, step)


# ------------------------------------------------------------------ the steps


def _password(app: "Application", row: Row) -> str:
    return app.secrets.open(row["password_sealed"], _move_ctx(row["did"]))


async def _old_token(app: "Application", did: str) -> str:
    from daemon.atproto.accounts import _access_token
    return await _access_token(app, did)


async def _new_token(app: "Application", row: Row) -> str:
    res = await xrpc(app, "POST", row["to_pds"], "com.atproto.server.createSession",
                     json={"identifier": row["did"], "password": _password(app, row)})
    return res["accessJwt"]


async def _step_account(app: "Application", row: Row, finished: Finished) -> None:
    did, to_pds = row["did"], row["to_pds"]
    try:
        await _new_token(app, row)
        return  # made by an earlier run whose step was not recorded
    except PdsError as exc:
        if exc.transient:
            raise
    server = await xrpc(app, "GET", to_pds, "com.atproto.server.describeServer")
    to_did = server.get("did")
    if not isinstance(to_did, str):
        raise PdsError(f"the PDS at {to_pds} does not say its DID (describeServer)")
    account = await account_row(app.db, did)
    token = (await xrpc(app, "GET", account["pds_url"], "com.atproto.server.getServiceAuth",
                        params={"aud": to_did, "lxm": "com.atproto.server.createAccount"},
                        auth=await _old_token(app, did)))["token"]
    body: dict[str, Any] = {"did": did, "handle": account["handle"], "password": _password(app, row),
                            "email": app.config.atproto.provision_email_template.format(handle=account["handle"])}
    if row["invite_code_sealed"]:
        body["inviteCode"] = app.secrets.open(row["invite_code_sealed"], _invite_ctx(did))
    try:
        await xrpc(app, "POST", to_pds, "com.atproto.server.createAccount", json=body, auth=token)
    except PdsError as exc:
        if exc.transient:
            raise
        raise ApiError(400, "move_refused", f"the PDS at {to_pds} refused the account: {exc.message}") from None


async def _step_repo(app: "Application", row: Row, finished: Finished) -> None:
    did = row["did"]
    account = await account_row(app.db, did)
    base = check_service_url(app, account["pds_url"])
    resp = await request(app, "GET", f"{base}/xrpc/com.atproto.sync.getRepo", label="getRepo",
                         params={"did": did}, max_bytes=_MAX_REPO_BYTES)
    if resp.status_code != 200:
        raise PdsError(f"getRepo answered {resp.status_code}", pds_status=resp.status_code)
    await xrpc(app, "POST", row["to_pds"], "com.atproto.repo.importRepo", data=resp.content,
               headers={"Content-Type": "application/vnd.ipld.car"}, auth=await _new_token(app, row))


async def _step_blobs(app: "Application", row: Row, finished: Finished) -> None:
    did = row["did"]
    account = await account_row(app.db, did)
    base = check_service_url(app, account["pds_url"])
    token = await _new_token(app, row)
    cursor = None
    while True:
        page = await xrpc(app, "GET", row["to_pds"], "com.atproto.repo.listMissingBlobs",
                          params={"limit": 500, "cursor": cursor}, auth=token)
        for blob in page.get("blobs") or []:
            resp = await request(app, "GET", f"{base}/xrpc/com.atproto.sync.getBlob", label="getBlob",
                                 params={"did": did, "cid": blob["cid"]}, max_bytes=_MAX_BLOB_BYTES)
            if resp.status_code in (400, 404):  # referenced but gone on the old PDS: nothing to copy
                log.warning("moving %s: the old PDS has no blob %s (%s); left out", did, blob["cid"],
                            resp.status_code)
                continue
            if resp.status_code != 200:
                raise PdsError(f"getBlob {blob['cid']} answered {resp.status_code}", pds_status=resp.status_code)
            await xrpc(app, "POST", row["to_pds"], "com.atproto.repo.uploadBlob", data=resp.content, auth=token,
                       headers={"Content-Type": resp.headers.get("content-type", "application/octet-stream")})
        cursor = page.get("cursor")
        if not cursor or not page.get("blobs"):
            return


async def _step_identity(app: "Application", row: Row, finished: Finished) -> None:
    did, to_pds = row["did"], row["to_pds"]
    data = await plc_data(app, did)
    if (data.get("services", {}).get("atproto_pds") or {}).get("endpoint", "").rstrip("/") == to_pds:
        return  # the directory has it already
    key = await service_rotation_key(app, did)
    if key is None:
        raise ApiError(409, "move_not_possible", f"this service holds no rotation key for {did}")
    rec = await xrpc(app, "GET", to_pds, "com.atproto.identity.getRecommendedDidCredentials",
                     auth=await _new_token(app, row))
    # The fields and `prev` from the one newest operation, so that none that lands meanwhile
    # is silently undone (the directory refuses a stale `prev`, and the step runs again).
    last = await plc_last_operation(app, did)
    current = last["operation"]
    account = await account_row(app.db, did)
    ours = [k for k in (account["recovery_key"], key.did_key) if k and k in current.get("rotationKeys", [])]
    if key.did_key not in ours:
        raise ApiError(409, "move_not_possible", f"the service's rotation key is no longer one of {did}'s: "
                                                 "its owner can move it with the recovery key")
    rotation = ours + [k for k in rec.get("rotationKeys") or [] if k not in ours]
    op = next_operation(current, last["cid"], rotationKeys=rotation[:5],
                        verificationMethods=rec.get("verificationMethods") or current["verificationMethods"],
                        alsoKnownAs=rec.get("alsoKnownAs") or current["alsoKnownAs"],
                        services=rec.get("services") or current["services"])
    await submit_operation(app, did, sign_operation(op, key))


async def _step_activate(app: "Application", row: Row, finished: Finished) -> None:
    did = row["did"]
    await xrpc(app, "POST", row["to_pds"], "com.atproto.server.activateAccount", auth=await _new_token(app, row))
    account = await account_row(app.db, did)
    if account["pds_url"].rstrip("/") != row["to_pds"]:
        try:
            await xrpc(app, "POST", account["pds_url"], "com.atproto.server.deactivateAccount", json={},
                       auth=await _old_token(app, did))
        except PdsError as exc:
            if exc.transient:
                raise
            log.warning("the old PDS of %s did not deactivate it: %s", did, exc)


async def _step_finish(app: "Application", row: Row, finished: Finished) -> None:
    did, to_pds = row["did"], row["to_pds"]
    password = _password(app, row)
    async with app.db.transaction("accounts.move_finish") as tx:
        await tx.execute("UPDATE community_accounts SET pds_url = ?, password_sealed = ?, session_sealed = NULL, "
                         "updated_at = ? WHERE did = ?",
                         (to_pds, app.secrets.seal(password, _password_ctx(did)), app.clock.iso_now(), did))
        await tx.execute("DELETE FROM account_moves WHERE did = ?", (did,))
        await finished(tx, did, to_pds)
    app.accounts.sessions.pop(did, None)
    from daemon.atproto.identity import resolve_did
    try:
        await resolve_did(app, did, fresh=True)
    except (ApiError, PdsError):
        pass


_STEP_FUNCTIONS = {"account": _step_account, "repo": _step_repo, "blobs": _step_blobs,
                   "identity": _step_identity, "activate": _step_activate, "finish": _step_finish}
