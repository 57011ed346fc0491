"""The devnet fixtures (``devnet``, ``test_ca``) ship as `commonroom_testing.devnet`,
loaded by tests/conftest.py; this module keeps the names tests import."""

from commonroom_testing.devnet import LEXICON_AUTHORITY, TEST_SERVICE_HOST

__all__ = ["LEXICON_AUTHORITY", "TEST_SERVICE_HOST"]
