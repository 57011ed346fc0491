"""The communities plugin's names for the core's access rules (daemon/security/access.py)."""

from daemon.security.access import *  # noqa: F401,F403
from daemon.security.access import __all__  # noqa: F401
