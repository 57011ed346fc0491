"""XRPC over the app's shared httpx client, and repo operations as a community account.

Every call has a timeout and a bounded retry: connection errors, timeouts, 5xx and 429 are
retried (429 and 503 honour ``Retry-After``, capped by ``atproto.retry_after_max_seconds``);
any other 4xx is final. A PDS failure becomes :class:`PdsError`, answered as
``502 {"error": "pds_error", "message": <the PDS's message>}``.
"""

from __future__ import annotations

import asyncio
import email.utils
import json as jsonlib
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable
from urllib.parse import quote, urlsplit

from daemon.atproto.syntax import new_tid
from daemon.base import ApiError
from daemon.http.metrics import outbound_call_label

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.atproto")

_AUTH_ERRORS = frozenset({"ExpiredToken", "InvalidToken"})
_NOT_FOUND_ERRORS = frozenset({"RecordNotFound"})


class PdsError(ApiError):
    """A PDS (or PLC / handle host) failed or refused a call.

    ``pds_status`` is the upstream HTTP status (``None`` when no answer arrived),
    ``pds_error`` the XRPC error name (``InvalidRequest``, ``ExpiredToken``, ...).
    """

    def __init__(self, message: str, *, pds_status: int | None = None, pds_error: str | None = None,
                 nsid: str | None = None, status: int = 502, code: str = "pds_error") -> None:
        super().__init__(status, code, message)
        self.pds_status = pds_status
        self.pds_error = pds_error
        self.nsid = nsid

    @property
    def transient(self) -> bool:
        """No answer, or a 5xx/429: the call may or may not have taken effect."""
        return self.pds_status is None or self.pds_status >= 500 or self.pds_status == 429

    @property
    def is_auth_failure(self) -> bool:
        return self.pds_status == 401 or self.pds_error in _AUTH_ERRORS


# ------------------------------------------------------------------ URLs


def check_service_url(app: Application, url: str, what: str = "PDS") -> str:
    """`url` without a trailing slash, if its scheme is allowed (https; http only when
    ``atproto.allow_insecure_http``)."""
    parts = urlsplit(url)
    allowed = ("https", "http") if app.config.atproto.allow_insecure_http else ("https",)
    if parts.scheme not in allowed or not parts.hostname:
        raise PdsError(f"refusing to call the {what} at {url!r}: only https:// URLs are allowed "
                       "(set atproto.allow_insecure_http for a local development PDS)")
    return url.rstrip("/")


def blob_url(pds_url: str, did: str, cid: str) -> str:
    """Where a blob can be fetched without authentication."""
    return (f"{pds_url.rstrip('/')}/xrpc/com.atproto.sync.getBlob?did={quote(did, safe=':')}"
            f"&cid={quote(cid, safe='')}")


def blob_cid(blob: Any) -> str | None:
    """The CID of a blob reference (current ``ref.$link`` shape, or the legacy ``cid``)."""
    if not isinstance(blob, dict):
        return None
    ref = blob.get("ref")
    if isinstance(ref, dict) and isinstance(ref.get("$link"), str):
        return ref["$link"]
    return blob.get("cid") if isinstance(blob.get("cid"), str) else None


# ------------------------------------------------------------------ XRPC


def _retry_after(headers: Any, cap: float) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        import time
        seconds = when.timestamp() - time.time()
    return max(0.0, min(seconds, cap))


def _backoff(base: float, attempt: int) -> float:
    """Exponential with jitter: base * 2^attempt * [0.5, 1)."""
    return base * (2 ** attempt) * (0.5 + random.random() / 2)


def _error_from_response(resp: Any, nsid: str) -> PdsError:
    name = message = None
    try:
        body = resp.json()
        if isinstance(body, dict):
            name = body.get("error") if isinstance(body.get("error"), str) else None
            message = body.get("message") if isinstance(body.get("message"), str) else None
    except ValueError:
        pass
    if not message:
        message = f"the PDS answered {resp.status_code} to {nsid}" + (f" ({name})" if name else "")
    return PdsError(message, pds_status=resp.status_code, pds_error=name, nsid=nsid)


