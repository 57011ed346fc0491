"""Helpers shared by the tests: an HTTP client for the app under test, sessions.

They ship with Commonroom as `commonroom_testing.http` (so a plugin's own tests can use
them too); this module keeps the names the tests import."""

import asyncio
import time
from typing import Any, Awaitable, Callable

from commonroom_testing.http import Client, Response, Session, login_as, register_app, serve_app

__all__ = ["Client", "Response", "Session", "eventually", "login_as", "loopback_only", "register_app", "serve_app"]


def loopback_only(monkeypatch: Any) -> None:
    """Close the network beyond loopback to the app under test: DNS and every outbound
    target other than loopback are refused (a random handle must not become a DNS query;
    the workplace allows only loopback traffic)."""
    from daemon.security import netguard
    from daemon.atproto import identity

    original = netguard.Guard.resolve

    async def resolve(self: netguard.Guard, host: str, port: int) -> list[str]:
        addresses = await original(self, host, port) if host in ("localhost", "127.0.0.1", "::1") else None
        if addresses is None:
            try:
                import ipaddress
                if ipaddress.ip_address(host).is_loopback:
                    return [host]
            except ValueError:
                pass
            raise netguard.TargetRefused(f"this test reaches only loopback, not {host}")
        return addresses

    async def no_dns(app: Any, handle: str) -> None:
        return None

    monkeypatch.setattr(netguard.Guard, "resolve", resolve)
    monkeypatch.setattr(identity, "_via_dns", no_dns)



async def eventually(check: Callable[[], Awaitable[Any]], what: str, *, within: float = 20.0,
                     every: float = 0.1, context: Callable[[], str] | None = None) -> Any:
    """Poll `check` until it answers something true, and return that; fail naming `what`
    (and `context()`, e.g. a daemon's log) after `within` seconds. For states that arrive
    eventually (the network's event stream), not a measure of speed: keep `within` generous."""
    deadline = time.monotonic() + within
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:.0f} s: {what}" + (f"\n{context()}" if context else ""))
        await asyncio.sleep(every)
