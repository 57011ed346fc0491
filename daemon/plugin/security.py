"""Browser sessions (the `sid` and `csrf-token` cookies the oauth plugin signs people in with) and
outbound requests through the SSRF guard (`app.http` is a guarded client; these build another).

    from daemon.plugin.security import Guard, create_session

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.http.base import SID_COOKIE
from daemon.security.netguard import AddressRefused, Guard, GuardedTransport, RequestRefused, Target, TargetRefused
from daemon.security.sessions import (authenticate_session, clear_session_cookies, create_session,
                                      end_session, end_sessions_of, NewSession, set_session_cookies)

__all__ = [
    "SID_COOKIE", "NewSession", "create_session", "authenticate_session", "end_session", "end_sessions_of",
    "set_session_cookies",
    "clear_session_cookies", "Guard", "Target", "GuardedTransport", "TargetRefused", "AddressRefused",
    "RequestRefused",
]
