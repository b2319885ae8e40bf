"""The store contract: every backend passes the same tests.

Each test runs on the LevelDB backend (a temporary directory) and on the
in-memory backend (the ``backend`` fixture of conftest.py); a new backend
joins by adding itself there.
"""

import pytest
import xxhash

from scrapy_dedup.core.bands import BANDS, simhash_blocks
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.store import IncompatibleStore, StoreError
from scrapy_dedup.store.base import DedupStore, StoreBatch
from scrapy_dedup.store.records import (
    add_member,
    claim_exact,
    find_exact,
    find_raw,
    frontier_mark,
    get_cluster,
    get_emitted,
    get_meta,
    get_minhash,
    get_text,
    get_url,
    get_variant,
    has_pending,
    index_exact,
    index_raw,
    iter_aliases_of,
    iter_clusters,
    iter_urls,
    iter_variants,
    members_of,
    put_alias,
    put_cluster,
    put_emitted,
    put_meta,
    put_minhash,
    put_pending,
    put_text,
    remove_member,
    settle_pending,
    unindex_exact,
)

PARAMS = {"fingerprint": {"version": 1}, "max_distance": 3}
AA, BB = "00000000000000aa", "00000000000000bb"


def bands(seed: int, given: dict[int, int] | None = None) -> tuple[int, ...]:
    """BANDS band hashes no other seed shares, but for the ``given`` band -> hash: 64 bits
    that look like band hashes (a backend may keep only part of them, see near_candidates)."""
    return tuple((given or {}).get(band, xxhash.xxh3_64_intdigest(b"band", seed=seed << 8 | band)) for band in range(BANDS))


@pytest.fixture
def store(backend, store_path):
    with backend(store_path, PARAMS) as s:
        yield s


def test_a_backend_is_a_dedup_store(store):
    assert isinstance(store, DedupStore)


def test_runs_count_up_and_persist(backend, store_path):
    with backend(store_path, PARAMS) as s:
        assert s.run == 0
        assert s.begin_run() == 1
    with backend(store_path, PARAMS) as s:
        assert s.run == 1
        assert s.begin_run() == 2
    with backend.open_existing(store_path) as s:
        assert s.run == 2


def test_frontier_mark_reports_previous_run_and_first_url(store):
    assert frontier_mark(store, "http://h/a", 1, "http://h/a/") is None
    assert frontier_mark(store, "http://h/a", 1, "http://h/a?x") == (1, "http://h/a/")
    assert frontier_mark(store, "http://h/a", 2, "http://h/a") == (1, "http://h/a/")
    assert frontier_mark(store, "http://h/a", 2, "http://h/a") == (2, "http://h/a/")
    assert store.count("frontier") == 1


def test_every_table_but_those_unscannable_is_scanned(store):
    from scrapy_dedup.store.base import TABLES

    assert store.unscannable <= set(TABLES)
    for table in TABLES:
        if table in store.unscannable:
            with pytest.raises(StoreError):
                next(iter(store.scan(table)))
        else:
            list(store.scan(table))  # listed: nothing raised


def test_count_is_how_many_keys_a_table_holds(store):
    store.begin_run()
    assert [store.count(table) for table in ("url", "pending", "frontier")] == [0, 0, 0]
    for key in ("http://h/a", "http://h/b", "http://h/a"):
        frontier_mark(store, key, 1, key)
    with store.batch() as b:
        b.put_url(UrlRecord(key="http://h/a", url="http://h/a"))
        put_pending(b, "http://h/a", b"request a")
        put_pending(b, "http://h/b", b"request b")
        put_pending(b, "http://h/c", b"request c")
    assert [store.count(table) for table in ("url", "pending", "frontier")] == [1, 3, 2]
    with store.batch() as b:
        settle_pending(b, "http://h/b")
    assert store.count("pending") == 2


def test_url_records_round_trip(store):
    record = UrlRecord(key="http://h/a", url="http://h/a/", status="new", simhash=2**63 + 5, jaccard=0.5)
    with store.batch() as b:
        b.put_url(record)
    assert get_url(store, "http://h/a") == record
    assert get_url(store, "http://h/missing") is None
    assert [r.key for r in iter_urls(store)] == ["http://h/a"]


def test_records_iterate_once_each(store):
    keys = ["http://h/b", "http://h/a", "http://g/z", "http://h/a?x"]
    with store.batch() as b:
        for key in keys:
            b.put_url(UrlRecord(key=key, url=key))
    # in no particular order: a shared backend streams its keys as they come
    assert sorted(r.key for r in iter_urls(store)) == sorted(keys)


