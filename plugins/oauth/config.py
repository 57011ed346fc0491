"""The `oauth` section of config.yaml (documented in docs/oauth.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OAuthConfig:
    #: Shown by the authorization server on its consent screen.
    client_name: str = "Commonroom"
    #: Space-separated scopes to request. None: "atproto repo:<namespace>.membership" with
    #: `atproto.namespace` (only what joining and leaving need).
    scope: str | None = None
    #: Requested instead when the authorization server refuses `scope` (one without
    #: granular scopes). Also declared in the client metadata. None or "": never fall back.
    fallback_scope: str | None = "atproto transition:generic"
    #: PEM-encoded ES256 (P-256) private keys for private_key_jwt; the first signs, all are
    #: published in the JWKS (list the new key first, keep the old one until it is unused).
    #: Empty: one key is generated into <state_dir>/oauth_client_key.pem on first run.
    signing_keys: tuple[str, ...] = ()
    #: Where the browser goes after a successful login (a path on this service or a URL).
    after_login_url: str = "/"
    #: Where the browser goes when login fails, with `?error=<code>` appended. None: a
    #: small HTML page on this service explains the error.
    error_url: str | None = None
    #: How long a started login may take (sign-in and consent at the user's server).
    flow_timeout_seconds: int = 600
    #: Refresh the access token when it expires within this many seconds.
    refresh_margin_seconds: int = 60
