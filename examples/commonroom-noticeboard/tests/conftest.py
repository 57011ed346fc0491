"""Commonroom's test fixtures (app, client, clock, devnet, people, webhook_receiver, ...),
shipped with Commonroom as the pytest plugin `commonroom_testing`. The plugin under test is
loaded as in production, through its entry point: install it first (``pip install -e .``)."""

from daemon.plugin.testing import TESTING_PLUGIN

pytest_plugins = [TESTING_PLUGIN]
