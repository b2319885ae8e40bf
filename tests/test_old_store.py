"""A store written by 0.1.0 (store format 2, committed under tests/fixtures) with this version.

It is migrated in place by ``scrapy dedup migrate`` (or needs nothing when the format did not
change); a crawl refuses an outdated store with the command that migrates it; after the migration
the store holds what 0.1.0 wrote, ``scrapy dedup check`` calls it consistent, and a crawl goes on
with it.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import plyvel
import pytest
from crawl_helpers import dedup
from testing import DemoServer, run_crawl

from scrapy_dedup.core.fingerprints import FINGERPRINT_PARAMS, NUM_PERM, fingerprint, narrow_signature
from scrapy_dedup.core.page_chunks import ChunkPrint
from scrapy_dedup.store.base import CHUNK_BANDS, CHUNK_PRINT, STORE_FORMAT
from scrapy_dedup.store.leveldb.migrate import migrate_store
from scrapy_dedup.store.leveldb.store import LevelDBStore, record_key
from scrapy_dedup.store.records import get_minhash, iter_clusters, iter_urls, iter_variants, members_of

FIXTURE = Path(__file__).parent / "fixtures" / "store-0.1.0"
ABOUT = json.loads((FIXTURE / "about.json").read_text("utf-8"))


@pytest.fixture
def old_store(tmp_path) -> Path:
    path = tmp_path / "out" / "store"
    shutil.copytree(FIXTURE / "store", path)
    return path




def contents(path: Path) -> dict:
    with LevelDBStore.open_existing(str(path)) as store:
        return {
            "records": {r.key: (r.status, r.reason, r.content_hash) for r in iter_urls(store)},
            "representatives": {c.cluster_id: c.representative for c in iter_clusters(store)},
            "members": {c.cluster_id: sorted(members_of(store, c.cluster_id)) for c in iter_clusters(store)},
            "variants": sum(1 for _ in iter_variants(store)),
            "run": store.run,
        }


def _raw_contents(path: Path) -> dict:
    """What 0.1.0 wrote, read without this version's backend (which may refuse the format)."""
    db = plyvel.DB(str(path))
    try:
        records = {}
        for _, raw in db.iterator(prefix=b"u:"):
            r = json.loads(raw)
            records[r["key"]] = (r.get("status", "seen"), r.get("reason"), r.get("content_hash"))
        params = json.loads(db.get(b"m:params"))
    finally:
        db.close()
    return {"records": records, "params": params}


def test_the_fixture_was_written_by_0_1_0():
    assert ABOUT["version"] == "0.1.0" and ABOUT["store_format"] == 2
    raw = _raw_contents_copy()
    assert raw["params"]["store_format"] == 2
    assert len(raw["records"]) == ABOUT["urls"]


def _raw_contents_copy() -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "store"
        shutil.copytree(FIXTURE / "store", copy)
        return _raw_contents(copy)


def test_migrated_in_place_or_refused_with_the_command(old_store):
    before = _raw_contents(old_store)
    if STORE_FORMAT > 2:
        # a crawl refuses it at start, naming the command that migrates it
        with DemoServer() as server:
            result = run_crawl(server.url + "/", old_store.parent, check=False)
        assert f"run `scrapy dedup migrate --store {old_store}`" in result.log
        assert result.items == []
        assert dedup(old_store, "summary").returncode == 1
    proc = dedup(old_store, "migrate")
    assert proc.returncode == 0, proc.stderr
    expected = "nothing to migrate" if STORE_FORMAT == 2 else f"from store format 2 to {STORE_FORMAT}"
    assert expected in proc.stdout
    after = contents(old_store)
    assert after["records"] == before["records"]  # every URL record as 0.1.0 wrote it
    assert len(after["representatives"]) == ABOUT["clusters"]
    assert after["variants"] == ABOUT["variants"] and after["run"] == ABOUT["run"]
    check = dedup(old_store, "check")
    assert check.returncode == 0 and check.stdout.splitlines()[-1] == "consistent", check.stdout + check.stderr


