"""The Redis backend beyond the contract suite (which runs it in tests/test_store_contract.py):
a cluster batch left half-applied by a holder that died is finished when the holder is recovered;
reports stream; passwords stay out of messages."""

from __future__ import annotations

import json
import random
import time

import pytest
import redis

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.store.base import EXACT, PENDING, STORE_FORMAT, IncompatibleStore, StoreError
from scrapy_dedup.store.records import (
    claim_exact,
    find_exact,
    frontier_mark,
    get_emitted,
    get_minhash,
    get_url,
    index_exact,
    iter_urls,
    put_emitted,
    put_meta,
    put_minhash,
    put_pending,
    settle_pending,
)
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.store import RedisStore, _encode_commands

PARAMS = {"fingerprint": {"version": 1}, "max_distance": 3}


def _dead_holder(store: RedisStore, holder: str) -> None:
    """``holder`` entered in the store's holders, its heartbeat deadline long past."""
    store.client.hset(store._holders_key(), holder, "1 0")


def test_a_half_applied_cluster_batch_is_applied_whole_when_its_holder_is_recovered(redis_cluster, redis_prefix):
    store = RedisStore(redis_cluster.url, PARAMS, prefix=redis_prefix)
    records = [UrlRecord(key=f"http://h/{i}", url=f"http://h/{i}") for i in range(20)]
    batch_commands = []
    with store.batch() as b:
        for r in records:
            b.put_url(r)
        batch_commands = list(b.commands)
        b.commands.clear()  # nothing applied: as if the writer died right after journalling
    _dead_holder(store, "dead")
    store.client.hset(store._journal_key(), "dead:1", b"dead\n" + _encode_commands(batch_commands))
    store._apply_by_slot(batch_commands[:7])  # ... and after applying a few slots
    assert sum(get_url(store, r.key) is not None for r in records) < 20
    store.close()
    other = RedisStore(redis_cluster.url, PARAMS, prefix=redis_prefix)
    assert list(other.claim_pending()) == []
    assert all(get_url(other, r.key) == r for r in records)
    assert other.client.hlen(other._journal_key()) == 0
    assert not other.client.hexists(other._holders_key(), "dead")  # recovered, then forgotten
    other.close()


def test_a_live_holder_s_journal_entry_is_left_to_it(redis_cluster, redis_prefix):
    live = RedisStore(redis_cluster.url, PARAMS, prefix=redis_prefix)
    holder = live._holder()
    live.client.hset(live._journal_key(), f"{holder}:1", holder.encode() + b"\n" + _encode_commands([]))
    other = RedisStore(redis_cluster.url, PARAMS, prefix=redis_prefix)
    _dead_holder(other, "dead")  # a recovery runs, for another holder
    assert list(other.claim_pending()) == []
    assert other.client.hexists(other._journal_key(), f"{holder}:1")
    live.close()
    other.close()


def test_other_parameters_are_refused_with_the_password_hidden(tmp_path):
    from redis_servers import RedisServer

    with RedisServer(tmp_path / "auth", extra=("--requirepass", "pw-123")) as server:
        url = f"redis://:pw-123@127.0.0.1:{server.port}/0"
        RedisStore(url, PARAMS, prefix="crawl").close()
        with pytest.raises(IncompatibleStore) as info:
            RedisStore(url, {**PARAMS, "max_distance": 2}, prefix="crawl")
        assert "max_distance: store has 3, this crawl uses 2" in str(info.value)
        assert "pw-123" not in str(info.value) and ":***@" in str(info.value)


def test_open_existing_needs_a_store_under_the_prefix(redis_url, redis_prefix):
    with pytest.raises(StoreError, match="no dedup store"):
        RedisStore.open_existing(redis_url, prefix=redis_prefix)


