"""The SSRF guard: which addresses the daemon may connect to on someone else's say-so.

Outsiders choose many of the URLs the daemon fetches: webhook targets, the server typed at
`POST /login`, handle hosts, `did:web` hosts, the PDS a DID document names, the endpoints
an authorization server's metadata names. None of them may make the daemon call into its
own network. A target's host must resolve only to public addresses: loopback, private,
link-local, multicast, reserved, unspecified, shared (CGNAT) and other non-global ranges
(also when wrapped in IPv6: IPv4-mapped, 6to4, NAT64) are refused unless the operator
lists the address range or the host name (`webhooks.allowed_targets`,
`atproto.allowed_private_targets`).

The check runs inside the connection itself (`GuardedBackend`, an httpcore network
backend): the name is resolved, every address checked, and the socket connected to the
checked address, so a DNS answer that changes between a check and the connect (DNS
rebinding) cannot redirect a request. TLS still verifies the certificate against the host
name (SNI). `Guard.check` does the same check up front, e.g. when a webhook is saved.

`GuardedTransport` puts the backend under an `httpx.AsyncClient` (the app's `app.http`):
a refused connection raises `RequestRefused`, an `httpx.ConnectError`, so code that already
handles "could not connect" keeps working and code that cares can tell the two apart.
Environment proxies (`HTTPS_PROXY` ...) are not used: a proxy would resolve the name
itself, out of the guard's sight.

What a refusal says never tells what a host *name* resolves to (the guard would otherwise
be an oracle on the daemon's own DNS): a name that resolves to a refused address, or to
nothing at all, is refused with the same words, "<host> does not resolve to a public
address"; only a literal IP address is named with its kind ("10.0.0.1 is a private
address"). The detail goes to the log (``commonroom.netguard``, info), for the operator.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import httpcore
import httpx
from httpcore._backends.auto import AutoBackend

log = logging.getLogger("commonroom.netguard")

RESOLVE_TIMEOUT = 5.0
#: What a refusal of a host name says, whatever the name resolved to (module doc).
NOT_PUBLIC = "does not resolve to a public address"
Resolver = Callable[[str, int], Awaitable[list[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(\.{_LABEL})*")


class TargetRefused(Exception):
    """The URL or the address it resolves to may not be called."""


class Unresolvable(TargetRefused):
    """A host name with no address (the name does not exist, or has no A/AAAA record)."""


class AddressRefused(httpcore.ConnectError):
    """Raised inside a connection attempt when no resolved address is allowed."""

    def __init__(self, message: str, host: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.host = host
        self.reason = reason


class RequestRefused(httpx.ConnectError):
    """What `GuardedTransport` (so `app.http`) raises for a refused target: an
    `httpx.ConnectError` whose `host` and `reason` say what was refused and why."""

    def __init__(self, message: str, *, host: str, reason: str,
                 request: httpx.Request | None = None) -> None:
        super().__init__(message, request=request)
        self.host = host
        self.reason = reason


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def allowlist_problem(entry: Any) -> str | None:
    """Why `entry` is not a usable allowlist entry (a CIDR range, an IP address or a host
    name), or None."""
    if not isinstance(entry, str) or not entry.strip():
        return "expected a CIDR range, an IP address or a host name"
    text = entry.strip()
    if "://" in text:
        return f"{entry!r} is a URL: give a bare host name, IP address or CIDR range"
    try:
        ipaddress.ip_network(text, strict=False)
        return None
    except ValueError:
        if "/" in text or ":" in text or text.replace(".", "").isdigit():
            return f"{entry!r} is not a CIDR range, an IP address or a bare host name (no port)"
    if not _HOST_NAME.fullmatch(text.lower().rstrip(".")):
        return f"{entry!r} is not a host name (give a bare name: no scheme, port or path)"
    return None


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int


class Guard:
    def __init__(self, allow_http: bool, allowed_targets: Iterable[str],
                 resolver: Resolver = system_resolver) -> None:
        self.allow_http = allow_http
        self.allowed_networks: list[IPNetwork] = []
        self.allowed_hosts: set[str] = set()
        for entry in allowed_targets:
            try:
                self.allowed_networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                self.allowed_hosts.add(entry.strip().lower().rstrip("."))
        self.resolver = resolver

    # ---------------------------------------------------------------- URLs

    def parse(self, url: str) -> Target:
        """Check the URL's form (scheme, host, no credentials); 400-worthy problems raise."""
        if len(url) > 2048:
            raise TargetRefused("the URL is longer than 2048 characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise TargetRefused(f"not a valid URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("https", "http"):
            raise TargetRefused("the URL must start with https://")
        if scheme == "http" and not self.allow_http:
            raise TargetRefused("the URL must use https (plain http is not allowed by this service)")
        if parts.username is not None or parts.password is not None:
            raise TargetRefused("the URL must not carry a user name or password")
        if parts.fragment:
            raise TargetRefused("the URL must not carry a #fragment")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise TargetRefused("the URL has no host")
        return Target(url, scheme, host, port or (443 if scheme == "https" else 80))

    # ---------------------------------------------------------------- addresses

    def refusal(self, address: str) -> str | None:
        """Why `address` may not be called, or None if it may."""
        try:
            ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address} is not an IP address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self.allowed_networks):
            return None
        for label, flag in (("loopback", ip.is_loopback), ("unspecified", ip.is_unspecified),
                            ("link-local", ip.is_link_local), ("multicast", ip.is_multicast),
                            ("private", ip.is_private), ("reserved", ip.is_reserved)):
            if flag:
                return f"{ip} is a {label} address"
        if not ip.is_global:
            return f"{ip} is not a public address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.sixtofour is not None:
            # 6to4 carries an IPv4 address: the one a relay would reach. (The NAT64 prefix
            # 64:ff9b::/96 already counts as reserved.)
            reason = self.refusal(str(ip.sixtofour))
            if reason:
                return f"{ip} wraps {ip.sixtofour}: {reason}"
        return None

    def host_allowed(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.allowed_hosts

    @staticmethod
    def public_reason(host: str, reason: str) -> str:
        """`reason` (which names the address) as a refusal may say it to whoever chose
        `host`: unchanged for a literal IP address, the same words for every host name."""
        try:
            ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
            return reason
        except ValueError:
            return f"{host} {NOT_PUBLIC}"

    async def resolve(self, host: str, port: int) -> list[str]:
        try:
            ipaddress.ip_address(host)
            return [host]
        except ValueError:
            pass
        try:
            addresses = await asyncio.wait_for(self.resolver(host, port), RESOLVE_TIMEOUT)
        except asyncio.TimeoutError:
            raise TargetRefused(f"resolving the host {host} timed out") from None
        except (OSError, UnicodeError) as exc:
            if isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN:
                raise TargetRefused(f"resolving the host {host} failed for now") from None
            log.info("refused %s: it does not resolve (%s)", host, exc)
            raise Unresolvable(f"the host {host} {NOT_PUBLIC}") from None
        if not addresses:
            log.info("refused %s: it resolves to no address", host)
            raise Unresolvable(f"the host {host} {NOT_PUBLIC}")
        return addresses

    async def check(self, url: str) -> Target:
        """Check a URL up front (e.g. when a webhook is created or changed): every address
        the host resolves to must be allowed."""
        target = self.parse(url)
        if self.host_allowed(target.host):
            return target
        for address in await self.resolve(target.host, target.port):
            reason = self.refusal(address)
            if reason:
                log.info("refused %s: %s", target.host, reason)
                public = self.public_reason(target.host, reason)
                raise TargetRefused(f"the host {target.host} resolves to a refused address: {reason}"
                                    if public == reason else f"the host {public}")
        return target

    async def connectable(self, host: str, port: int) -> list[str]:
        """The allowed addresses for a connection (at connect time)."""
        try:
            addresses = await self.resolve(host, port)
        except Unresolvable:
            if self.host_allowed(host):
                raise
            # The same refusal as a name that resolves to a refused address (module doc).
            reason = f"{host} {NOT_PUBLIC}"
            raise AddressRefused(f"refused to connect to {reason}", host, reason) from None
        if self.host_allowed(host):
            return addresses
        allowed = [a for a in addresses if self.refusal(a) is None]
        if not allowed:
            detail = self.refusal(addresses[0]) or "refused"
            log.info("refused to connect to %s: %s", host, detail)
            reason = self.public_reason(host, detail)
            raise AddressRefused(f"refused to connect to {host}: {reason}", host, reason)
        return allowed


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that resolves and checks the host itself and
    connects to the checked address."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self._inner = AutoBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable | None = None) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await asyncio.wait_for(self.guard.connectable(host, port), timeout)
        except TargetRefused as exc:
            raise httpcore.ConnectError(str(exc)) from None
        except asyncio.TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed targets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with every connection made through `GuardedBackend`; a refused
    target raises `RequestRefused`."""

    def __init__(self, guard: Guard, *, limits: httpx.Limits = httpx.Limits(),
                 verify: Any = True, trust_env: bool = True) -> None:
        super().__init__(verify=verify, trust_env=trust_env, limits=limits)
        self.guard = guard
        # httpx has no network-backend option: build its connection pool again with ours.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=trust_env),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(guard))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.ConnectError as exc:
            cause = exc.__cause__
            if isinstance(cause, AddressRefused):
                raise RequestRefused(str(cause), host=cause.host, reason=cause.reason,
                                     request=request) from None
            raise
