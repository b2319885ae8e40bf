"""The server-side functions of the Redis store, on a real redis-server and a real 3-master
cluster: each atomic decision, the key layout's slots, connecting and failing to."""

from __future__ import annotations

import itertools
import multiprocessing
import random
import time

import pytest
import redis
from redis_calls import frontier_mark, frontier_mark_many, near_put, near_remove, near_scan

from scrapy_dedup.store.base import StoreError
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.functions import (
    LIBRARY_CODE,
    LIBRARY_VERSION,
    RetryPolicy,
    StoreFunctions,
    connect,
    is_cluster,
    primaries,
    redact,
)


@pytest.fixture
def fn(redis_url, redis_prefix):
    client = connect(redis_url)
    yield StoreFunctions(client, redis_prefix)
    client.close()


# -- connecting -------------------------------------------------------------------------------


def test_cluster_is_recognised_from_the_server(redis_single, redis_cluster):
    assert not is_cluster(connect(redis_single.url))
    client = connect(redis_cluster.url)
    assert is_cluster(client)
    assert len(primaries(client)) == 3


PACKED = [
    ("SET", "k\u00e9y", b"\x00\xff", 7, -1.5, 2**70, bytearray(b"ba"), memoryview(b"mv")),
    ("CONFIG GET", "maxmemory"),
    (b"CLIENT LIST",),
    ("FCALL", "sdd_near_open", 2, "p:o:{o}", "p:oh:{o}", 30000, b""),
]


@pytest.mark.parametrize("command", PACKED, ids=["arguments", "two-word", "two-word-bytes", "fcall"])
def test_the_store_packs_a_command_as_redis_py_does(command):
    from scrapy_dedup.store.redis.wire import HiredisPacker

    assert b"".join(HiredisPacker().pack(*command)) == b"".join(redis.Connection().pack_command(*command))


@pytest.mark.parametrize("value", [None, True, object()])
def test_the_store_refuses_what_redis_py_refuses(value):
    from scrapy_dedup.store.redis.wire import HiredisPacker

    with pytest.raises(redis.DataError):
        redis.Connection().pack_command("SET", "k", value)
    with pytest.raises(redis.DataError, match=r"cannot send .* to Redis \(in a SET command\)"):
        HiredisPacker().pack("SET", "k", value)


def test_every_node_of_a_store_client_packs_with_hiredis(redis_url, redis_prefix):
    from scrapy_dedup.store.redis.wire import HiredisPacker

    client = connect(redis_url)
    try:
        keys = [f"{redis_prefix}:{{{i}}}v" for i in range(12)]  # on every master of a cluster
        for key in keys:
            client.set(key, "d\u00e9j\u00e0 vu")
        assert [client.get(key) for key in keys] == ["d\u00e9j\u00e0 vu".encode()] * 12
        pools = [node.connection_pool for node in primaries(client)]
        assert all(isinstance(pool.connection_kwargs.get("command_packer"), HiredisPacker) for pool in pools)
    finally:
        client.close()


def test_unreachable_server_fails_in_one_line_without_the_password(redis_single):
    from redis_servers import free_port

    url = f"redis://crawler:s3cr%21t@127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        connect(url, retry=RetryPolicy(retries=1))
    message = str(info.value)
    assert "\n" not in message
    assert "s3cr" not in message and "***" in message
    assert f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in message
    assert time.monotonic() - started < 10


def test_wrong_password_is_refused_without_showing_it(tmp_path):
    from redis_servers import RedisServer

    with RedisServer(tmp_path / "auth", extra=("--requirepass", "right-one")) as server:
        with pytest.raises(StoreError) as info:
            connect(f"redis://:wrong-one@127.0.0.1:{server.port}/0")
        assert "wrong-one" not in str(info.value) and "right-one" not in str(info.value)
        client = connect(f"redis://:right-one@127.0.0.1:{server.port}/0")
        assert frontier_mark(StoreFunctions(client, "p"), "https://a.example/", 1) == 0


