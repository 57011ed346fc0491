"""The SSRF guard: which webhook URLs and addresses the service may call.

A target must be https (http only with `webhooks.allow_http`), carry no credentials, and
its host must resolve only to public addresses: loopback, private, link-local, multicast,
reserved, unspecified, shared (CGNAT) and other non-global ranges are refused unless the
operator lists the address range or the host name in `webhooks.allowed_targets`.

The check runs when a webhook is created or changed, and again at delivery time inside
the connection itself (`GuardedBackend`): the name is resolved, every address checked,
and the socket connected to the checked address, so a DNS answer that changes between
the check and the connect (DNS rebinding) cannot redirect a delivery. TLS still verifies
the certificate against the host name (SNI). Redirects are never followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import httpcore
from httpcore._backends.auto import AutoBackend

RESOLVE_TIMEOUT = 5.0
Resolver = Callable[[str, int], Awaitable[list[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(Exception):
    """The URL or the address it resolves to may not be called."""


class AddressRefused(httpcore.ConnectError):
    """Raised inside a connection attempt when no resolved address is allowed."""


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


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
        self.allowed_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.allowed_hosts: set[str] = set()
        for entry in allowed_targets:
            try:
                self.allowed_networks.append(ipaddress.ip_network(entry, strict=False))
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
        return None

    def host_allowed(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.allowed_hosts

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
            raise TargetRefused(f"the host {host} does not resolve ({exc})") from None
        if not addresses:
            raise TargetRefused(f"the host {host} does not resolve")
        return addresses

    async def check(self, url: str) -> Target:
        """Check a URL when a webhook is created or changed: every address the host
        resolves to must be allowed."""
        target = self.parse(url)
        if self.host_allowed(target.host):
            return target
        for address in await self.resolve(target.host, target.port):
            reason = self.refusal(address)
            if reason:
                raise TargetRefused(f"the host {target.host} resolves to a refused address: {reason}")
        return target

    async def connectable(self, host: str, port: int) -> list[str]:
        """The allowed addresses for a connection (delivery time)."""
        addresses = await self.resolve(host, port)
        if self.host_allowed(host):
            return addresses
        allowed = [a for a in addresses if self.refusal(a) is None]
        if not allowed:
            raise AddressRefused(f"refused to connect to {host}: {self.refusal(addresses[0])}")
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
        raise httpcore.ConnectError("unix sockets are not webhook targets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