def test_an_interrupted_migration_is_done_again(old_store):
    """The format is written before the indexes are rebuilt; a marker says the rebuild is owed."""
    assert dedup(old_store, "migrate").returncode == 0
    before = contents(old_store)
    db = plyvel.DB(str(old_store))
    try:
        db.put(b"m:migrating", json.dumps({"from": 2}).encode())
        for key in list(db.iterator(prefix=b"k:", include_value=False))[::2]:
            db.delete(key)  # the rebuild was cut short: half the memberships are missing
    finally:
        db.close()
    assert dedup(old_store, "check").returncode == 1
    proc = dedup(old_store, "migrate")
    assert proc.returncode == 0, proc.stderr
    assert f"from store format 2 to {STORE_FORMAT}" in proc.stdout
    assert contents(old_store) == before
    assert dedup(old_store, "check").returncode == 0
    assert "nothing to migrate" in dedup(old_store, "migrate").stdout


def test_a_crawl_goes_on_with_a_migrated_store(old_store):
    assert dedup(old_store, "migrate").returncode == 0
    with DemoServer() as server:
        # the fixture was written on another port: these are other URLs, in the same store
        result = run_crawl(server.url + "/", old_store.parent, {"DEDUP_WORKERS": 0})
    assert result.stat("finish_reason") == "finished"
    assert not result.stats_with_prefix("dedup/error/")
    after = contents(old_store)
    assert after["run"] == ABOUT["run"] + 1
    assert len(after["records"]) > ABOUT["urls"]
    assert dedup(old_store, "check").returncode == 0


def test_signatures_of_4_byte_slots_are_narrowed_exactly(old_store):
    """0.1.0 kept 32-bit MinHash slots; this version keeps their low byte. A document whose text
    was kept is fingerprinted again (0.1.0 also had another tokenizer); one whose text was not
    keeps its signature, narrowed: the low bytes are what this version keeps of the same minima
    (tests/test_fingerprints.py), so none of its slots is lost."""
    db = plyvel.DB(str(old_store))
    try:
        old = {k[2:].decode(): v for k, v in db.iterator(prefix=b"n:")}
        texts = {k[2:].decode(): v for k, v in db.iterator(prefix=b"x:")}
        dropped = sorted(set(old) & set(texts))[:5]
        for key in dropped:
            db.delete(b"x:" + key.encode())  # as if DEDUP_KEEP_TEXT had been off for these
    finally:
        db.close()
    assert {len(v) for v in old.values()} == {4 * NUM_PERM} and len(dropped) == 5
    assert dedup(old_store, "migrate").returncode == 0
    with LevelDBStore.open_existing(str(old_store)) as store:
        without_text = set(old) - set(texts) | set(dropped)
        assert len(without_text) > len(dropped)
        for key in without_text:
            assert get_minhash(store, key) == narrow_signature(old[key])
        for key in sorted(set(old) & set(texts) - set(dropped)):
            text = zlib.decompress(texts[key]).decode("utf-8")
            assert get_minhash(store, key) == fingerprint(text).minhash, key
    assert dedup(old_store, "check").returncode == 0


def test_chunk_prints_are_narrowed_and_their_bands_dropped(tmp_path):
    path = str(tmp_path / "store")
    LevelDBStore(path, {"fingerprint": dict(FINGERPRINT_PARAMS)}).close()
    wide = bytes(range(256)) * 4  # 256 slots of 4 bytes, low bytes 0, 4, 8, ...
    db = plyvel.DB(path)
    try:
        params = json.loads(db.get(b"m:params"))
        old = {**params, "store_format": 3, "fingerprint": {**FINGERPRINT_PARAMS, "version": 1}}
        db.put(b"m:params", json.dumps(old, sort_keys=True).encode())
        db.put(record_key(CHUNK_PRINT, "http://h/a\0c1"), ChunkPrint(7, 120, wide, True).to_bytes())
        db.put(record_key(CHUNK_BANDS, "00:3:abcdef"), b"0\thttp://h/a\0c1")
    finally:
        db.close()
    assert f"from store format 3 to {STORE_FORMAT}" in str(migrate_store(path))
    db = plyvel.DB(path)
    try:
        p = ChunkPrint.from_bytes(db.get(record_key(CHUNK_PRINT, "http://h/a\0c1")))
        assert (p.simhash, p.tokens, p.indexed) == (7, 120, True)
        assert p.minhash == narrow_signature(wide) == bytes(range(0, 256, 4)) * 4
        assert list(db.iterator(prefix=record_key(CHUNK_BANDS, ""))) == []
        assert json.loads(db.get(b"m:params"))["store_format"] == STORE_FORMAT
    finally:
        db.close()
