"""The store contract, on the real LevelDB backend in a temporary directory."""

import pytest

from scrapy_dedup.core.bands import simhash_blocks
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.store import IncompatibleStore, StoreError, StoreLocked
from scrapy_dedup.store.leveldb import LevelDBStore

PARAMS = {"fingerprint": {"version": 1}, "max_distance": 3}


@pytest.fixture
def store(store_path):
    with LevelDBStore(store_path, PARAMS) as s:
        yield s


def test_runs_count_up_and_persist(store_path):
    with LevelDBStore(store_path, PARAMS) as s:
        assert s.run == 0
        assert s.begin_run() == 1
    with LevelDBStore(store_path, PARAMS) as s:
        assert s.run == 1
        assert s.begin_run() == 2


def test_frontier_mark_reports_previous_run_and_first_url(store):
    assert store.frontier_mark("http://h/a", 1, "http://h/a/") is None
    assert store.frontier_mark("http://h/a", 1, "http://h/a?x") == (1, "http://h/a/")
    assert store.frontier_mark("http://h/a", 2, "http://h/a") == (1, "http://h/a/")
    assert store.frontier_mark("http://h/a", 2, "http://h/a") == (2, "http://h/a/")
    assert store.frontier_size() == 1


def test_url_records_round_trip(store):
    record = UrlRecord(key="http://h/a", url="http://h/a/", status="new", simhash=2**63 + 5, jaccard=0.5)
    with store.batch() as b:
        b.put_url(record)
    assert store.get_url("http://h/a") == record
    assert store.get_url("http://h/missing") is None
    assert [r.key for r in store.iter_urls()] == ["http://h/a"]


def test_batch_is_atomic(store):
    with pytest.raises(RuntimeError):
        with store.batch() as b:
            b.put_url(UrlRecord(key="k", url="u"))
            raise RuntimeError("decision failed halfway")
    assert store.get_url("k") is None


def test_variants_count_repeats(store):
    with store.batch() as b:
        b.put_variant("http://h/a?utm_source=x", "http://h/a", 10.0, None)
    prev = store.get_variant("http://h/a?utm_source=x")
    with store.batch() as b:
        b.put_variant("http://h/a?utm_source=x", "http://h/a", 20.0, prev, "fresh")
    assert store.get_variant("http://h/a?utm_source=x") == {
        "key": "http://h/a",
        "first_seen": 10.0,
        "last_seen": 20.0,
        "count": 2,
        "reason": "fresh",
    }
    assert [u for u, _ in store.iter_variants()] == ["http://h/a?utm_source=x"]
    assert list(store.iter_aliases_of("http://h/a")) == [("http://h/a?utm_source=x", "url_variant")]
    assert list(store.iter_aliases_of("http://h/b")) == []


def test_meta_round_trip(store):
    assert store.get_meta("url_rules") is None
    store.put_meta("url_rules", {"host_rules": {"h": {"allow_params": ["id"]}}})
    assert store.get_meta("url_rules") == {"host_rules": {"h": {"allow_params": ["id"]}}}


def test_exact_index_is_scoped(store):
    with store.batch() as b:
        b.index_exact("", "abc", "00000000000000aa")
    assert store.find_exact("", "abc") == "00000000000000aa"
    assert store.find_exact("tenant-b", "abc") is None
    with store.batch() as b:
        b.unindex_exact("", "abc")
    assert store.find_exact("", "abc") is None


def test_simhash_candidates_share_a_block(store):
    fp = 0x1234_5678_9ABC_DEF0
    with store.batch() as b:
        b.index_near("", fp, (11, 22), "00000000000000aa")
    near = fp ^ 0b111  # 3 bits flipped in block 0: blocks 1..3 still shared
    far = fp ^ 0x0001_0001_0001_0001  # one bit in every block: no block shared
    assert list(store.simhash_candidates("", near)) == [(fp, "00000000000000aa")]
    assert list(store.simhash_candidates("", far)) == []
    assert list(store.simhash_candidates("other", near)) == []
    assert len(simhash_blocks(fp)) == 4


def test_band_candidates_and_unindex(store):
    with store.batch() as b:
        b.index_near("", 7, (11, 22, 33), "00000000000000aa")
        b.index_near("", 9, (11, 99, 98), "00000000000000bb")
    assert store.band_candidates("", (11, 0, 0)) == {"00000000000000aa", "00000000000000bb"}
    assert store.band_candidates("", (0, 22, 0)) == {"00000000000000aa"}
    with store.batch() as b:
        b.unindex_near("", 7, (11, 22, 33), "00000000000000aa")
    assert store.band_candidates("", (11, 22, 33)) == {"00000000000000bb"}
    assert list(store.simhash_candidates("", 7)) == [(9, "00000000000000bb")]


def test_clusters_and_members(store):
    cluster = Cluster("00000000000000aa", "http://h/a", "http://h/a", 100, 1)
    with store.batch() as b:
        b.put_cluster(cluster)
        b.add_member(cluster.cluster_id, "http://h/a")
        b.add_member(cluster.cluster_id, "http://h/b")
    assert store.get_cluster(cluster.cluster_id) == cluster
    assert store.cluster_members(cluster.cluster_id) == ["http://h/a", "http://h/b"]
    with store.batch() as b:
        b.remove_member(cluster.cluster_id, "http://h/a")
        b.delete_cluster(cluster.cluster_id)
    assert store.cluster_members(cluster.cluster_id) == ["http://h/b"]
    assert list(store.iter_clusters()) == []


def test_other_parameters_are_refused(store_path):
    LevelDBStore(store_path, PARAMS).close()
    with pytest.raises(IncompatibleStore, match="max_distance: store has 3, this crawl uses 2"):
        LevelDBStore(store_path, {**PARAMS, "max_distance": 2})


def test_one_process_at_a_time(store):
    # LevelDB's lock is per process; a second handle in the same process is refused the same way
    with pytest.raises(StoreLocked, match="in use"):
        LevelDBStore(store.path, PARAMS)


def test_open_existing_needs_a_store(tmp_path):
    with pytest.raises(StoreError, match="no dedup store"):
        LevelDBStore.open_existing(str(tmp_path / "nothing"))
