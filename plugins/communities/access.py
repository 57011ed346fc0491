"""The communities plugin's names for the core's access rules (daemon/access.py)."""

from daemon.access import *  # noqa: F401,F403
from daemon.access import __all__  # noqa: F401