def test_prefixes_keep_crawls_apart(redis_url, redis_prefix):
    a = RedisStore(redis_url, PARAMS, prefix=redis_prefix + ":a")
    b = RedisStore(redis_url, {**PARAMS, "max_distance": 5}, prefix=redis_prefix + ":b")
    assert frontier_mark(a, "http://h/x", 1, "http://h/x") is None
    assert frontier_mark(b, "http://h/x", 1, "http://h/x") is None
    assert a.begin_run() == 1 and b.begin_run() == 1 and a.begin_run() == 2


def test_first_urls_of_recorded_keys_are_dropped_from_the_frontier(redis_url, redis_prefix):
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    assert frontier_mark(store, "http://h/a", 1, "http://h/a/") is None
    with store.batch() as b:
        b.put_url(UrlRecord(key="http://h/a", url="http://h/a/"))
    assert store.client.hlen(store._first_urls_key(rk.frontier_slot(store.prefix, "http://h/a")[0])) == 0
    assert frontier_mark(store, "http://h/a", 2, "http://h/a?x") == (1, "http://h/a/")


def test_scan_streams_a_large_table(redis_url, redis_prefix):
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    with store.batch() as b:
        for i in range(3000):
            b.put_url(UrlRecord(key=f"http://h/{i}", url=f"http://h/{i}"))
    seen = {r.key for r in iter_urls(store)}
    assert len(seen) == 3000
    assert seen == {f"http://h/{i}" for i in range(3000)}


def test_small_tables_keep_digests_in_compact_hashes(redis_single, redis_prefix):
    store = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    with store.batch() as b:
        for i in range(500):
            index_exact(b, "", f"{i:032x}", f"{i:016x}")
            put_emitted(b, f"http://h/{i}", f"{i:032x}")
    assert find_exact(store, "", f"{7:032x}") == f"{7:016x}" and get_emitted(store, "http://h/7") == f"{7:032x}"
    assert claim_exact(store, "", f"{7:032x}", "ab" * 8) == f"{7:016x}"
    shards = list(store.client.scan_iter(match=f"{redis_prefix}:t:exact:*", count=1000))
    assert len(shards) > 480  # 500 entries over 16,384 shards: nearly one each
    for key in shards[:50]:
        assert store.client.object("encoding", key) == b"listpack"
        assert {(len(f), len(v)) for f, v in store.client.hgetall(key).items()} == {(12, 8)}
    # a digest is no key: the table cannot be listed, and says so
    assert EXACT in store.unscannable and "url" not in store.unscannable and "pending" not in store.unscannable
    with pytest.raises(StoreError, match="digests of its keys: it is not scanned"):
        list(store.scan(EXACT))
    with pytest.raises(ValueError, match="a cluster id is 16 lowercase hex digits"):
        with store.batch() as b:
            index_exact(b, "", "0" * 32, "not-an-id")
    with pytest.raises(ValueError, match="a content hash is 32 lowercase hex digits"):
        with store.batch() as b:
            put_emitted(b, "http://h/x", "ABC")
    assert get_emitted(store, "http://h/x") is None and find_exact(store, "", "0" * 32) == f"{0:016x}"


def test_minhash_signatures_are_packed_several_to_a_field(redis_url, redis_prefix):
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    rng = random.Random(3)
    signatures = {f"http://h/{i}": rng.randbytes(256) for i in range(2000)}
    signatures["http://h/short"] = b"x"
    with store.batch() as b:
        for key, signature in signatures.items():
            put_minhash(b, key, signature)
    assert [key for key, signature in signatures.items() if get_minhash(store, key) != signature] == []
    assert get_minhash(store, "http://h/never") is None
    # replaced in place, taken out, and the others stay
    with store.batch() as b:
        put_minhash(b, "http://h/5", b"new" * 90)
        for i in range(0, 2000, 2):
            b.delete("minhash", f"http://h/{i}")
    assert get_minhash(store, "http://h/5") == b"new" * 90
    assert all(get_minhash(store, f"http://h/{i}") is None for i in range(0, 2000, 2))
    assert all(get_minhash(store, f"http://h/{i}") == signatures[f"http://h/{i}"] for i in range(7, 2000, 2))
    shards = list(store.client.scan_iter(match=f"{redis_prefix}:t:minhash:*", count=1000))
    fields = [store.client.hlen(key) for key in shards]
    assert len(shards) <= rk.TABLE_SHARDS and max(fields) <= rk.PACKED_FIELDS
    assert sum(fields) < 1002  # 1,001 records left, several to a field
    with pytest.raises(ValueError, match="packs the records of the minhash table"):
        store.put_if_absent("minhash", "http://h/7", b"x")
    store.close()


