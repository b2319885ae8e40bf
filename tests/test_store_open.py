"""Opening a store (scrapy_dedup.store.open): one place for the crawl, ingest and the reports, with
one-line errors that name the setting or the path and never repeat a Redis URL."""

import pytest

from scrapy_dedup.store.base import StoreError, StoreLocked
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.memory import MemoryStore
from scrapy_dedup.store.open import backend_class, open_existing, open_store
from scrapy_dedup.store.records import get_meta

PARAMS = {"v": 1}


def test_the_location_selects_the_backend_unless_one_is_named():
    assert backend_class(None, "/var/lib/dedup") is LevelDBStore
    assert backend_class(None, "rediss://:secret@cache:6380/1").__name__ == "RedisStore"
    assert backend_class("scrapy_dedup.store.memory.MemoryStore", "redis://x") is MemoryStore
    assert backend_class(MemoryStore) is MemoryStore


@pytest.mark.parametrize("name", ["nothere.Store", "scrapy_dedup.store.memory.Nothing", "LevelDBStore"])
def test_a_backend_that_cannot_be_loaded_is_one_line_naming_the_setting(name):
    with pytest.raises(StoreError) as raised:
        backend_class(name)
    message = str(raised.value)
    assert "\n" not in message
    assert f"the store backend {name} (DEDUP_STORE_BACKEND" in message and "cannot be loaded" in message


def test_open_store_begins_a_run_and_records_the_metadata(store_path):
    with open_store(store_path, PARAMS, meta={"url_rules": {"x": 1}}) as store:
        assert isinstance(store, LevelDBStore)
        assert store.run == 1
    with open_store(store_path, PARAMS) as store:
        assert store.run == 2
    with open_existing(store_path) as store:
        assert get_meta(store, "url_rules") == {"x": 1}
        assert store.run == 2


@pytest.mark.parametrize(
    ("default", "says"), [(False, "DEDUP_STORE '{path}' cannot be used"), (True, "the default store directory '{path}'")]
)
def test_a_file_in_the_way_is_one_line_naming_the_path(tmp_path, default, says):
    path = tmp_path / "a-file"
    path.write_text("not a store")
    with pytest.raises(StoreError) as raised:
        open_store(str(path), PARAMS, default=default)
    message = str(raised.value)
    assert message.startswith(says.format(path=path)) and "\n" not in message
    assert path.read_text() == "not a store"


def test_a_redis_url_is_not_repeated_in_the_message(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/run/redis.sock")

    monkeypatch.setattr(MemoryStore, "__init__", refuse)
    with pytest.raises(StoreError) as raised:
        open_store("redis://:secret@cache:6379/0", PARAMS, backend=MemoryStore)
    assert "secret" not in str(raised.value)
    assert str(raised.value).startswith("DEDUP_STORE cannot be used as a dedup store: Permission denied")


def test_a_store_another_process_holds_is_refused_for_reading(store_path):
    with open_store(store_path, PARAMS):
        # plyvel's lock is per process too: a second handle on the same directory is refused
        with pytest.raises(StoreLocked):
            open_existing(store_path)