def test_batch_is_atomic(store):
    with pytest.raises(RuntimeError):
        with store.batch() as b:
            b.put_url(UrlRecord(key="k", url="u"))
            b.index_near("", 7, bands(1, {0: 11}), AA)
            raise RuntimeError("decision failed halfway")
    assert get_url(store, "k") is None
    assert store.near_candidates("", 7, ()).simhash == []
    assert store.near_candidates("", None, bands(2, {0: 11})).bands == set()


def test_a_batch_applies_its_writes_in_order(store):
    with store.batch() as b:
        b.put_url(UrlRecord(key="k", url="first"))
        b.put_url(UrlRecord(key="k", url="second"))
        put_text(b, "k", "gone")
        b.delete("text", "k")
    assert get_url(store, "k").url == "second"
    assert get_text(store, "k") is None


def test_variants_count_repeats(store):
    with store.batch() as b:
        b.count_variant("http://h/a?utm_source=x", "http://h/a", 10.0)
    with store.batch() as b:
        b.count_variant("http://h/a?utm_source=x", "http://h/a", 20.0, "fresh")
    assert get_variant(store, "http://h/a?utm_source=x") == {
        "key": "http://h/a",
        "first_seen": 10.0,
        "last_seen": 20.0,
        "count": 2,
        "reason": "fresh",
    }
    assert [u for u, _ in iter_variants(store)] == ["http://h/a?utm_source=x"]
    assert list(iter_aliases_of(store, "http://h/a")) == [("http://h/a?utm_source=x", "url_variant")]
    assert list(iter_aliases_of(store, "http://h/b")) == []


def test_a_variant_that_moves_is_listed_under_its_new_key(store):
    with store.batch() as b:
        b.count_variant("http://h/a?s=1", "http://h/a", 10.0)
    with store.batch() as b:
        b.count_variant("http://h/a?s=1", "http://h/b", 20.0)
    assert get_variant(store, "http://h/a?s=1")["key"] == "http://h/b"
    assert list(iter_aliases_of(store, "http://h/b")) == [("http://h/a?s=1", "url_variant")]


def test_aliases_list_and_can_be_deleted(store):
    with store.batch() as b:
        put_alias(b, "http://h/t", "http://h/z", "redirect")
        put_alias(b, "http://h/t", "http://h/a", "redirect")
        put_alias(b, "http://h/u", "http://h/b", "redirect")
    assert sorted(iter_aliases_of(store, "http://h/t")) == [("http://h/a", "redirect"), ("http://h/z", "redirect")]
    with store.batch() as b:
        b.remove_from_set("aliases", "http://h/t", "http://h/a")
    assert list(iter_aliases_of(store, "http://h/t")) == [("http://h/z", "redirect")]


def test_meta_round_trip(store):
    assert get_meta(store, "url_rules") is None
    put_meta(store, "url_rules", {"host_rules": {"h": {"allow_params": ["id"]}}})
    assert get_meta(store, "url_rules") == {"host_rules": {"h": {"allow_params": ["id"]}}}


def test_meta_if_absent_and_counters(store):
    assert put_meta(store, "owner", {"a": 1}, if_absent=True) is None
    assert put_meta(store, "owner", {"b": 2}, if_absent=True) == {"a": 1}
    assert get_meta(store, "owner") == {"a": 1}
    assert put_meta(store, "owner", {"c": 3}) is None
    assert get_meta(store, "owner") == {"c": 3}
    assert store.increment_meta("hits") == 1
    assert store.increment_meta("hits") == 2
    assert get_meta(store, "hits") == 2


def test_metadata_is_the_meta_table_of_json_values(store):
    from scrapy_dedup.store.base import META

    put_meta(store, "url_rules", {"b": [1], "a": None})
    assert store.get(META, "url_rules") == b'{"a": null, "b": [1]}'  # as 0.2.0 kept it: keys sorted
    with store.batch() as b:
        b.put(META, "owner", b'{"x": 1}')
    assert get_meta(store, "owner") == {"x": 1}
    assert store.put_if_absent(META, "owner", b"2") == b'{"x": 1}'
    store.increment_meta("hits")
    assert store.get(META, "hits") == b"1"
    if META not in store.unscannable:
        assert {"url_rules", "owner", "hits", "params"} <= {name for name, _ in store.scan(META)}
    with store.batch() as b:
        b.delete(META, "owner")
    assert get_meta(store, "owner") is None