def test_a_server_that_evicts_any_key_when_full_is_refused(tmp_path):
    """allkeys-* eviction would drop the store's records without an error; noeviction refuses
    writes instead (the crawl stops and resumes, tests/test_redis_full.py)."""
    from redis_servers import RedisServer

    with RedisServer(tmp_path / "lru", extra=("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")) as server:
        with pytest.raises(StoreError) as info:
            connect(server.url)
        assert "maxmemory-policy allkeys-lru" in str(info.value) and "noeviction" in str(info.value)
        redis.Redis(port=server.port).config_set("maxmemory-policy", "noeviction")
        assert frontier_mark(StoreFunctions(connect(server.url), "p"), "https://a.example/", 1) == 0


def test_redact_hides_only_the_password():
    assert redact("redis://u:p@h:1/0") == "redis://u:***@h:1/0"
    assert redact("rediss://h:6380") == "rediss://h:6380"


def test_not_a_redis_url():
    with pytest.raises(StoreError, match="not a Redis URL"):
        connect("http://example.com/")


@pytest.mark.parametrize("query, hint", [("ssl_ca_certs=/etc/ssl/ca.pem", "rediss://"), ("sockettimeout=5", None)])
def test_a_query_option_the_connection_does_not_take_fails_in_one_line(redis_single, query, hint):
    """A TLS option on a redis:// URL (the s of rediss:// forgotten) or a misspelt option: redis-py
    raises a TypeError when it connects; the crawl and the commands say so in one line."""
    url = f"redis://:s3cret@127.0.0.1:{redis_single.port}/0?{query}"
    with pytest.raises(StoreError) as info:
        connect(url)
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message
    assert message.startswith(f"the Redis URL redis://:***@127.0.0.1:{redis_single.port}/0?{query} has a query option")
    assert repr(query.split("=")[0]) in message
    assert (hint in message) if hint else "rediss://" not in message


# -- the library ------------------------------------------------------------------------------


def test_library_is_loaded_on_every_master_and_reloaded_when_its_version_differs(redis_url):
    client = connect(redis_url)
    old = LIBRARY_CODE.replace(f"local LIBRARY_VERSION = {LIBRARY_VERSION}", "local LIBRARY_VERSION = 0")
    for node in primaries(client):
        node.function_load(old, replace=True)
        assert node.fcall_ro("sdd_version", 0) == 0
    StoreFunctions(client, "p")
    for node in primaries(client):
        assert node.fcall_ro("sdd_version", 0) == LIBRARY_VERSION


def test_a_newer_library_on_the_server_is_refused_and_kept(redis_url):
    """The library is the server's, whatever the prefix: a crawl of an older release refuses
    to replace the one a newer release loaded (it would break the crawls that run it)."""
    client = connect(redis_url)
    newer = LIBRARY_CODE.replace(f"local LIBRARY_VERSION = {LIBRARY_VERSION}", f"local LIBRARY_VERSION = {LIBRARY_VERSION + 1}")
    try:
        for node in primaries(client):
            node.function_load(newer, replace=True)
        with pytest.raises(StoreError, match=f"functions version {LIBRARY_VERSION + 1}, newer than this release's"):
            StoreFunctions(client, "p")
        for node in primaries(client):
            assert node.fcall_ro("sdd_version", 0) == LIBRARY_VERSION + 1
    finally:
        for node in primaries(client):
            node.function_load(LIBRARY_CODE, replace=True)


# -- frontier ---------------------------------------------------------------------------------


def test_frontier_mark_returns_the_previous_run(fn):
    url = "https://example.com/a"
    assert frontier_mark(fn, url, 1) == 0
    assert frontier_mark(fn, url, 1) == 1
    assert frontier_mark(fn, url, 3) == 1
    assert frontier_mark(fn, url, 3) == 3
    assert frontier_mark(fn, "https://example.com/b", 3) == 0
    assert fn.frontier_size() == 2


