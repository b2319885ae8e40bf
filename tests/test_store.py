"""What only the LevelDB backend does: one process per store, files on disk.

The behaviour every backend shares is in test_store_contract.py.
"""

import pytest

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.store import STORE_FORMAT, IncompatibleStore, StoreLocked
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import add_member, get_url, put_alias, put_meta

PARAMS = {"fingerprint": {"version": 1}, "max_distance": 3}


@pytest.fixture
def store(store_path):
    with LevelDBStore(store_path, PARAMS) as s:
        yield s


def test_one_process_at_a_time(store):
    # LevelDB's lock is per process; a second handle in the same process is refused the same way
    with pytest.raises(StoreLocked, match="in use"):
        LevelDBStore(store.path, PARAMS)
    with pytest.raises(StoreLocked, match="in use by a running crawl"):
        LevelDBStore.open_existing(store.path)


def test_the_key_layout_is_the_documented_one(store):
    # the layout is the store format: reports and migrations read these keys
    with store.batch() as b:
        b.put_url(UrlRecord(key="http://h/a", url="http://h/a"))
        put_alias(b, "http://h/a", "http://h/b", "redirect")
        add_member(b, "00000000000000aa", "http://h/a")
    put_meta(store, "url_rules", {})
    keys = set(store._db.iterator(include_value=False))
    assert {b"u:http://h/a", b"a:http://h/a\0http://h/b", b"k:00000000000000aa:http://h/a", b"m:url_rules"} <= keys
    assert store._db.get(b"m:run") is None
    store.begin_run()
    assert store._db.get(b"m:run") == b"1"


def test_a_store_in_an_older_format_is_refused_with_a_clear_message(store_path):
    import json

    import plyvel

    LevelDBStore(store_path, PARAMS).close()
    db = plyvel.DB(store_path)
    params = json.loads(db.get(b"m:params"))
    db.put(b"m:params", json.dumps({**params, "store_format": 2}, sort_keys=True).encode())
    db.close()
    for open_store in (lambda: LevelDBStore(store_path, PARAMS), lambda: LevelDBStore.open_existing(store_path)):
        with pytest.raises(IncompatibleStore, match=rf"has store format 2, .* uses format {STORE_FORMAT}: run `scrapy dedup migrate --store "):
            open_store()
    plyvel.DB(store_path).close()  # each refusal closed the database behind it


def test_a_store_of_the_fast_mode_extraction_is_refused_then_migrated_keeping_its_records(store_path):
    """Format 4 kept the texts and fingerprints of extraction version 1 (trafilatura's fast mode
    alone): refused in one line naming the migration, which keeps every record."""
    import json

    import plyvel

    from scrapy_dedup.store.leveldb.migrate import migrate_store

    with LevelDBStore(store_path, PARAMS) as store:
        store.begin_run()
        with store.batch() as b:
            b.put_url(UrlRecord(key="http://h/a", url="http://h/a", content_hash="ab" * 16))
    db = plyvel.DB(store_path)
    params = json.loads(db.get(b"m:params"))
    db.put(b"m:params", json.dumps({**params, "store_format": 4}, sort_keys=True).encode())
    db.close()
    with pytest.raises(IncompatibleStore, match=r"has store format 4, .* run `scrapy dedup migrate --store ") as refused:
        LevelDBStore(store_path, PARAMS)
    assert "\n" not in str(refused.value)
    assert f"from store format 4 to {STORE_FORMAT}" in str(migrate_store(store_path))
    with LevelDBStore.open_existing(store_path) as store:
        assert get_url(store, "http://h/a").content_hash == "ab" * 16