def test_exact_index_is_scoped(store):
    with store.batch() as b:
        index_exact(b, "", "abc", "00000000000000aa")
    assert find_exact(store, "", "abc") == "00000000000000aa"
    assert find_exact(store, "tenant-b", "abc") is None
    with store.batch() as b:
        unindex_exact(b, "", "abc")
    assert find_exact(store, "", "abc") is None


def test_claim_exact_is_insert_if_absent(store):
    assert claim_exact(store, "", "abc", "00000000000000aa") is None
    assert claim_exact(store, "", "abc", "00000000000000bb") == "00000000000000aa"
    assert find_exact(store, "", "abc") == "00000000000000aa"
    assert claim_exact(store, "other", "abc", "00000000000000bb") is None


def test_raw_hashes_minhashes_and_texts(store):
    with store.batch() as b:
        index_raw(b, "r1", "http://h/a")
        put_minhash(b, "http://h/a", b"\x01\x02\x03\x04")
        put_text(b, "http://h/a", "Grüße \ud800 and more")
    assert find_raw(store, "r1") == "http://h/a"
    assert find_raw(store, "r2") is None
    assert get_minhash(store, "http://h/a") == b"\x01\x02\x03\x04"
    assert get_text(store, "http://h/a") == "Grüße \ud800 and more"
    with store.batch() as b:
        b.delete("minhash", "http://h/a")
        b.delete("text", "http://h/a")
    assert get_minhash(store, "http://h/a") is None
    assert get_text(store, "http://h/a") is None


def test_simhash_candidates_share_a_block(store):
    fp = 0x1234_5678_9ABC_DEF0
    with store.batch() as b:
        b.index_near("", fp, bands(1), AA)
    near = fp ^ 0b111  # 3 bits flipped in block 0: blocks 1..3 still shared
    far = fp ^ 0x0001_0001_0001_0001  # one bit in every block: no block shared
    assert store.near_candidates("", near, ()).simhash == [(fp, "00000000000000aa")]
    assert store.near_candidates("", near, (), max_distance=2).simhash == []
    assert store.near_candidates("", near, (), max_distance=3).simhash == [(fp, "00000000000000aa")]
    assert store.near_candidates("", far, ()).simhash == []
    assert store.near_candidates("other", near, ()).simhash == []
    assert len(simhash_blocks(fp)) == 4


def test_an_entry_removed_and_added_again_is_found(store):
    entry = bands(1, {0: 11})
    with store.batch() as b:
        b.index_near("", 7, entry, AA)
    with store.batch() as b:
        b.unindex_near("", 7, entry, AA)
    assert store.near_candidates("", 7, ()).simhash == []
    assert store.near_candidates("", None, bands(2, {0: 11})).bands == set()
    with store.batch() as b:
        b.index_near("", 7, entry, AA)
    assert store.near_candidates("", 7, ()).simhash == [(7, AA)]
    assert store.near_candidates("", None, bands(2, {0: 11})).bands == {AA}


def test_removed_then_added_in_one_batch_stays(store):
    entry = bands(1)
    with store.batch() as b:
        b.index_near("", 7, entry, AA)
    with store.batch() as b:
        b.unindex_near("", 7, entry, AA)
        b.index_near("", 7, entry, AA)
    assert store.near_candidates("", 7, ()).simhash == [(7, AA)]
    assert store.near_candidates("", None, entry).bands == {AA}


def test_near_candidates_answer_both_indexes_in_one_call(store):
    with store.batch() as b:
        b.index_near("", 7, bands(1, {0: 11}), AA)
        b.index_near("", 7 ^ 0x0001_0001_0001_0001, bands(2, {5: 55}), BB)  # no block shared
    found = store.near_candidates("", 7, bands(3, {5: 55}), max_distance=3)
    assert (found.simhash, found.bands) == ([(7, AA)], {BB})
    nothing = store.near_candidates("", None, ())
    assert (nothing.simhash, nothing.bands) == ([], set())


