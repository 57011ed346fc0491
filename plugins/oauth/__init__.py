"""Browser sessions and atproto OAuth login."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import hookimpl
from daemon.plugin.security import SID_COOKIE, authenticate_session
from plugins.oauth import handlers
from plugins.oauth.config import OAuthConfig
from plugins.oauth.grants import OAuthState, oauth_state
from plugins.oauth.keys import GENERATED_KEY_FILE


@hookimpl
def cr_authenticate(handler: Any) -> Any:
    sid = handler.get_cookie(SID_COOKIE)
    if not sid:
        return None
    return authenticate_session(handler.app, sid)


@hookimpl
def cr_config_section() -> tuple[str, type]:
    return ("oauth", OAuthConfig)


@hookimpl
def cr_migrations() -> tuple[str, str]:
    return ("oauth", str(Path(__file__).parent / "migrations"))


@hookimpl
def cr_state_files(config: Any) -> list[str]:
    # The generated client key: without it, a restored service is a new OAuth client.
    return [] if config.plugin("oauth").signing_keys else [GENERATED_KEY_FILE]


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return handlers.routes()


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    # The client and grants; other plugins may sign a session out (daemon/runtime/services.py).
    return {"oauth": OAuthState(app)}


@hookimpl
def cr_startup(app: Any) -> None:
    # Load (or generate) the client keys now, so a bad key fails at start-up, not at login.
    oauth_state(app)


@hookimpl
def cr_user_repo(app: Any, principal: Any) -> Any:
    # looked up at call time, so a test can stand in for the user's PDS
    from plugins.oauth import userrepo
    return userrepo.user_repo(app, principal)
