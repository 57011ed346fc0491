"""The records section refuses reconciliation settings the reconciler cannot work with."""

from __future__ import annotations

import pytest

from daemon.config import ConfigError
from plugins.records.settings import RecordsConfig, check


@pytest.mark.parametrize("values, path", [
    ({"reconcile_after_seconds": 0}, "records.reconcile_after_seconds"),
    ({"reconcile_after_seconds": 60, "reconcile_max_backoff_seconds": 30},
     "records.reconcile_max_backoff_seconds"),
])
def test_bad_reconcile_settings_are_refused_naming_the_key(values, path):
    with pytest.raises(ConfigError) as caught:
        check(RecordsConfig(**values))
    assert caught.value.path == path


def test_default_reconcile_settings_are_accepted():
    check(RecordsConfig())