def test_band_candidates_and_unindex(store):
    a, b_ = bands(1, {0: 11, 1: 22, 2: 33}), bands(2, {0: 11, 1: 99, 2: 98})
    with store.batch() as b:
        b.index_near("", 7, a, AA)
        b.index_near("", 9, b_, BB)
    assert store.near_candidates("", None, bands(3, {0: 11})).bands == {AA, BB}
    assert store.near_candidates("", None, bands(3, {1: 22})).bands == {AA}
    assert store.near_candidates("", None, bands(3, {0: 22})).bands == set()  # a hash counts in its own band only
    assert store.near_candidates("other", None, a).bands == set()
    assert store.near_candidates("", None, ()).bands == set()
    with store.batch() as b:
        b.unindex_near("", 7, a, AA)
    assert store.near_candidates("", None, a).bands == {BB}
    assert store.near_candidates("", 7, ()).simhash == [(9, BB)]


def test_a_wrong_number_of_bands_is_refused(store):
    with pytest.raises(ValueError, match="band hashes"):
        with store.batch() as b:
            b.index_near("", 7, (1, 2, 3), AA)


def test_clusters_and_members(store):
    cluster = Cluster("00000000000000aa", "http://h/a", "http://h/a", 100, 1)
    with store.batch() as b:
        put_cluster(b, cluster)
        add_member(b, cluster.cluster_id, "http://h/b")
        add_member(b, cluster.cluster_id, "http://h/a")
    assert get_cluster(store, cluster.cluster_id) == cluster
    assert sorted(members_of(store, cluster.cluster_id)) == ["http://h/a", "http://h/b"]
    assert [c.cluster_id for c in iter_clusters(store)] == [cluster.cluster_id]
    with store.batch() as b:
        remove_member(b, cluster.cluster_id, "http://h/a")
        b.delete("cluster", cluster.cluster_id)
    assert members_of(store, cluster.cluster_id) == ["http://h/b"]
    assert list(iter_clusters(store)) == []


def test_other_parameters_are_refused(backend, store_path):
    backend(store_path, PARAMS).close()
    with pytest.raises(IncompatibleStore, match="max_distance: store has 3, this crawl uses 2"):
        backend(store_path, {**PARAMS, "max_distance": 2})


def test_open_existing_reads_the_recorded_parameters(backend, store_path):
    with backend(store_path, PARAMS) as s:
        with s.batch() as b:
            b.put_url(UrlRecord(key="k", url="u"))
    with backend.open_existing(store_path) as s:
        assert s.params["max_distance"] == 3
        assert get_url(s, "k").url == "u"


def test_open_existing_needs_a_store(backend, tmp_path):
    with pytest.raises(StoreError, match="no dedup store"):
        backend.open_existing(str(tmp_path / "nothing"))


def test_pending_requests_are_owed_until_settled_and_survive_a_reopen(backend, store_path):
    with backend(store_path, PARAMS) as s:
        assert s.count("pending") == 0 and list(s.scan("pending")) == []
        with s.batch() as b:
            put_pending(b, "http://h/a", b"request a")
            put_pending(b, "http://h/b", b"request b")
        assert has_pending(s, "http://h/a") and not has_pending(s, "http://h/c")
        with s.batch() as b:
            settle_pending(b, "http://h/a")
            settle_pending(b, "http://h/never-owed")  # settling twice, or what was never owed, is harmless
    with backend(store_path, PARAMS) as s:
        assert dict(s.scan("pending")) == {"http://h/b": b"request b"}
        assert s.count("pending") == 1


def test_a_batch_that_fails_owes_nothing(store):
    with pytest.raises(RuntimeError):
        with store.batch() as b:
            put_pending(b, "http://h/a", b"request a")
            raise RuntimeError("crash before the batch is applied")
    assert not has_pending(store, "http://h/a")


def test_iterating_pending_requests_while_settling_them(store):
    with store.batch() as b:
        for i in range(50):
            put_pending(b, f"http://h/{i}", b"r")
    seen = []
    for pending_id, _ in store.scan("pending"):
        seen.append(pending_id)
        with store.batch() as b:
            settle_pending(b, pending_id)
            put_pending(b, pending_id + "/child", b"r")
    assert len(seen) >= 50 and store.count("pending") == 50


