"""The records section refuses reconciliation settings the reconciler cannot work with."""

from __future__ import annotations

import pytest

from daemon.runtime.config import ConfigError
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


@pytest.mark.parametrize("values, path", [
    ({"denied_collections": ("org.example.*", "not a pattern")}, "records.denied_collections[1]"),
    ({"allowed_collections": ("org.*.note",)}, "records.allowed_collections[0]"),
    ({"denied_collections": ("a." * 200 + "*",)}, "records.denied_collections[0]"),
    ({"allowed_collections": ("org.example.*", "App.Bsky.feed.*")}, "records.allowed_collections[1]"),
    ({"allowed_collections": ("community.commonroom.profile",)}, "records.allowed_collections[0]"),
])
def test_bad_collection_patterns_are_refused_naming_the_entry(values, path):
    with pytest.raises(ConfigError) as caught:
        check(RecordsConfig(**values), "community.commonroom")
    assert caught.value.path == path


def test_collection_lists_load_from_yaml_and_broad_patterns_are_accepted():
    from daemon.runtime.config import Config
    from plugins.records.settings import RecordsConfig as Section
    config = Config.from_mapping({"records": {"allowed_collections": ["org.example.*", "com.*"],
                                              "denied_collections": ["org.example.secret.note"]}},
                                 plugin_sections={"records": Section})
    section = config.plugin("records")
    assert section.allowed_collections == ("org.example.*", "com.*")
    check(section, "community.commonroom")