def test_a_packed_record_is_found_only_where_it_starts(redis_url, redis_prefix):
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    shard, fn = rk.table_shard(redis_prefix, "minhash", 0), store.client.fcall
    first, second = b"A" * 12, b"B" * 12
    # the first record's value holds the second's digest, across its head too
    assert fn("sdd_packed_put", 1, shard, b"\x00", first, b"x" + second + b"y") == 1
    assert fn("sdd_packed_get", 1, shard, b"\x00", second) is None
    assert fn("sdd_packed_delete", 1, shard, b"\x00", second) == 0
    assert fn("sdd_packed_put", 1, shard, b"\x00", second, b"") == 1  # an empty value is a value
    assert fn("sdd_packed_put", 1, shard, b"\x00", first, second) == 1  # replaced: shorter
    assert (fn("sdd_packed_get", 1, shard, b"\x00", first), fn("sdd_packed_get", 1, shard, b"\x00", second)) == (second, b"")
    assert fn("sdd_packed_delete", 1, shard, b"\x00", first) == 1
    assert fn("sdd_packed_get", 1, shard, b"\x00", second) == b""
    assert fn("sdd_packed_delete", 1, shard, b"\x00", second) == 1
    assert store.client.exists(shard) == 0  # the last record out: the field and the shard go
    with pytest.raises(redis.ResponseError, match="1-byte field and a 12-byte digest"):
        fn("sdd_packed_get", 1, shard, b"\x00", b"short")
    with pytest.raises(redis.ResponseError, match="at most 65,535 bytes"):
        fn("sdd_packed_put", 1, shard, b"\x00", first, b"x" * 65536)
    store.close()


def test_processes_alive_together_share_one_run(redis_url, redis_prefix):
    first = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    second = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    assert first.begin_run() == 1
    assert second.begin_run() == 1  # joins the run in progress
    assert frontier_mark(first, "http://h/a", first.run, "http://h/a") is None
    assert frontier_mark(second, "http://h/a", second.run, "http://h/a") == (1, "http://h/a")
    first.close()
    late = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    assert late.begin_run() == 1  # second is still in it
    second.close()
    late.close()
    after = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    assert after.begin_run() == 2  # every process had left: the next crawl is the next run
    after.close()


def _fcalls(client) -> int:
    from scrapy_dedup.store.redis.functions import primaries

    return sum(int(node.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)) for node in primaries(client))


def test_a_heartbeat_costs_one_call_for_three_owed_requests_or_three_thousand(redis_url, redis_prefix):
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    store.begin_run()  # its own heartbeats come every 10 s: none during this test
    calls = []
    for owed in (3, 3000):
        with store.batch() as batch:
            for i in range(owed - len(store.held_pending())):
                put_pending(batch, f"https://h/{owed}/{i}", b"request")
        assert len(store.held_pending()) == owed
        before = _fcalls(store.client)
        store._beat()
        calls.append(_fcalls(store.client) - before)
    assert calls[0] == calls[1] == 1
    store.close()


def test_requests_outlive_the_lease_while_their_holder_lives(redis_url, redis_prefix):
    holder = RedisStore(redis_url, PARAMS, prefix=redis_prefix, lease_ms=1000)
    holder.begin_run()  # its heartbeat: every third of a second
    with holder.batch() as batch:
        for i in range(50):
            put_pending(batch, f"https://h/{i}", b"request")
    other = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    other.begin_run()
    time.sleep(1.3)  # past a lease
    assert list(other.claim_pending()) == []
    holder.close()  # its heartbeat stops: it is recovered at once
    assert len(list(other.claim_pending())) == 50
    other.close()