def test_get_many_reads_keys_in_their_order(store):
    """One call reads many keys of a table (on a cluster, keys of many slots), absent ones as
    None, and sees this process's writes, those sent later included."""
    from scrapy_dedup.store.base import MINHASH, TEXT

    keys = [f"http://h{n % 7}/p{n}" for n in range(40)]
    with store.batch(later=True) as b:
        for n, key in enumerate(keys):
            if n % 3:
                b.put(MINHASH, key, bytes([n]) * 4)
                b.put(TEXT, key, f"text {n}".encode())
    wanted = [*reversed(keys), "http://h/never"]
    assert store.get_many(MINHASH, wanted) == [store.get(MINHASH, key) for key in wanted]
    assert store.get_many(MINHASH, wanted)[:3] == [None, bytes([38]) * 4, bytes([37]) * 4]
    assert store.get_many(TEXT, keys[:2]) == [None, b"text 1"]
    assert store.get_many(TEXT, []) == []


def test_set_members_many_reads_sets_in_their_order(store):
    """One call reads many owned sets (on a cluster, of many slots): what ``set_members`` reads
    of each, an owner with no set as an empty list."""
    from scrapy_dedup.store.base import MEMBERS
    from scrapy_dedup.store.records import set_members

    owners = [f"{n:016x}" for n in range(30)]
    with store.batch() as b:
        for n, owner in enumerate(owners):
            for m in range(n % 4):
                b.add_to_set(MEMBERS, owner, f"http://h{n}/m{m}", bytes([m]))
    wanted = [*reversed(owners), "ffffffffffffffff"]
    found = store.set_members_many(MEMBERS, wanted)
    assert [sorted(pairs) for pairs in found] == [sorted(set_members(store, MEMBERS, o)) for o in wanted]
    assert sorted(found[0]) == [("http://h29/m0", b"\x00")] and found[-1] == [] and found[-2] == []
    assert store.set_members_many(MEMBERS, []) == []


# -- the chunk layer's tables (DEDUP_CHUNKS) --------------------------------------------------


def test_chunk_tables_round_trip_and_scan(store):
    from scrapy_dedup.store.base import BOILERPLATE, BOILERPLATE_GROUP, CHUNK_EXACT, CHUNK_PRINT, CHUNKS

    rows = {
        CHUNKS: ("http://h/a", b'{"chunks":[]}'),
        CHUNK_EXACT: ("00ff:" + "1" * 32, b"http://h/a\0abcd"),
        CHUNK_PRINT: ("http://h/a\0abcd", b"\x01\x02"),
        BOILERPLATE: ("h\0" + "2" * 16, b'{"pages":3}'),
        BOILERPLATE_GROUP: ("h", b'{"pages":4}'),
    }
    with store.batch() as b:
        for table, (key, value) in rows.items():
            b.put(table, key, value)
    for table, (key, value) in rows.items():
        assert store.get(table, key) == value
        assert list(store.scan(table)) == [(key, value)]
    # tables are apart from each other and from the page tables
    assert get_url(store, "http://h/a") is None
    with store.batch() as b:
        b.delete(CHUNKS, "http://h/a")
    assert store.get(CHUNKS, "http://h/a") is None and store.get(CHUNK_PRINT, "http://h/a\0abcd") == b"\x01\x02"


def test_chunk_exact_claims_are_insert_if_absent(store):
    from scrapy_dedup.store.base import CHUNK_EXACT

    assert store.put_if_absent(CHUNK_EXACT, "s:h", b"http://h/a\0c1") is None
    assert store.put_if_absent(CHUNK_EXACT, "s:h", b"http://h/b\0c2") == b"http://h/a\0c1"
    assert store.get(CHUNK_EXACT, "s:h") == b"http://h/a\0c1"


def test_chunk_bands_are_a_table_of_their_own(store):
    from scrapy_dedup.store.base import CHUNK_BANDS, EXACT

    with store.batch() as b:
        b.put(CHUNK_BANDS, "s:0:ff", b'[[1,"http://h/a\\u0000c1"]]')
    assert store.get(CHUNK_BANDS, "s:0:ff") == b'[[1,"http://h/a\\u0000c1"]]'
    assert store.get(EXACT, "s:0:ff") is None
    assert [k for k, _ in store.scan(CHUNK_BANDS)] == ["s:0:ff"]