def test_frontier_mark_many_is_one_mark_per_key(fn):
    keys = [f"https://example.com/p{i}" for i in range(2000)]
    assert frontier_mark_many(fn, keys + keys[:10], 1) == [0] * 2000 + [1] * 10
    assert frontier_mark_many(fn, keys[:5], 2) == [1] * 5
    assert fn.frontier_size() == 2000


def test_frontier_rejects_a_run_it_cannot_store(fn):
    with pytest.raises(redis.ResponseError, match="run must be"):
        frontier_mark(fn, "https://example.com/", 70000)


def _mark_worker(url, prefix, keys, out):
    fn = StoreFunctions(connect(url), prefix)
    out.put([k for k, prev in zip(keys, frontier_mark_many(fn, keys, 1)) if prev == 0])


def test_frontier_mark_is_atomic_across_processes(redis_url, redis_prefix):
    keys = [f"https://example.com/shared/{i}" for i in range(3000)]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = []
    for seed in range(4):
        mine = keys[:]
        random.Random(seed).shuffle(mine)
        procs.append(ctx.Process(target=_mark_worker, args=(redis_url, redis_prefix, mine, out)))
    for p in procs:
        p.start()
    firsts = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    claimed = list(itertools.chain.from_iterable(firsts))
    assert sorted(claimed) == sorted(keys), "every URL is new to exactly one process"


# -- near-duplicate tables --------------------------------------------------------------------


def test_near_put_scan_remove(fn):
    fp = 0x0123_4567_89AB_CDEF
    a, b = b"A" * 8, b"B" * 8
    near_put(fn, "", fp, a)
    assert near_scan(fn, "", fp ^ 0b111, 3) == {(fp, a)}
    assert near_scan(fn, "", fp ^ 0b1111, 3) == set()  # distance 4
    near_put(fn, "", fp, a)  # entered once
    near_put(fn, "", fp ^ 1, b)
    assert near_scan(fn, "", fp, 0) == {(fp, a)}
    assert near_scan(fn, "", fp, 1) == {(fp, a), (fp ^ 1, b)}
    assert near_scan(fn, "other scope", fp, 3) == set()
    near_remove(fn, "", fp, a)
    near_remove(fn, "", fp ^ 1, b)
    assert near_scan(fn, "", fp, 3) == set()
    assert not fn.client.keys(f"{fn.prefix}:n:*")  # emptied buckets go


# -- holders: one id, one heartbeat -----------------------------------------------------------


def _holder_call(fn, name: str, *args):
    keys = [f"{fn.prefix}:h:{{{fn.prefix}:m}}", f"{fn.prefix}:m:{{{fn.prefix}:m}}"]
    keys = keys[:2] if name == "sdd_holder_enter" else keys[:1]
    return fn.client.fcall(name, len(keys), *keys, *args)


def test_a_holder_lives_while_it_beats_and_is_dead_for_good_after(fn):
    assert _holder_call(fn, "sdd_holder_enter", "p1", 150, "next") == [1, 1]
    assert _holder_call(fn, "sdd_holder_enter", "p2", 60_000, "next") == [1, 0]  # joins p1's run
    assert _holder_call(fn, "sdd_holder_beat", "p1", 150) == 1
    time.sleep(0.2)
    assert _holder_call(fn, "sdd_holder_beat", "p1", 150) == 0  # too late: dead
    assert _holder_call(fn, "sdd_holder_enter", "p1", 150, 0) == [-1, 0]  # and not let in again
    assert _holder_call(fn, "sdd_holder_beat", "p2", 0) == 1  # stops: dead at once
    assert _holder_call(fn, "sdd_holder_beat", "p2", 60_000) == 0
    assert _holder_call(fn, "sdd_holder_enter", "p3", 60_000, 0) == [0, 0]  # open, not crawling
    assert _holder_call(fn, "sdd_holder_enter", "p4", 60_000, "next") == [2, 1]  # nobody crawls


