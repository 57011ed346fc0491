"""The types every layer shares: :class:`ApiError` (an error answered as JSON) and
:class:`Principal` (who is calling). The bottom layer: it imports nothing of ``daemon``,
so ``daemon/http``, ``daemon/security``, ``daemon/atproto`` and ``daemon/runtime`` all use
these without copying each other's helpers (``daemon.plugin`` exports both)."""

from __future__ import annotations

from dataclasses import dataclass, field
from http.client import responses
from typing import Any

_DEFAULT_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 429: "rate_limited", 500: "internal_error",
    502: "upstream_error", 503: "unavailable",
}


class ApiError(Exception):
    """An error answered as JSON with `status`."""

    def __init__(self, status: int, code: str | None = None, message: str | None = None,
                 details: Any = None, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.code = code or _DEFAULT_CODES.get(status, "error")
        self.message = message or responses.get(status, "Error")
        self.details = details
        self.headers = headers or {}
        super().__init__(f"{status} {self.code}: {self.message}")

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details is not None:
            out["details"] = self.details
        return out


@dataclass(frozen=True)
class Principal:
    """Who is calling: an app (API key) or a person (browser session). Read-only: one
    object may serve several requests (API-key principals are cached)."""

    kind: str                          # "app" or "session"
    did: str | None = None             # the session's user
    handle: str | None = None
    app_id: str | None = None
    app_owner_did: str | None = None
    session_id: str | None = None      # hash of the sid cookie
    csrf_token: str | None = None
    rate_limit: tuple[int, float] | None = None  # an app's custom (requests, window)
    extra: dict[str, Any] = field(default_factory=dict)
