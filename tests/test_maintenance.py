"""``scrapy dedup check`` and ``scrapy dedup repair`` on stores damaged on purpose.

The store is a copy of the committed fixture (two real crawls of the demo site, migrated to this
version's format); the damage is
done to its files the way a crash, a full disk or a careless copy does it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import plyvel
import pytest
from crawl_helpers import dedup

from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.store import maintenance
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.leveldb.migrate import migrate_store
from scrapy_dedup.store.memory import MemoryStore
from scrapy_dedup.store.records import get_cluster, get_url, iter_urls, members_of, put_cluster

FIXTURE = Path(__file__).parent / "fixtures" / "store-0.1.0" / "store"


@pytest.fixture
def store_dir(tmp_path) -> Path:
    path = tmp_path / "store"
    shutil.copytree(FIXTURE, path)
    migrate_store(str(path))  # the fixture has the format 0.1.0 wrote
    # compacted, so that every table file is one LevelDB reads (the migration rewrote most keys,
    # which can leave obsolete files behind until the next compaction)
    db = plyvel.DB(str(path))
    db.compact_range()
    db.close()
    return path




def _tables(path: Path) -> list[Path]:
    return sorted(path.glob("*.ldb"), key=lambda p: p.stat().st_size)


def _check(path: Path) -> maintenance.CheckResult:
    with LevelDBStore.open_existing(str(path)) as store:
        return maintenance.check_store(store)


def test_a_sound_store_is_consistent(store_dir):
    proc = dedup(store_dir, "check")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "consistent"
    assert any(line.startswith("clusters") and " 35 checked" in line for line in lines)
    assert any(line.startswith("records") and " 76 checked" in line for line in lines)


def test_half_written_decisions_are_found_and_repaired(store_dir):
    """What a decision written without its batch leaves: every invariant broken once."""
    with LevelDBStore.open_existing(str(store_dir)) as store:
        record = next(r for r in iter_urls(store) if r.cluster_id is not None)
        db = store._db
        # a cluster whose representative has no record, a record pointing at a dead cluster,
        # orphan fingerprints
        db.put(b"c:00000000000000aa", Cluster("00000000000000aa", "gone", "http://gone/", 1, 1).to_json())
        record.cluster_id = "00000000000000bb"
        db.put(b"u:" + record.key.encode(), record.to_json())
        db.put(b"h:0000000000000000:ffff", b"00000000000000cc")
        db.put(b"n:http://nowhere/", b"\x00" * 256)
        db.put(b"x:http://nowhere/", b"x")
    proc = dedup(store_dir, "check")
    assert proc.returncode == 1
    assert "inconsistent: 5 problem(s)" in proc.stdout, proc.stdout
    result = _check(store_dir)
    assert result.problems == {"clusters": 2, "records": 1, "minhashes": 1, "texts": 1}
    # an exact entry no record stands behind: a claim whose decision never completed
    assert result.notes == {"stale exact claims": 1}

    proc = dedup(store_dir, "repair")
    assert proc.returncode == 0, proc.stderr
    assert "76 URL records kept" in proc.stdout
    proc = dedup(store_dir, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not _check(store_dir).notes
    with LevelDBStore.open_existing(str(store_dir)) as store:
        # the moved record founded its own cluster again: nothing was lost
        assert get_url(store, record.key).cluster_id == "00000000000000bb"
        assert members_of(store, "00000000000000bb") == [record.key]
        assert get_cluster(store, "00000000000000aa") is None


def test_deleted_table_file(store_dir):
    _tables(store_dir)[0].unlink()
    proc = dedup(store_dir, "check")
    assert proc.returncode == 1
    assert "scrapy dedup repair" in proc.stderr, proc.stderr
    proc = dedup(store_dir, "repair")
    assert proc.returncode == 0, proc.stderr
    assert dedup(store_dir, "check").returncode == 0


def test_truncated_table_file(store_dir):
    table = _tables(store_dir)[-1]
    with open(table, "r+b") as f:
        f.truncate(table.stat().st_size // 2)
    before = _check_or_error(store_dir)
    assert before is not True  # the damage shows: an error, or problems
    proc = dedup(store_dir, "repair")
    assert proc.returncode == 0, proc.stderr
    assert _check(store_dir).consistent
    with LevelDBStore.open_existing(str(store_dir)) as store:
        kept = sum(1 for _ in iter_urls(store))
    assert 0 < kept <= 76  # what the first half of the table held survives


def _check_or_error(path: Path) -> bool | str:
    proc = dedup(path, "check")
    if proc.returncode == 0:
        return True
    return proc.stdout + proc.stderr


def test_torn_batch_at_the_end_of_the_log(store_dir):
    """A crash in the middle of writing a batch: LevelDB drops the whole batch on open."""
    with LevelDBStore.open_existing(str(store_dir)) as store:
        records = list(iter_urls(store))
        first = records[0]
        with store.batch() as batch:
            for i in range(200):
                clone = Cluster(f"{i:016x}", first.key, first.url, 1, 1)
                put_cluster(batch, clone)  # clusters without members: inconsistent if half-applied
        # keep the log: no compaction on close for a small write
    log = max(store_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
    size = log.stat().st_size
    assert size > 10_000
    with open(log, "r+b") as f:
        f.truncate(size - 3000)
    assert _check(store_dir).consistent
    with LevelDBStore.open_existing(str(store_dir)) as store:
        assert get_cluster(store, f"{0:016x}") is None  # none of the batch, not half of it


def test_repair_refuses_a_held_store(store_dir):
    held = LevelDBStore.open_existing(str(store_dir))
    try:
        proc = dedup(store_dir, "repair")
        assert proc.returncode == 1
        assert "in use by another process" in proc.stderr
    finally:
        held.close()


def test_check_registry_is_open():
    assert list(maintenance.CHECKS)[:2] == ["clusters", "records"]
    assert "pending requests" in maintenance.CHECKS
    assert os.path.exists(FIXTURE / "CURRENT")


# -- every backend ---------------------------------------------------------------------------

DOCS = [
    {"url": "http://site.example/a", "text": "Rivers carry sediment from the hills down to the sea, " * 6},
    {"url": "http://site.example/a-copy", "text": "Rivers carry sediment from the hills down to the sea, " * 6},
    {"url": "http://site.example/b", "text": "A lighthouse keeper logs the weather every night at ten, " * 6},
]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


@pytest.fixture(params=["leveldb", "redis"])
def ingested(request, tmp_path):
    """A store on each backend that the CLI reads, filled by ``scrapy dedup ingest``: its CLI
    arguments and a way to open it."""
    if request.param == "redis":
        from scrapy_dedup.store.redis.store import RedisStore

        url, prefix = request.getfixturevalue("redis_single").url, f"test:{uuid.uuid4().hex[:12]}"
        where = ["--store", url, "--redis-prefix", prefix]

        def open_store():
            return RedisStore.open_existing(url, prefix=prefix)
    else:
        path = str(tmp_path / "store")
        where = ["--store", path]

        def open_store():
            return LevelDBStore.open_existing(path)

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    proc = _cli(tmp_path, "ingest", str(docs), *where)
    assert proc.returncode == 0, proc.stderr
    return request.param, where, open_store


def test_check_works_on_every_backend(ingested, tmp_path):
    backend, where, open_store = ingested
    proc = _cli(tmp_path, "check", *where)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "consistent"
    assert any(line.startswith("clusters") and " 2 checked" in line for line in lines)
    assert any(line.startswith("records") and " 3 checked" in line for line in lines)
    # a record that points at a cluster that does not exist
    with open_store() as store:
        record = get_url(store, "http://site.example/b")
        record.cluster_id = "00000000000000bb"
        with store.batch() as batch:
            batch.put_url(record)
    proc = _cli(tmp_path, "check", *where)
    assert proc.returncode == 1
    # its cluster lists a member that points elsewhere; the record points at a dead cluster
    assert "inconsistent: 2 problem(s)" in proc.stdout, proc.stdout
    assert "points to a cluster that does not exist" in proc.stdout
    assert "Traceback" not in proc.stderr
    # the advice names repair only where repair works
    assert ("scrapy dedup repair" in proc.stdout) is (backend == "leveldb")


def test_repair_on_redis_says_in_one_line_what_it_offers_instead(ingested, tmp_path):
    backend, where, _ = ingested
    proc = _cli(tmp_path, "repair", *where)
    if backend == "leveldb":
        assert proc.returncode == 0, proc.stderr
        assert "3 URL records kept" in proc.stdout
        return
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("scrapy dedup: repair salvages a LevelDB store's files")
    assert "redis-check-aof" in proc.stderr and "`scrapy dedup check`" in proc.stderr


def test_migrate_on_redis_says_in_one_line_why_it_does_not_apply(redis_single, tmp_path):
    proc = _cli(tmp_path, "migrate", "--store", redis_single.url, "--redis-prefix", "test:migrate")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("scrapy dedup: migrate rewrites a LevelDB store's files in place")
    assert "DEDUP_REDIS_PREFIX" in proc.stderr


def test_check_of_a_memory_store_runs_the_checks_its_tables_allow():
    store = MemoryStore("mem-check", {"test": 1})
    try:
        with store.batch() as batch:
            batch.put_url(UrlRecord(key="http://h/a", url="http://h/a", cluster_id="00000000000000aa"))
        result = maintenance.check_store(store)
        assert result.problems == {"records": 1}
        assert "exact index" in result.ran and not result.repairable
        assert result.skipped == ["simhash tables", "bands"]  # LevelDB's own keys
    finally:
        MemoryStore.discard("mem-check")
