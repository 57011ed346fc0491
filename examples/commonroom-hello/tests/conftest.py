"""Commonroom's test fixtures (app, client, clock, devnet, people, ...), shipped with
Commonroom as the pytest plugin `commonroom_testing`. The plugin under test is loaded the
way Commonroom loads it in production: through its entry point, so install it first
(``pip install -e .``)."""

pytest_plugins = ["commonroom_testing"]
