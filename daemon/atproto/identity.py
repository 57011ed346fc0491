"""Identity: handle -> DID, DID -> document, PDS and (verified) handle.

A handle resolves through the PDS named by ``atproto.resolve_handles_via_pds`` when set (the
devnet's handles exist nowhere else), then DNS (``TXT _atproto.<handle>``) and HTTPS
(``https://<handle>/.well-known/atproto-did``) together, DNS winning. Names under special-use
top-level domains (``.test``, ``.local``, ...) are never looked up in public DNS or HTTPS.

A DID resolves through the PLC directory (``did:plc``) or the host's ``/.well-known/did.json``
(``did:web``). The handle a document claims counts only if it resolves back to the same DID;
otherwise ``DidInfo.handle`` is None. Results are cached in SQLite for
``atproto.identity_cache_seconds`` (by the app's clock); concurrent look-ups of one name share
one network round.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar
from urllib.parse import unquote, urlsplit

from daemon.atproto.pds import PdsError, check_service_url, request
from daemon.atproto.syntax import (is_atproto_did, is_did, is_handle, normalize_handle,
                                   require_atproto_did, require_handle)
from daemon.base import ApiError
from store.db import Reader, Row, Transaction

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.atproto")

T = TypeVar("T")

# RFC 6761 / 6762 / 7686 and friends: never in public DNS, so not worth a query.
_SPECIAL_TLDS = frozenset({"test", "local", "localhost", "invalid", "example", "arpa", "internal",
                           "onion", "alt"})
_MAX_WELL_KNOWN_BYTES = 2048
_MAX_DOC_BYTES = 256 * 1024
_PURGE_EVERY = 256


@dataclass(frozen=True)
class DidInfo:
    did: str
    handle: str | None          # claimed by the document and resolving back to `did`, else None
    pds_url: str | None         # the #atproto_pds service endpoint
    doc: dict[str, Any] = field(repr=False, compare=False)


class IdentityCache:
    """Resolutions in flight, shared by concurrent callers (``app.identity``)."""

    def __init__(self) -> None:
        self.inflight: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self.writes = 0
        self.dns_resolver: Any = None


async def _shared(app: Application, key: tuple[str, str], make: Callable[[], Awaitable[T]]) -> T:
    """Run `make()` once for concurrent callers asking for the same `key`."""
    st = app.identity
    pending = st.inflight.get(key)
    if pending is not None:
        return await asyncio.shield(pending)
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    st.inflight[key] = fut
    try:
        result = await make()
    except asyncio.CancelledError:
        fut.cancel()
        raise
    except BaseException as exc:
        fut.set_exception(exc)
        fut.exception()  # retrieved: no "never retrieved" warning when nobody else waited
        raise
    else:
        fut.set_result(result)
        return result
    finally:
        st.inflight.pop(key, None)


def _ttl(app: Application) -> tuple[float, float]:
    now = app.clock.time()
    return now, now + app.config.atproto.identity_cache_seconds


async def _cache_write(app: Application, name: str, fn: Callable[[Any], Awaitable[None]]) -> None:
    if app.read_only:
        return  # a follower resolves without caching: its copy is the primary's cache
    st = app.identity
    st.writes += 1
    async with app.db.transaction(name) as tx:
        await fn(tx)
        if st.writes % _PURGE_EVERY == 0:
            await purge_expired_tx(tx, app.clock.time())


# ------------------------------------------------------------------ handles


def _special_use(handle: str) -> bool:
    return handle.rsplit(".", 1)[-1] in _SPECIAL_TLDS


async def resolve_handle(app: Application, handle: str) -> str:
    """The DID a handle points to (not yet verified the other way: see resolve_identity).

    Unknown handle: ``ApiError(400, "unknown_handle")``; the resolver unreachable: 502.
    """
    handle = require_handle(handle, "handle")
    cached = await get_handle(app.db, handle, app.clock.time())
    if cached:
        return cached
    return await _shared(app, ("handle", handle), lambda: _resolve_handle_uncached(app, handle))


async def _resolve_handle_uncached(app: Application, handle: str) -> str:
    cfg = app.config.atproto
    did: str | None = None
    failure: PdsError | None = None
    tried: list[str] = []
    if cfg.resolve_handles_via_pds:
        tried.append(f"the PDS at {cfg.resolve_handles_via_pds}")
        try:
            did = await _via_pds(app, cfg.resolve_handles_via_pds, handle)
        except PdsError as exc:
            failure = exc
    if did is None and not _special_use(handle):
        tried += [f"DNS TXT _atproto.{handle}", f"https://{handle}/.well-known/atproto-did"]
        from_dns, from_https = await asyncio.gather(_via_dns(app, handle), _via_well_known(app, handle))
        did = from_dns or from_https
    if did is None:
        if failure is not None:
            raise PdsError(f"cannot resolve the handle {handle}: {failure.message}",
                           pds_status=failure.pds_status, pds_error=failure.pds_error)
        raise ApiError(400, "unknown_handle",
                       f"the handle {handle} does not resolve to an account "
                       f"(tried {', '.join(tried) or 'nothing: reserved domain'})")
    now, expires = _ttl(app)
    await _cache_write(app, "identity.handle",
                       lambda tx: put_handle_tx(tx, handle, did, now, expires))
    return did


async def _via_pds(app: Application, pds_url: str, handle: str) -> str | None:
    from daemon.atproto.pds import xrpc
    try:
        res = await xrpc(app, "GET", pds_url, "com.atproto.identity.resolveHandle",
                         params={"handle": handle})
    except PdsError as exc:
        if exc.transient:
            raise
        return None  # 400 HandleNotFound and the like
    did = res.get("did")
    return did if is_did(did) else None


async def _via_dns(app: Application, handle: str) -> str | None:
    try:
        import dns.asyncresolver
        import dns.exception
        st = app.identity
        if st.dns_resolver is None:
            st.dns_resolver = dns.asyncresolver.Resolver()
        answer = await st.dns_resolver.resolve(f"_atproto.{handle}", "TXT",
                                               lifetime=app.config.atproto.request_timeout_seconds)
    except Exception as exc:  # NXDOMAIN, no answer, timeout, no resolv.conf ...
        log.debug("DNS _atproto.%s: %s", handle, exc)
        return None
    found = set()
    for rdata in answer:
        text = b"".join(rdata.strings).decode("ascii", "replace")
        if text.startswith("did="):
            found.add(text[4:].strip())
    if len(found) != 1:
        return None  # none, or ambiguous
    did = found.pop()
    return did if is_did(did) else None


async def _via_well_known(app: Application, handle: str) -> str | None:
    import httpx
    try:
        async with app.http.stream("GET", f"https://{handle}/.well-known/atproto-did",
                                   timeout=app.config.atproto.request_timeout_seconds) as resp:
            if resp.status_code != 200:
                return None
            body = b""
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > _MAX_WELL_KNOWN_BYTES:
                    return None
    except (httpx.HTTPError, OSError) as exc:
        log.debug("https://%s/.well-known/atproto-did: %s", handle, exc)
        return None
    lines = body.decode("utf-8", "replace").strip().splitlines()
    did = lines[0].strip() if lines else ""
    return did if is_did(did) else None


# ------------------------------------------------------------------ DIDs


def _doc_handle(doc: dict[str, Any]) -> str | None:
    for aka in doc.get("alsoKnownAs") or []:
        if isinstance(aka, str) and aka.startswith("at://"):
            handle = normalize_handle(aka[5:])
            return handle if is_handle(handle) else None
    return None


def _doc_pds(doc: dict[str, Any], did: str) -> str | None:
    for service in doc.get("service") or []:
        if not isinstance(service, dict):
            continue
        if service.get("id") in ("#atproto_pds", f"{did}#atproto_pds") \
                and service.get("type") == "AtprotoPersonalDataServer":
            endpoint = service.get("serviceEndpoint")
            if isinstance(endpoint, str):
                parts = urlsplit(endpoint)
                if parts.scheme in ("http", "https") and parts.hostname:
                    return endpoint.rstrip("/")
    return None


def _info_from_row(row: Any) -> DidInfo:
    return DidInfo(row["did"], row["handle"], row["pds_url"], json.loads(row["doc"]))


async def resolve_did(app: Application, did: str, *, fresh: bool = False) -> DidInfo:
    """The DID's document, PDS and handle (verified both ways, else None).

    Only a strict did:plc or did:web is looked up (``syntax.require_atproto_did``: 400
    ``invalid_request`` or ``unsupported_did`` otherwise, with nothing sent anywhere).
    Unknown DID: ``ApiError(400, "unknown_did")``; a did:web host the outbound guard refuses:
    400 ``unsupported_did``; directory unreachable: 502. `fresh` skips the cache.
    """
    did = require_atproto_did(did, "did")
    if not fresh:
        rows = await get_dids(app.db, [did], app.clock.time())
        if did in rows:
            return _info_from_row(rows[did])
    return await _shared(app, ("did", did), lambda: _resolve_did_uncached(app, did))


async def _resolve_did_uncached(app: Application, did: str) -> DidInfo:
    doc = await _fetch_did_doc(app, did)
    claimed = _doc_handle(doc)
    verified: str | None = None
    cacheable = True
    if claimed:
        try:
            if await resolve_handle(app, claimed) == did:
                verified = claimed
        except ApiError as exc:
            if exc.status >= 500:
                cacheable = False  # could not check now: do not remember "unverified"
    info = DidInfo(did, verified, _doc_pds(doc, did), doc)
    if cacheable:
        now, expires = _ttl(app)
        text = json.dumps(doc, separators=(",", ":"))
        await _cache_write(app, "identity.did", lambda tx: put_did_tx(
            tx, did, info.handle, info.pds_url, text, now, expires))
    return info


async def _fetch_did_doc(app: Application, did: str) -> dict[str, Any]:
    cfg = app.config.atproto
    if did.startswith("did:plc:"):
        base = check_service_url(app, cfg.plc_url, "PLC directory")
        url, what = f"{base}/{did}", "PLC directory"
    elif did.startswith("did:web:"):
        ident = did[len("did:web:"):]
        if ":" in ident:
            raise ApiError(400, "unsupported_did",
                           f"{did}: did:web with a path is not supported by atproto (host names only)")
        host = unquote(ident)
        local = (urlsplit(f"//{host}").hostname or "") in ("localhost", "127.0.0.1", "::1")
        scheme = "http" if local and cfg.allow_insecure_http else "https"
        url, what = f"{scheme}://{host}/.well-known/did.json", "did:web host"
    else:
        raise ApiError(400, "unsupported_did",
                       f"{did}: only did:plc and did:web identities are supported")
    try:
        resp = await request(app, "GET", url, what=what, label=did, max_bytes=_MAX_DOC_BYTES)
    except PdsError as exc:
        if what == "did:web host" and _refused_by_guard(exc):
            # The person (or app) chose this host: a host we may not call is bad input.
            raise ApiError(400, "unsupported_did",
                           f"{did}: its host is not reachable from this service ({exc.message})") from None
        raise
    if resp.status_code in (404, 410):
        raise ApiError(400, "unknown_did", f"{did} is not known to the {what} ({resp.status_code})")
    if resp.status_code != 200:
        raise PdsError(f"the {what} answered {resp.status_code} for {did}", pds_status=resp.status_code)
    if len(resp.content) > _MAX_DOC_BYTES:
        raise PdsError(f"the DID document of {did} is too large")
    try:
        doc = resp.json()
    except ValueError:
        raise PdsError(f"the {what} returned something that is not JSON for {did}") from None
    if not isinstance(doc, dict) or doc.get("id") != did:
        raise PdsError(f"the {what} returned a document that is not {did}'s")
    return doc


def _refused_by_guard(exc: PdsError) -> bool:
    """Whether `request` failed because the SSRF guard refused the target (it raises the
    PdsError while handling `RequestRefused`, which stays its context)."""
    from daemon.security.netguard import RequestRefused
    return isinstance(exc.__context__, RequestRefused)


async def require_known_did(app: Application, did: Any, field: str = "did") -> DidInfo:
    """A person's DID that is about to be written to a PDS or the local index (join, join
    request, promote, transfer, a community's creator): a strict did:plc or did:web
    (400 ``invalid_request`` / ``unsupported_did`` naming `field`, checked before anything
    is sent) whose document resolves, through the cache (400 ``unknown_did``). A directory
    or did:web host that cannot be reached is a 502: the DID could not be checked."""
    did = require_atproto_did(did, field)
    try:
        return await resolve_did(app, did)
    except ApiError as exc:
        if exc.status == 400 and exc.code in ("unknown_did", "unsupported_did"):
            raise ApiError(400, exc.code, f"{field}: {exc.message}",
                           details=[{"field": field, "message": exc.message}]) from None
        raise


async def resolve_identity(app: Application, handle_or_did: str) -> DidInfo:
    """A DID or a handle, resolved and checked both ways.

    Given a handle, the result's ``handle`` is that handle: a handle whose DID document does
    not claim it back is ``ApiError(400, "unknown_handle")``.
    """
    if not isinstance(handle_or_did, str) or not handle_or_did.strip():
        raise ApiError(400, "invalid_request", "a handle or DID is required")
    value = handle_or_did.strip()
    if value.startswith("did:"):
        return await resolve_did(app, value)
    handle = require_handle(value, "handle")
    did = await resolve_handle(app, handle)
    info = await resolve_did(app, did)
    if info.handle != handle:  # maybe the handle changed since we cached the document
        info = await resolve_did(app, did, fresh=True)
    if info.handle != handle:
        claimed = _doc_handle(info.doc)
        raise ApiError(400, "unknown_handle",
                       f"the handle {handle} points to {did}, but that account's DID document "
                       + (f"names the handle {claimed}" if claimed and claimed != handle
                          else "does not confirm it"))
    return info


async def resolve_many(app: Application, dids: Iterable[str]) -> dict[str, DidInfo | None]:
    """Resolve many DIDs at once (cache first, the rest concurrently, at most
    ``atproto.resolve_concurrency`` at a time). A DID that fails maps to None."""
    unique = list(dict.fromkeys(dids))
    out: dict[str, DidInfo | None] = {d: None for d in unique}
    valid = [d for d in unique if is_atproto_did(d)]
    rows = await get_dids(app.db, valid, app.clock.time())
    for did, row in rows.items():
        out[did] = _info_from_row(row)
    missing = [d for d in valid if d not in rows]
    if not missing:
        return out
    limit = asyncio.Semaphore(max(1, app.config.atproto.resolve_concurrency))

    async def one(did: str) -> None:
        async with limit:
            try:
                out[did] = await _shared(app, ("did", did), lambda: _resolve_did_uncached(app, did))
            except ApiError as exc:
                log.info("cannot resolve %s: %s", did, exc.message)

    await asyncio.gather(*(one(d) for d in missing))
    return out


async def forget_identity(app: Application, did: str) -> None:
    """Drop what the cache knows about `did` (e.g. after noticing a handle change)."""
    async with app.db.transaction("identity.forget") as tx:
        await forget_tx(tx, did=did)


# ------------------------------------------------------------------ the cache's queries (identity_handles, identity_dids)

_CHUNK = 500  # stays well under SQLite's bound-parameter limit


async def get_handle(db: Reader, handle: str, now: float) -> str | None:
    return await db.fetchval(
        "SELECT did FROM identity_handles WHERE handle = ? AND expires_at > ?", (handle, now))


async def get_dids(db: Reader, dids: Iterable[str], now: float) -> dict[str, Row]:
    """Unexpired cache rows for `dids`, keyed by DID."""
    wanted = list(dict.fromkeys(dids))
    out: dict[str, Row] = {}
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i:i + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = await db.fetchall(
            f"SELECT did, handle, pds_url, doc, resolved_at, expires_at FROM identity_dids "
            f"WHERE did IN ({marks}) AND expires_at > ?", (*chunk, now))
        out.update((r["did"], r) for r in rows)
    return out


async def put_handle_tx(tx: Transaction, handle: str, did: str, now: float, expires_at: float) -> None:
    await tx.execute(
        "INSERT INTO identity_handles (handle, did, resolved_at, expires_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (handle) DO UPDATE SET did = excluded.did, resolved_at = excluded.resolved_at, "
        "expires_at = excluded.expires_at", (handle, did, now, expires_at))


async def put_did_tx(tx: Transaction, did: str, handle: str | None, pds_url: str | None, doc: str,
                     now: float, expires_at: float) -> None:
    await tx.execute(
        "INSERT INTO identity_dids (did, handle, pds_url, doc, resolved_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (did) DO UPDATE SET handle = excluded.handle, "
        "pds_url = excluded.pds_url, doc = excluded.doc, resolved_at = excluded.resolved_at, "
        "expires_at = excluded.expires_at", (did, handle, pds_url, doc, now, expires_at))


async def forget_tx(tx: Transaction, *, did: str | None = None, handle: str | None = None) -> None:
    """Drop cached entries (e.g. after a handle change was noticed)."""
    if did is not None:
        await tx.execute("DELETE FROM identity_dids WHERE did = ?", (did,))
        await tx.execute("DELETE FROM identity_handles WHERE did = ?", (did,))
    if handle is not None:
        await tx.execute("DELETE FROM identity_handles WHERE handle = ?", (handle,))


async def purge_expired_tx(tx: Transaction, before: float) -> int:
    cur = await tx.execute("DELETE FROM identity_handles WHERE expires_at <= ?", (before,))
    removed = cur.rowcount
    cur = await tx.execute("DELETE FROM identity_dids WHERE expires_at <= ?", (before,))
    return removed + cur.rowcount
