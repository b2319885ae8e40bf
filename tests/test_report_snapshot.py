"""Reading a store that a crawl holds: snapshots are consistent while writes go on."""

from __future__ import annotations

import io
import os
import threading

from scrapy.settings import Settings

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.reports.store import opened_store
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.memory import MemoryStore
from scrapy_dedup.store.records import iter_urls

PARAMS = {"fingerprint": {"version": 1}, "max_distance": 3}


def test_snapshots_taken_during_writes_hold_whole_batches(store_path):
    """Each batch writes a pair of records; a snapshot has both or neither, and opens cleanly.

    The values are large so that LevelDB flushes its memtable and compacts
    while the snapshots are copied (tables appear and disappear under the copy).
    This test caught a snapshot that hard-linked tables: opening the copy wrote
    a table under a number the writer was still using, through the link.
    """
    stop = threading.Event()
    written = [0]
    payload = "x" * 32_000

    with LevelDBStore(store_path, PARAMS) as store:

        def write() -> None:
            i = 0
            while not stop.is_set() and i < 2000:
                with store.batch() as batch:
                    for side in "ab":
                        batch.put_url(UrlRecord(key=f"{side}{i:06d}", url=f"http://h/{side}{i}", etag=payload))
                i += 1
                written[0] = i

        writer = threading.Thread(target=write)
        writer.start()
        seen = []
        try:
            while written[0] < 50:
                pass
            for _ in range(4):
                err = io.StringIO()
                with opened_store(Settings(), store_path, None, err=err) as copy:
                    keys = {record.key for record in iter_urls(copy)}
                assert "a running crawl holds" in err.getvalue()
                a = {k[1:] for k in keys if k.startswith("a")}
                b = {k[1:] for k in keys if k.startswith("b")}
                assert a == b, "a snapshot holds half of a batch"
                seen.append(len(a))
        finally:
            stop.set()
            writer.join()
    assert seen[-1] >= seen[0] > 0
    assert written[0] > seen[0]  # the snapshots were taken while the writes went on
    # and the crawl's own store is whole: reading copies never touched it
    with LevelDBStore.open_existing(store_path) as store:
        keys = [record.key for record in iter_urls(store)]
    assert len(keys) == 2 * written[0]


def test_a_snapshot_is_the_stores_own_and_its_copy_goes_when_it_closes(store_path):
    with LevelDBStore(store_path, PARAMS) as store:
        with store.batch() as batch:
            batch.put_url(UrlRecord(key="k1", url="http://h/1"))
        snapshot = LevelDBStore.open_snapshot(store_path)
        copy = snapshot.path
        assert copy != store_path and os.path.isdir(copy)
        with store.batch() as batch:  # the writer goes on; the snapshot does not see it
            batch.put_url(UrlRecord(key="k2", url="http://h/2"))
        assert [record.key for record in iter_urls(snapshot)] == ["k1"]
        snapshot.close()
        assert not os.path.exists(copy)
        assert {record.key for record in iter_urls(store)} == {"k1", "k2"}


def test_a_store_read_in_place_is_its_own_snapshot(store_path):
    try:
        with MemoryStore(store_path, PARAMS) as store:
            with store.batch() as batch:
                batch.put_url(UrlRecord(key="k1", url="http://h/1"))
            with MemoryStore.open_snapshot(store_path) as snapshot:
                assert [record.key for record in iter_urls(snapshot)] == ["k1"]
    finally:
        MemoryStore.discard(store_path)