# The wait between attempts; tests replace it to see the delays asked for without waiting.
# Real time, not the app's clock: it paces requests to a real server, which tests run
# against (the devnet) while their fake clock stands still.
_pause = asyncio.sleep


def _outcome(status: int) -> str:
    return "ok" if status < 400 else "client_error" if status < 500 else "server_error"


async def _send(app: Application, method: str, url: str, timeout: float, max_bytes: int | None,
                **kw: Any) -> Any:
    """One HTTP request; with `max_bytes`, the answer is read as a stream and refused
    (PdsError) as soon as it passes that size, so a hostile host cannot fill our memory."""
    if max_bytes is None:
        return await app.http.request(method, url, timeout=timeout, **kw)
    import httpx
    req = app.http.build_request(method, url, timeout=timeout, **kw)
    resp = await app.http.send(req, stream=True)
    try:
        chunks, total = [], 0
        async for chunk in resp.aiter_bytes():
            total += len(chunk)
            if total > max_bytes:
                base = urlsplit(url)
                raise PdsError(f"{base.scheme}://{base.netloc} answered with more than {max_bytes} bytes")
            chunks.append(chunk)
    finally:
        await resp.aclose()
    # The chunks are decoded already (aiter_bytes undoes Content-Encoding, and the cap
    # counts decoded bytes, so a compressed bomb stops too): say so in the headers.
    headers = [(k, v) for k, v in resp.headers.multi_items()
               if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
    return httpx.Response(resp.status_code, headers=headers, content=b"".join(chunks), request=req)


async def request(app: Application, method: str, url: str, *, what: str = "PDS",
                  label: str | None = None, max_bytes: int | None = None, **kw: Any) -> Any:
    """One HTTP request with the retry policy; the final `httpx.Response` (any status).

    Connection errors, timeouts, 5xx and 429 are retried ``atproto.max_retries`` times;
    raises :class:`PdsError` when no answer arrived at all, or (with `max_bytes`) when the
    answer is larger than that.
    """
    import httpx

    from daemon.security.netguard import RequestRefused

    cfg = app.config.atproto
    label = label or url
    attempts = max(0, cfg.max_retries) + 1
    call = outbound_call_label(label, what)
    for attempt in range(attempts):
        last_try = attempt + 1 >= attempts
        started = time.perf_counter()
        try:
            resp = await _send(app, method, url, cfg.request_timeout_seconds, max_bytes, **kw)
            app.metrics.record_outbound(call, _outcome(resp.status_code), time.perf_counter() - started)
        except RequestRefused as exc:  # the SSRF guard: retrying cannot help
            app.metrics.record_outbound(call, "refused", time.perf_counter() - started)
            base = urlsplit(url)
            raise PdsError(f"the {what} at {base.scheme}://{base.netloc} is not reachable from "
                           f"this service: {exc.reason}", nsid=label) from None
        except httpx.TransportError as exc:  # connect/read/write errors and timeouts
            app.metrics.record_outbound(call, "timeout" if isinstance(exc, httpx.TimeoutException)
                                        else "transport_error", time.perf_counter() - started)
            reason = "timed out" if isinstance(exc, httpx.TimeoutException) else \
                (str(exc) or type(exc).__name__)
            if last_try:
                base = urlsplit(url)
                raise PdsError(f"the {what} at {base.scheme}://{base.netloc} did not answer "
                               f"{label}: {reason} ({attempts} attempt(s))", nsid=label) from None
            delay = _backoff(cfg.retry_backoff_seconds, attempt)
            log.warning("%s %s: %s; retry %d/%d in %.2f s", method, url, reason, attempt + 1,
                        attempts - 1, delay)
            await _pause(delay)
            continue
        if last_try or not (resp.status_code >= 500 or resp.status_code == 429):
            return resp
        delay = _retry_after(resp.headers, cfg.retry_after_max_seconds)
        if delay is None:
            delay = _backoff(cfg.retry_backoff_seconds, attempt)
        log.warning("%s %s: %d; retry %d/%d in %.2f s", method, url, resp.status_code,
                    attempt + 1, attempts - 1, delay)
        await _pause(delay)
    raise AssertionError("unreachable")  # pragma: no cover


async def xrpc(app: Application, method: str, pds_url: str, nsid: str, *,
               params: dict[str, Any] | None = None, json: Any = None, data: bytes | None = None,
               headers: dict[str, str] | None = None, auth: str | None = None) -> dict[str, Any]:
    """Call ``<pds_url>/xrpc/<nsid>``; the decoded JSON answer (``{}`` when empty).

    `auth` is a bearer token. Raises :class:`PdsError` for an error answer or once the
    retries are spent.
    """
    base = check_service_url(app, pds_url)
    hdrs = dict(headers or {})
    if auth:
        hdrs["Authorization"] = f"Bearer {auth}"
    if params:
        params = {k: v for k, v in params.items() if v is not None}
    resp = await request(app, method, f"{base}/xrpc/{nsid}", label=nsid, params=params, json=json,
                         content=data, headers=hdrs)
    if resp.status_code >= 400:
        raise _error_from_response(resp, nsid)
    if not resp.content:
        return {}
    try:
        out = resp.json()
    except ValueError:
        raise PdsError(f"the PDS answered {nsid} with something that is not JSON",
                       pds_status=resp.status_code, nsid=nsid) from None
    return out if isinstance(out, dict) else {"value": out}


# ------------------------------------------------------------------ acting as an account

TokenSource = Callable[[str | None], Awaitable[str]]


@dataclass(frozen=True)
class _Write:
    action: str
    collection: str
    rkey: str | None
    value: dict[str, Any] | None


class RepoClient:
    """Repo operations as one community account. Made by ``accounts.community_repo``.

    `tokens(stale)` returns a valid access token; given the token the PDS just rejected, it
    refreshes (or logs in again) first.
    """

    def __init__(self, app: Application, did: str, pds_url: str, tokens: TokenSource) -> None:
        self._app = app
        self.did = did
        self.pds_url = pds_url
        self._tokens = tokens

    def __repr__(self) -> str:
        return f"<RepoClient {self.did} @ {self.pds_url}>"

    async def _call(self, method: str, nsid: str, **kw: Any) -> dict[str, Any]:
        sync = getattr(self._app, "sync", None)
        if method != "POST" or sync is None or sync.config.source == "off":  # no stream: nothing to recognise
            return await self._call_once_more_on_auth(method, nsid, **kw)
        with sync.writing(self.did):  # a write: its commit comes back through the stream
            res = await self._call_once_more_on_auth(method, nsid, **kw)
            sync.note_own_commit(self.did, res)
        return res

    async def _call_once_more_on_auth(self, method: str, nsid: str, **kw: Any) -> dict[str, Any]:
        token = await self._tokens(None)
        try:
            return await xrpc(self._app, method, self.pds_url, nsid, auth=token, **kw)
        except PdsError as exc:
            if not exc.is_auth_failure:
                raise
        token = await self._tokens(token)
        return await xrpc(self._app, method, self.pds_url, nsid, auth=token, **kw)

    def _check(self, collection: str, record: dict[str, Any], rkey: str | None) -> dict[str, Any]:
        if not isinstance(record, dict):
            raise TypeError("a record is a dict")
        record = {"$type": collection, **record}
        if self._app.config.atproto.validate_records:
            from daemon.atproto.lexicons import lexicons_for
            lexicons_for(self._app).validate_if_known(collection, record, rkey=rkey)
        return record

    async def create_record(self, collection: str, record: dict[str, Any],
                            rkey: str | None = None) -> dict[str, Any]:
        """Create a record (key: a new TID unless given); ``{"uri", "cid"}``.

        The key is chosen here, so a call whose answer was lost (timeout, 5xx after the write)
        is recognised afterwards: if the record is there with our value, it is a success.
        """
        rkey = rkey or new_tid(self._app.clock)
        record = self._check(collection, record, rkey)
        body = {"repo": self.did, "collection": collection, "rkey": rkey, "record": record}
        try:
            res = await self._call("POST", "com.atproto.repo.createRecord", json=body)
        except PdsError as exc:
            if not exc.transient:
                raise
            try:
                existing = await self.get_record(collection, rkey)
            except PdsError:
                raise exc from None
            if existing is None or _canonical(existing["value"]) != _canonical(record):
                raise exc from None
            log.info("createRecord %s/%s failed (%s) but the record is there: taking it",
                     collection, rkey, exc.message)
            return {"uri": existing["uri"], "cid": existing["cid"]}
        return {"uri": res["uri"], "cid": res["cid"]}

    async def put_record(self, collection: str, rkey: str, record: dict[str, Any],
                         swap_record: str | None = None, *, create_only: bool = False) -> dict[str, Any]:
        """Create or replace the record at `rkey`; with `swap_record` (a CID) only if the
        current version still has that CID (else 409 ``record_conflict``).

        With `create_only`, only if there is no record at `rkey` (``swapRecord: null``), else
        409 ``record_exists``; a record with exactly this value already there is a success
        (the PDS answers a no-op), so a retry of a write whose answer was lost succeeds.
        (``createRecord`` with an explicit key that exists fails with a 500 on the reference
        PDS, which reads like a failure that may have written.)"""
        record = self._check(collection, record, rkey)
        body: dict[str, Any] = {"repo": self.did, "collection": collection, "rkey": rkey,
                                "record": record}
        if create_only:
            body["swapRecord"] = None
        elif swap_record is not None:
            body["swapRecord"] = swap_record
        try:
            res = await self._call("POST", "com.atproto.repo.putRecord", json=body)
        except PdsError as exc:
            if exc.pds_error == "InvalidSwap" and create_only:
                raise PdsError(f"{collection}/{rkey} already exists in the repo: {exc.message}",
                               pds_status=exc.pds_status, pds_error=exc.pds_error, nsid=exc.nsid,
                               status=409, code="record_exists") from None
            if exc.pds_error == "InvalidSwap":
                raise PdsError(f"{collection}/{rkey} changed since it was read: {exc.message}",
                               pds_status=exc.pds_status, pds_error=exc.pds_error, nsid=exc.nsid,
                               status=409, code="record_conflict") from None
            raise
        return {"uri": res["uri"], "cid": res["cid"]}

    async def delete_record(self, collection: str, rkey: str, swap_record: str | None = None) -> None:
        """Delete a record; deleting one that is not there is a success. With `swap_record`
        (a CID), only if the current version still has that CID (else 409
        ``record_conflict``)."""
        body = {"repo": self.did, "collection": collection, "rkey": rkey}
        if swap_record is not None:
            body["swapRecord"] = swap_record
        try:
            await self._call("POST", "com.atproto.repo.deleteRecord", json=body)
        except PdsError as exc:
            if exc.pds_error == "InvalidSwap":
                raise PdsError(f"{collection}/{rkey} changed since it was read: {exc.message}",
                               pds_status=exc.pds_status, pds_error=exc.pds_error, nsid=exc.nsid,
                               status=409, code="record_conflict") from None
            if exc.pds_error not in _NOT_FOUND_ERRORS:
                raise

    async def get_record(self, collection: str, rkey: str) -> dict[str, Any] | None:
        """``{"uri", "cid", "value"}``, or None if there is no such record."""
        return await get_record(self._app, self.pds_url, self.did, collection, rkey)

    async def list_records(self, collection: str, limit: int = 50,
                           cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of records, newest first by key, and the next page's cursor (or None)."""
        res = await xrpc(self._app, "GET", self.pds_url, "com.atproto.repo.listRecords",
                         params={"repo": self.did, "collection": collection,
                                 "limit": max(1, min(int(limit), 100)), "cursor": cursor})
        records = [{"uri": r["uri"], "cid": r["cid"], "value": r["value"]}
                   for r in res.get("records", [])]
        return records, res.get("cursor") or None

    async def apply_writes(self, writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several writes in one commit (all or nothing).

        Each write is ``{"action": "create"|"update"|"delete", "collection", "rkey", "value"}``
        or the lexicon's own ``{"$type": "com.atproto.repo.applyWrites#create", ...}``. Creates
        without a key get a TID. Returns the PDS's per-write results (``uri``/``cid``).
        """
        out = []
        for w in writes:
            write = _parse_write(w)
            rkey = write.rkey
            if write.action == "create" and not rkey:
                rkey = new_tid(self._app.clock)
            item: dict[str, Any] = {"$type": f"com.atproto.repo.applyWrites#{write.action}",
                                    "collection": write.collection}
            if rkey:
                item["rkey"] = rkey
            if write.action != "delete":
                item["value"] = self._check(write.collection, write.value or {}, rkey)
            out.append(item)
        res = await self._call("POST", "com.atproto.repo.applyWrites",
                               json={"repo": self.did, "writes": out})
        return list(res.get("results") or [])

    async def upload_blob(self, data: bytes, mime_type: str) -> dict[str, Any]:
        """Upload a blob; the blob reference to put in a record (``{"$type": "blob", "ref":
        {"$link": cid}, "mimeType", "size"}``)."""
        res = await self._call("POST", "com.atproto.repo.uploadBlob", data=data,
                               headers={"Content-Type": mime_type})
        blob = res.get("blob")
        if not isinstance(blob, dict) or not blob_cid(blob):
            raise PdsError("the PDS's uploadBlob answer holds no blob reference",
                           nsid="com.atproto.repo.uploadBlob")
        return blob


def _parse_write(w: dict[str, Any]) -> _Write:
    action = w.get("action")
    if action is None and isinstance(w.get("$type"), str):
        action = w["$type"].rpartition("#")[2]
    if action not in ("create", "update", "delete"):
        raise ValueError(f"unknown write action {action!r}")
    if action == "update" and not w.get("rkey"):
        raise ValueError("an update needs an rkey")
    if action == "delete" and not w.get("rkey"):
        raise ValueError("a delete needs an rkey")
    return _Write(action, w["collection"], w.get("rkey"), w.get("value"))


def _canonical(value: Any) -> str:
    return jsonlib.dumps(value, sort_keys=True, separators=(",", ":"))


# ------------------------------------------------------------------ public reads


async def get_record(app: Application, pds_url: str, did: str, collection: str,
                     rkey: str) -> dict[str, Any] | None:
    """A record from any repo (unauthenticated); None if it is not there."""
    try:
        res = await xrpc(app, "GET", pds_url, "com.atproto.repo.getRecord",
                         params={"repo": did, "collection": collection, "rkey": rkey})
    except PdsError as exc:
        if exc.pds_error in _NOT_FOUND_ERRORS or (
                exc.pds_status == 400 and "could not locate record" in exc.message.lower()):
            return None
        raise
    return {"uri": res["uri"], "cid": res.get("cid"), "value": res["value"]}


_PROFILE_TEXT_BYTES = {"displayName": 640, "description": 2560}


async def read_user_profile(app: Application, did: str) -> dict[str, Any] | None:
    """A person's ``app.bsky.actor.profile/self`` from their own repo (no AppView):
    ``{displayName, description, avatar, banner}`` with images as blob URLs; None if they
    have no profile record or no PDS. Their PDS failing is a :class:`PdsError` (callers
    listing many people may prefer to show the DID alone)."""
    from daemon.atproto.identity import resolve_did

    info = await resolve_did(app, did)
    if not info.pds_url:
        return None
    rec = await get_record(app, info.pds_url, did, "app.bsky.actor.profile", "self")
    if rec is None or not isinstance(rec.get("value"), dict):
        return None
    value = rec["value"]

    def text(key: str) -> str | None:
        # Whatever another PDS serves is untrusted input: text only, no lone surrogates
        # (they cannot be stored or shown), and no longer than the profile lexicon allows
        # (app.bsky.actor.profile: displayName 640 bytes, description 2,560 bytes).
        got = value.get(key)
        if not isinstance(got, str):
            return None
        got = got.encode("utf-8", "replace").decode("utf-8")
        limit = _PROFILE_TEXT_BYTES.get(key, 640)
        if len(got.encode("utf-8")) > limit:
            got = got.encode("utf-8")[:limit].decode("utf-8", "ignore")
        return got

    def image(key: str) -> str | None:
        cid = blob_cid(value.get(key))
        return blob_url(info.pds_url, did, cid) if cid else None  # type: ignore[arg-type]

    return {"displayName": text("displayName"), "description": text("description"),
            "avatar": image("avatar"), "banner": image("banner")}
