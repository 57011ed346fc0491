"""For a plugin's tests: the pytest plugin with Commonroom's fixtures (``pytest_plugins =
[TESTING_PLUGIN]``, the same as ``"commonroom_testing"``) and the clocks (`FakeClock` steps time).

    from daemon.plugin.testing import TESTING_PLUGIN, FakeClock

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.base import Clock, FakeClock

#: The pytest plugin with Commonroom's test fixtures: ``pytest_plugins = [TESTING_PLUGIN]``
#: in a plugin's top-level ``tests/conftest.py`` (the same as ``"commonroom_testing"``).
TESTING_PLUGIN = "commonroom_testing"

__all__ = [
    "TESTING_PLUGIN", "FakeClock", "Clock",
]
