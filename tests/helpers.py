"""Helpers shared by the tests: an HTTP client for the app under test, sessions.

They ship with Commonroom as `commonroom_testing.http` (so a plugin's own tests can use
them too); this module keeps the names the tests import."""

from commonroom_testing.http import Client, Response, Session, login_as, register_app, serve_app

__all__ = ["Client", "Response", "Session", "login_as", "register_app", "serve_app"]