def test_a_lost_connection_is_retried_then_stops_with_one_error(tmp_path):
    from redis_servers import RedisServer

    from scrapy_dedup.store.redis.functions import RetryPolicy, StoreConnectionLost

    server = RedisServer(tmp_path / "goes-away", extra=("--requirepass", "pw-9")).start()
    url = f"redis://:pw-9@127.0.0.1:{server.port}/0"
    store = RedisStore(url, PARAMS, prefix="crawl", retry=RetryPolicy(retries=3, backoff_base=0.05, backoff_cap=0.2))
    assert frontier_mark(store, "http://h/a", 1, "http://h/a") is None
    server.stop()
    started = time.monotonic()
    with pytest.raises(StoreConnectionLost) as info:
        frontier_mark(store, "http://h/b", 1, "http://h/b")
    message = str(info.value)
    assert "3 retries" in message and "pw-9" not in message and ":***@" in message
    assert "\n" not in message
    assert 0.05 < time.monotonic() - started < 20


def test_a_connection_lost_for_good_fails_every_later_call_at_once(tmp_path):
    """Once the retries have run out the crawl stops: what it still asks the store while it
    closes (a page in the pipeline, a link, its close) fails at once, instead of waiting through
    the retries again. Before, a crawl at 16 concurrent requests took 5 minutes to close after
    the line that stopped it (each item in flight about 13 s of backoff on the reactor)."""
    from redis_servers import RedisServer

    from scrapy_dedup.store.redis.functions import RetryPolicy, StoreConnectionLost

    server = RedisServer(tmp_path / "goes-away").start()
    store = RedisStore(server.url, PARAMS, prefix="crawl", retry=RetryPolicy(retries=3, backoff_base=0.3))
    store.begin_run()  # a holder with its heartbeat, as a crawl is
    assert frontier_mark(store, "http://h/a", 1, "http://h/a") is None
    server.stop()
    with pytest.raises(StoreConnectionLost) as first:
        get_url(store, "http://h/a")
    for call in (lambda: get_url(store, "http://h/a"), lambda: frontier_mark(store, "http://h/b", 1, "http://h/b"),
                 lambda: store.count(PENDING)):
        started = time.monotonic()
        with pytest.raises(StoreConnectionLost) as later:
            call()
        assert time.monotonic() - started < 0.5  # the retries' backoff alone is 0.3 + 0.6 + 1.2 s
        assert str(later.value) == str(first.value)
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 1


def test_a_lost_cluster_is_retried_then_stops_with_one_error(tmp_path):
    # every master gone: the cluster client's own errors (no node reachable, a slot without
    # its master) stop the crawl as a lost connection does, not as one page's failure
    from redis_servers import RedisCluster

    from scrapy_dedup.store.redis.functions import RetryPolicy, StoreConnectionLost

    cluster = RedisCluster(tmp_path / "goes-away").start()
    try:
        store = RedisStore(cluster.url, PARAMS, prefix="crawl",
                           retry=RetryPolicy(retries=3, backoff_base=0.05, backoff_cap=0.2))
        assert frontier_mark(store, "http://h/a", 1, "http://h/a") is None
    finally:
        cluster.stop()

    def write() -> None:
        with store.batch() as batch:
            batch.put_url(UrlRecord(key="http://h/c", url="http://h/c"))

    started = time.monotonic()
    for call in (lambda: frontier_mark(store, "http://h/b", 1, "http://h/b"), lambda: get_url(store, "http://h/a"), write):
        with pytest.raises(StoreConnectionLost) as info:
            call()
        message = str(info.value)
        assert "lost the connection to the Redis store at redis://127.0.0.1:" in message
        assert "\n" not in message
    store.close()  # cannot stop its heartbeat: it is dead within a lease all the same
    assert time.monotonic() - started < 60


