"""Browser sessions and atproto OAuth login."""

from __future__ import annotations

from typing import Any

from daemon import hookimpl
from daemon.sessions import SID_COOKIE, authenticate_session


@hookimpl
def cr_authenticate(handler: Any) -> Any:
    sid = handler.get_cookie(SID_COOKIE)
    if not sid:
        return None
    return authenticate_session(handler.app, sid)
