"""The webhooks' SSRF guard now lives in the core (`daemon.security.netguard`, shared with the
atproto and OAuth clients); these names stay importable from here.

Webhook targets must be https (http only with `webhooks.allow_http`) and resolve only to
public addresses unless listed in `webhooks.allowed_targets`; see daemon/security/netguard.py.
"""

from daemon.security.netguard import (AddressRefused, Guard, GuardedBackend, Resolver, Target,  # noqa: F401
                             TargetRefused, system_resolver)

__all__ = ["AddressRefused", "Guard", "GuardedBackend", "Resolver", "Target", "TargetRefused",
           "system_resolver"]