#: the typed reads that were DedupStore methods: each old name, with arguments to call it with
C1, R1 = "c1" * 16, "e1" * 16  # content hashes: 32 hex digits
OLD_READS = {
    "get_url": ("http://h/a",), "iter_urls": (), "get_variant": ("http://h/a?x",), "iter_variants": (),
    "iter_aliases_of": ("http://h/a",), "has_pending": ("http://h/a",), "get_emitted": ("http://h/a",),
    "find_exact": ("s", C1), "claim_exact": ("s", C1, BB), "find_raw": (R1,),
    "get_minhash": ("http://h/a",), "get_text": ("http://h/a",), "get_cluster": (AA,),
    "members_of": (AA,), "iter_clusters": (), "frontier_size": (), "pending_count": (),
    "simhash_candidates": ("s", 7, 3), "band_candidates": ("s", bands(2, {0: 11})), "get_meta": ("run",),
    "scannable": ("url",), "set_members": ("aliases", "http://h/a"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OLD_READS))
def test_an_old_read_method_warns_and_reads_what_its_function_reads(store, name):
    from scrapy_dedup.store import records

    store.begin_run()
    frontier_mark(store, "http://h/a", 1, "http://h/a")
    with store.batch() as b:
        b.put_url(UrlRecord(key="http://h/a", url="http://h/a", status="new", cluster_id=AA))
        b.count_variant("http://h/a?x", "http://h/a", 1.0)
        put_pending(b, "http://h/a", b"request")
        put_emitted(b, "http://h/a", C1)
        index_exact(b, "s", C1, AA)
        index_raw(b, R1, "http://h/a")
        put_minhash(b, "http://h/a", b"\x01\x02")
        put_text(b, "http://h/a", "text")
        put_cluster(b, Cluster(AA, "http://h/a", "http://h/a", rep_text_length=4, rep_first_run=1))
        b.index_near("s", 7, bands(1, {0: 11}), AA)
    function = getattr(records, name)
    args = OLD_READS[name]
    message = rf"^DedupStore\.{name} is deprecated: call scrapy_dedup\.store\.records\.{name}\(store, \.\.\.\)$"
    with pytest.warns(DeprecationWarning, match=message):
        old = getattr(store, name)(*args)
    with pytest.warns(DeprecationWarning, match=message):
        unbound = getattr(type(store), name)
    assert unbound is function
    new = function(store, *args)
    if name.startswith("iter_") or name == "simhash_candidates":
        old, new = list(old), list(new)
    assert old == new and new not in (None, [], False)


CL = Cluster(AA, "http://h/a", "http://h/a", rep_text_length=4, rep_first_run=1)
#: the typed writes that were StoreBatch methods: each old name, its arguments, and what reads it back
OLD_WRITES = {
    "put_alias": (("http://h/a", "http://h/b", "redirect"),
                  lambda s: list(iter_aliases_of(s, "http://h/a")) == [("http://h/b", "redirect")]),
    "put_cluster": ((CL,), lambda s: get_cluster(s, AA) == CL),
    "add_member": ((AA, "http://h/n"), lambda s: members_of(s, AA) == ["http://h/m", "http://h/n"]),
    "remove_member": ((AA, "http://h/m"), lambda s: members_of(s, AA) == []),
    "index_exact": (("s", "c2" * 16, BB), lambda s: find_exact(s, "s", "c2" * 16) == BB),
    "unindex_exact": (("s", C1), lambda s: find_exact(s, "s", C1) is None),
    "index_raw": ((R1, "http://h/a"), lambda s: find_raw(s, R1) == "http://h/a"),
    "put_minhash": (("http://h/a", b"\x01\x02"), lambda s: get_minhash(s, "http://h/a") == b"\x01\x02"),
    "put_text": (("http://h/a", "text"), lambda s: get_text(s, "http://h/a") == "text"),
    "put_pending": (("http://h/q", b"request"), lambda s: has_pending(s, "http://h/q")),
    "settle_pending": (("http://h/p",), lambda s: not has_pending(s, "http://h/p")),
    "put_emitted": (("http://h/a", C1), lambda s: get_emitted(s, "http://h/a") == C1),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OLD_WRITES))
def test_an_old_batch_write_warns_and_writes_what_its_function_writes(store, name):
    from scrapy_dedup.store import records

    store.begin_run()
    with store.batch() as b:  # what the removals remove
        records.add_member(b, AA, "http://h/m")
        records.index_exact(b, "s", C1, AA)
        records.put_pending(b, "http://h/p", b"request")
    args, read_back = OLD_WRITES[name]
    message = rf"^StoreBatch\.{name} is deprecated: call scrapy_dedup\.store\.records\.{name}\(batch, \.\.\.\)$"
    with store.batch() as b, pytest.warns(DeprecationWarning, match=message):
        getattr(b, name)(*args)
    assert read_back(store)
    with pytest.warns(DeprecationWarning, match=message):
        assert getattr(StoreBatch, name) is getattr(records, name)


