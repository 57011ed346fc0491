"""The AT Protocol fixtures (``pds_config_overrides``, ``new_handle``, ``png_bytes``,
``http_log``) ship as `commonroom_testing.atproto`, loaded by tests/conftest.py; this
module keeps the names tests import."""

from commonroom_testing.atproto import LOOPBACK_TARGETS, RequestLog, make_png

__all__ = ["LOOPBACK_TARGETS", "RequestLog", "make_png"]