def test_a_claim_takes_every_entry_of_the_dead_holders_and_nothing_else(fn):
    shard = rk.pending_shard(fn.prefix, 0)
    ids = [f"r{i}" for i in range(1500)]  # past one HSCAN step: a claim walks the whole hash
    for i, rid in enumerate(ids):
        fn.client.hset(shard, rid, f"{('p1', 'p2', 'live')[i % 3]}\n{rid}".encode())
    taken = list(fn.claim(shard, "p9", ["p1", "p2"]))
    assert sorted(field.decode() for field, _ in taken) == sorted(ids[i] for i in range(1500) if i % 3 != 2)
    assert all(field == held for field, held in taken)
    assert list(fn.claim(shard, "p9", ["p1", "p2"])) == []  # claimed once
    values = fn.client.hgetall(shard)
    assert sum(v.startswith(b"p9\n") for v in values.values()) == 1000
    assert sum(v.startswith(b"live\n") for v in values.values()) == 500
    # dropped instead of taken (a dead holder's decision locks)
    assert len(list(fn.claim(shard, "", ["live"]))) == 500 and fn.client.hlen(shard) == 1000


def test_a_lock_is_released_by_its_holder_only(fn):
    lock, field = rk.decision_slot(fn.prefix, "http://h/a")
    assert fn.client.hsetnx(lock, field, b"p1\n1")
    assert not fn.client.hsetnx(lock, field, b"p2\n1")
    assert fn.client.fcall("sdd_release", 1, lock, field, b"p2\n1") == 0
    assert fn.client.fcall("sdd_release", 1, lock, field, b"p1\n1") == 1
    assert fn.client.hsetnx(lock, field, b"p2\n1")


# -- the slot layout --------------------------------------------------------------------------


def test_every_key_of_one_call_is_in_one_slot_and_the_tables_spread(redis_cluster):
    client = connect(redis_cluster.url)
    slot = client.keyslot
    rng = random.Random(7)
    masters = set()
    for _ in range(200):
        fp = rng.getrandbits(64)
        for key in rk.near_buckets("crawl", "", fp):
            masters.add(client.nodes_manager.get_node_from_slot(slot(key)).name)
    assert len(masters) == 3
    # the owed requests and the decision locks spread over the masters, a shard a slot
    for shards in ([rk.pending_shard("crawl", s) for s in range(rk.PENDING_SHARDS)],
                   [rk.decision_shard("crawl", s) for s in range(rk.LOCK_SHARDS)]):
        assert len({client.nodes_manager.get_node_from_slot(slot(k)).name for k in shards}) == 3
    frontier_slots = {slot(rk.frontier_slot("crawl", f"https://h/{i}")[0]) for i in range(500)}
    assert len(frontier_slots) > 450


# -- LSH band buckets -------------------------------------------------------------------------