def test_pending_held_and_maybe_elsewhere_are_functions_and_the_old_names_warn(store):
    from scrapy_dedup.store import records

    store.begin_run()
    with store.batch() as b:
        put_pending(b, "http://h/a", b"request")
    store.hold_pending("http://h/a")
    # one process holds every request owed: none is held elsewhere
    assert store.count("pending") == 1 and records.pending_held_elsewhere(store) == 0
    message = r"^DedupStore\.pending_held_elsewhere is deprecated: call scrapy_dedup\.store\.records\.pending_held_elsewhere\(store, \.\.\.\)$"
    with pytest.warns(DeprecationWarning, match=message):
        assert store.pending_held_elsewhere() == 0
    # a queue several processes share may hand any of them to another: a shared store cannot tell which
    assert records.maybe_elsewhere(store, {"http://h/a"}) == ({"http://h/a"} if store.shared else set())
    message = r"^DedupStore\.maybe_elsewhere is deprecated: call scrapy_dedup\.store\.records\.maybe_elsewhere\(store, \.\.\.\)$"
    with pytest.warns(DeprecationWarning, match=message):
        assert store.maybe_elsewhere({"http://h/a"}) == records.maybe_elsewhere(store, {"http://h/a"})


def test_put_meta_if_absent_is_a_function_and_the_old_name_warns(store):
    from scrapy_dedup.store import records

    assert records.put_meta_if_absent(store, "owner", {"a": 1}) is None
    message = r"^DedupStore\.put_meta_if_absent is deprecated: call scrapy_dedup\.store\.records\.put_meta_if_absent\(store, \.\.\.\)$"
    with pytest.warns(DeprecationWarning, match=message):
        assert store.put_meta_if_absent("owner", {"b": 2}) == {"a": 1}
    assert get_meta(store, "owner") == {"a": 1}
    # get_meta and put_meta were methods too
    message = r"^DedupStore\.put_meta is deprecated: call scrapy_dedup\.store\.records\.put_meta\(store, \.\.\.\)$"
    with pytest.warns(DeprecationWarning, match=message):
        assert store.put_meta("owner", {"b": 2}, if_absent=True) == {"a": 1}
    with pytest.warns(DeprecationWarning, match=message):
        assert store.put_meta("owner", {"c": 3}) is None
    assert get_meta(store, "owner") == {"c": 3}


def test_frontier_mark_many_marks_and_owes_each_entry_in_order(store):
    from scrapy_dedup.store.base import OweOffer

    store.begin_run()
    offer, again = OweOffer("http://h/a", b"request a"), OweOffer("http://h/a2", b"request a again")
    answers = store.frontier_mark_many(
        1, [("http://h/a", "http://h/a", offer), ("http://h/b", "http://h/b", None), ("http://h/a", "http://h/a?x", again)]
    )
    assert answers == [None, None, (1, "http://h/a")]
    assert offer.owed and not again.owed  # the second mark of a key finds it: nothing more is owed
    assert has_pending(store, "http://h/a") and not has_pending(store, "http://h/a2")
    assert store.frontier_mark_many(1, []) == []
    # every entry with an offer (one round trip on a Redis server)
    c, c2, d = OweOffer("http://h/c", b"c"), OweOffer("http://h/c2", b"c2"), OweOffer("http://h/d", b"d")
    answers = store.frontier_mark_many(
        2, [("http://h/c", "http://h/c", c), ("http://h/c", "http://h/c#x", c2), ("http://h/d", "http://h/d", d)]
    )
    assert answers == [None, (2, "http://h/c"), None]
    assert c.owed and not c2.owed and d.owed and has_pending(store, "http://h/d")


def test_frontier_mark_is_a_function_and_the_old_name_warns(store):
    from scrapy_dedup.store import records

    assert records.frontier_mark(store, "http://h/a", 1, "http://h/a") is None
    message = r"^DedupStore\.frontier_mark is deprecated: call scrapy_dedup\.store\.records\.frontier_mark\(store, \.\.\.\)$"
    with pytest.warns(DeprecationWarning, match=message):
        assert store.frontier_mark("http://h/a", 2, "http://h/a?x") == (1, "http://h/a")
    assert records.frontier_mark(store, "http://h/a", 2, "http://h/a") == (2, "http://h/a")
