"""Helpers shared by the tests: an HTTP client for the app under test, sessions.

They ship with Commonroom as `commonroom_testing.http` (so a plugin's own tests can use
them too); this module keeps the names the tests import."""

from typing import Any

from commonroom_testing.http import Client, Response, Session, login_as, register_app, serve_app

__all__ = ["Client", "Response", "Session", "login_as", "loopback_only", "register_app", "serve_app"]


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