def test_a_document_s_band_records_take_one_call_per_group(fn):
    from scrapy_dedup.core.bands import BANDS

    client = fn.client
    bands = [(band + 1) << 56 | band for band in range(BANDS)]
    calls = rk.band_calls(fn.prefix, "", bands)
    assert len(calls) == rk.BAND_GROUPS
    token, other = b"T" * 8, b"O" * 8
    per_group = BANDS // rk.BAND_GROUPS
    for g, (settled, entries) in enumerate(calls):
        assert len(entries) == per_group * rk.BAND_ENTRY
        assert client.fcall("sdd_bands_add", 1, settled, token, entries) == per_group
        assert client.fcall("sdd_bands_add", 1, settled, token, entries) == 0  # once only
        # the buckets are fields of the group's hash: band, then the top 14 bits of the band hash
        assert client.type(settled) == b"hash" and client.hlen(settled) == per_group
        band = g * per_group
        # a record: the band hash's low 4 bytes (the rest is in the field, or told apart by the signatures)
        tag = (bands[band] & 0xFFFF_FFFF).to_bytes(rk.BAND_TAG, "big")
        assert client.hget(settled, rk.band_field(band, bands[band])) == tag + token
        assert rk.BAND_RECORD == len(tag + token) == 12
        first = entries[: rk.BAND_ENTRY]
        assert client.fcall("sdd_bands_add", 1, settled, other, first) == 1  # two records in one bucket
        # per record found, its token
        assert rk.band_tokens(client.fcall("sdd_bands_find", 1, settled, entries)) == [token, other] + [token] * (per_group - 1)
        assert client.fcall("sdd_bands_remove", 1, settled, other, first) == 1
        assert client.fcall("sdd_bands_remove", 1, settled, token, entries[rk.BAND_ENTRY : 2 * rk.BAND_ENTRY]) == 1
        assert client.fcall("sdd_bands_remove", 1, settled, other, entries) == 0  # not there
        assert rk.band_tokens(client.fcall("sdd_bands_find", 1, settled, entries)) == [token] * (per_group - 1)
        assert client.hlen(settled) == per_group - 1  # an emptied bucket's field is gone
        assert client.fcall("sdd_bands_remove", 1, settled, token, entries) == per_group - 1
        assert not client.exists(settled)  # its last field gone: so is the hash
    settled, entries = calls[0]
    with pytest.raises(redis.ResponseError, match="a token and entries"):
        client.fcall("sdd_bands_add", 1, settled, token, entries[:-1])
    with pytest.raises(redis.ResponseError, match="a token and entries"):
        client.fcall("sdd_bands_add", 1, settled, token[:4], entries)
    with pytest.raises(redis.ResponseError, match="3-byte field"):
        client.fcall("sdd_bands_find", 1, settled, entries[:5])
    # a band hash is looked up in its own band's bucket only, and a record key must start a record
    field = entries[: rk.BAND_FIELD]
    assert client.fcall("sdd_bands_find", 1, settled, field + entries[rk.BAND_ENTRY + 3 : 2 * rk.BAND_ENTRY]) == b""
    client.fcall("sdd_bands_add", 1, settled, token, entries[: rk.BAND_ENTRY])
    assert client.fcall("sdd_bands_find", 1, settled, entries[: rk.BAND_ENTRY]) == token
    needle = (entries[3 : rk.BAND_ENTRY] + token)[2 : 2 + rk.BAND_TAG]  # inside a record, not at its start
    assert client.fcall("sdd_bands_find", 1, settled, field + needle) == b""


def test_a_band_record_keeps_46_bits_of_its_band_hash(fn):
    # the field names the band and the top 14 bits, the record the low 32: two band hashes that
    # differ only in the 18 bits between are one entry (a candidate that near_match then judges)
    one, other = 0xABCD_0000_1234_5678, 0xABCD_3FFF_1234_5678
    same_bits = 0xABCD_0000_1234_5679
    [(settled, first)] = rk.band_calls(fn.prefix, "", [one] * 4)[:1]
    [(_, second)] = rk.band_calls(fn.prefix, "", [other] * 4)[:1]
    [(_, third)] = rk.band_calls(fn.prefix, "", [same_bits] * 4)[:1]
    assert fn.client.fcall("sdd_bands_add", 1, settled, b"T" * 8, first[: rk.BAND_ENTRY]) == 1
    assert fn.client.fcall("sdd_bands_find", 1, settled, second[: rk.BAND_ENTRY]) == b"T" * 8
    assert fn.client.fcall("sdd_bands_find", 1, settled, third[: rk.BAND_ENTRY]) == b""


def test_band_groups_are_one_slot_each_and_spread_over_the_masters(redis_cluster):
    client = connect(redis_cluster.url)
    rng = random.Random(3)
    masters: dict[str, int] = {}
    for _ in range(50):
        bands = [rng.getrandbits(64) for _ in range(32)]
        for scope in ("", "intranet"):
            calls = rk.band_calls("crawl", scope, bands)
            # a band group's hash is on its group's master, whatever the scope
            assert [client.keyslot(key) * rk.BAND_GROUPS // 16384 for key, _ in calls] == list(range(rk.BAND_GROUPS))
    for tag in rk.band_tags():
        name = client.nodes_manager.get_node_from_slot(client.keyslot("{" + tag + "}")).name
        masters[name] = masters.get(name, 0) + 1
    assert sorted(masters.values()) == [2, 3, 3]