def test_the_metadata_stays_in_its_hash(redis_url, redis_prefix):
    # the META table is the hash P:m:{P:m} (name -> JSON), where 0.2.0 kept the metadata
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    try:
        put_meta(store, "url_rules", {"b": 1, "a": 2})
        store.begin_run()
        meta = store.client.hgetall(f"{redis_prefix}:m:{{{redis_prefix}:m}}")
        assert meta[b"url_rules"] == b'{"a": 2, "b": 1}' and meta[b"run"] == b"1"
        assert json.loads(meta[b"params"]) == store.params
    finally:
        store.close()


def test_a_store_of_the_previous_key_layout_is_refused(redis_url, redis_prefix):
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    # as a store written by the previous version records itself (owed requests with lease
    # deadlines, decision locks that expire: the keys of one holder and heartbeat now)
    put_meta(store, "params", {**store.params, "simhash_layout": "redis-6"})
    store.close()
    with pytest.raises(IncompatibleStore) as info:
        RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    assert f"simhash_layout: store has 'redis-6', this crawl uses '{rk.LAYOUT}'" in str(info.value)
    assert rk.LAYOUT == "redis-7"
    with pytest.raises(StoreError, match="redis-7 layout"):
        RedisStore.open_existing(redis_url, prefix=redis_prefix)


def test_a_store_of_an_earlier_format_is_refused_with_what_to_do(redis_url, redis_prefix):
    # format 3 kept MinHash signatures of 4-byte slots: mixed with this version's they would
    # fail every comparison, and migrate converts LevelDB stores only
    store = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    put_meta(store, "params", {**store.params, "store_format": 3})
    store.close()
    for open_store in (lambda: RedisStore(redis_url, PARAMS, prefix=redis_prefix),
                       lambda: RedisStore.open_existing(redis_url, prefix=redis_prefix)):
        with pytest.raises(IncompatibleStore) as info:
            open_store()
        message = str(info.value)
        assert f"has store format 3; this version reads format {STORE_FORMAT}" in message
        assert f"under the key prefix {redis_prefix!r}" in message and "DEDUP_REDIS_PREFIX" in message


def test_a_url_an_earlier_run_owes_is_left_to_its_owed_copy(redis_url, redis_prefix):
    """A link met in a new run to a URL an earlier run owes and never recorded is dropped as
    seen: the owed copy, which the store issues to the process that claims it, fetches it."""
    from scrapy_dedup.decide.frontier import Frontier
    from scrapy_dedup.store.base import OweOffer

    owed, settled = "http://h/owed", "http://h/settled"
    first = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    run = first.begin_run()
    frontier = Frontier(first, run)
    for url in (owed, settled):
        offer = OweOffer(url, b"request")
        assert frontier.check(url, url, owe=offer) is None and offer.owed
    with first.batch() as batch:
        settle_pending(batch, settled)  # its outcome was recorded... without a URL record
    first.close()  # stops with `owed` still owed

    second = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    later = Frontier(second, second.begin_run())
    assert later.run == run + 1
    assert later.check(owed, owed) == "seen"
    assert later.check(settled, settled) is None  # nobody owes it: fetched again
    assert dict(second.claim_pending()).keys() == {owed}
    second.close()


def test_summary_says_the_crawl_runs_while_a_process_writes_the_store(redis_url, redis_prefix, tmp_path):
    """A Redis store has no lock a report could meet: the summary knows a crawl runs from the
    processes alive in it, and says so until the last one closes."""
    import subprocess
    import sys

    def frontier() -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "scrapy", "dedup", "summary", "--store", redis_url, "--redis-prefix", redis_prefix,
             "--format", "jsonl"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["frontier"]

    crawling = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    try:
        crawling.begin_run()
        assert frontier() == "running"
    finally:
        crawling.close()
    assert frontier() == "complete"
