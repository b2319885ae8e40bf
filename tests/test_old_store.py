"""A store written by 0.1.0 (store format 2, committed under tests/fixtures) with this version.

It is migrated in place by ``scrapy dedup migrate`` (or needs nothing when the format did not
change); a crawl refuses an outdated store with the command that migrates it; after the migration
the store holds what 0.1.0 wrote, ``scrapy dedup check`` calls it consistent, and a crawl goes on
with it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import plyvel
import pytest
from crawl_helpers import dedup
from testing import DemoServer, run_crawl

from scrapy_dedup.store.base import STORE_FORMAT
from scrapy_dedup.store.leveldb import LevelDBStore

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
            "records": {r.key: (r.status, r.reason, r.content_hash) for r in store.iter_urls()},
            "representatives": {c.cluster_id: c.representative for c in store.iter_clusters()},
            "members": {c.cluster_id: sorted(store.cluster_members(c.cluster_id)) for c in store.iter_clusters()},
            "variants": sum(1 for _ in store.iter_variants()),
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
