"""Batches of near-duplicate decisions (``NearDecisions.decide_many``) over a real Redis server
and a real 3-master cluster: the same outcomes as deciding one by one in order, one page kept per
near-duplicate family when batches and single decisions run in several processes at once, and a
process killed mid-batch reaped after its lease."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import pytest
import redis

from scrapy_dedup.store import redis_keys as rk
from scrapy_dedup.store.redis_functions import StoreFunctions, connect, is_cluster
from scrapy_dedup.store.redis_near import NearDecisions


def planted(rng: random.Random, families: int, copies: int, strays: int) -> list[tuple[int, bytes]]:
    """Random SimHashes with planted near duplicates: each family's copies flip 1-3 bits of its
    base (so two copies may be up to 6 bits apart: which one represents depends on the order),
    plus unrelated pages; shuffled, so copies fall in one batch and across batches."""
    docs = []
    for _ in range(families):
        base = rng.getrandbits(64)
        for _ in range(copies):
            fp = base
            for _ in range(rng.randint(0, 3)):
                fp ^= 1 << rng.randrange(64)
            docs.append(fp)
    docs += [rng.getrandbits(64) for _ in range(strays)]
    rng.shuffle(docs)
    return [(fp, n.to_bytes(8, "big")) for n, fp in enumerate(docs, start=1)]


def pair_confirm(token: bytes, other: bytes) -> bool:
    """A symmetric confirmation that rejects about one candidate pair in four."""
    low, high = sorted((token, other))
    return (int.from_bytes(low, "big") * 31 + int.from_bytes(high, "big")) % 4 != 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_batch_decides_as_one_by_one_in_order(redis_url, redis_prefix, seed):
    rng = random.Random(seed)
    docs = planted(rng, families=25, copies=4, strays=30)
    client = connect(redis_url)
    one = NearDecisions(StoreFunctions(client, redis_prefix + ":one"))
    many = NearDecisions(StoreFunctions(client, redis_prefix + ":many"))
    use_confirm = seed == 3
    expected = []
    for fp, token in docs:
        confirm = (lambda _fp, t, token=token: pair_confirm(token, t)) if use_confirm else None
        expected.append(one.decide("", fp, token, 3, confirm=confirm))
    got = []
    batch_confirm = (lambda token, _fp, t: pair_confirm(token, t)) if use_confirm else None
    start = 0
    while start < len(docs):
        size = rng.choice([1, 2, 7, 16, 40])
        got += many.decide_many("", docs[start : start + size], 3, batch_confirm)
        start += size
    assert [(o.duplicate_of, o.distance) for o in got] == [(o.duplicate_of, o.distance) for o in expected]
    kept = sum(o.kept for o in got)
    assert 25 <= kept < len(docs)  # the planted copies were found
    assert all(o.scans == 1 for o in got)  # nothing else in flight: one read each
    # same tables afterwards: the kept documents, settled; nothing pending
    for fp, _ in docs:
        a_settled, a_pending = one.fn.near_scan("", fp, 3)
        b_settled, b_pending = many.fn.near_scan("", fp, 3)
        assert a_settled == b_settled and a_pending == b_pending == set()


def test_a_batch_takes_consecutive_order_numbers_and_releases_them(redis_url, redis_prefix):
    fn = StoreFunctions(connect(redis_url), redis_prefix)
    decisions = NearDecisions(fn)
    docs = [(random.Random(4).getrandbits(64) ^ i, i.to_bytes(8, "big")) for i in range(1, 11)]
    outcomes = decisions.decide_many("", docs, 3)
    orders = [o.order for o in outcomes]
    assert orders == list(range(orders[0], orders[0] + 10))
    assert fn.order_get([t for _, t in docs]) == [None] * 10
    # the first is kept; every later one is within 3 bits of it (they differ in the low 4 bits)
    assert outcomes[0].kept and outcomes[1].duplicate_of is not None


def test_a_batch_refuses_bad_tokens(redis_url, redis_prefix):
    decisions = NearDecisions(StoreFunctions(connect(redis_url), redis_prefix))
    with pytest.raises(ValueError, match="distinct"):
        decisions.decide_many("", [(1, b"same0001"), (2, b"same0001")], 3)
    with pytest.raises(ValueError, match="8 bytes"):
        decisions.decide_many("", [(1, b"short")], 3)
    assert decisions.decide_many("", [], 3) == []


def test_the_server_refuses_malformed_batches(redis_url, redis_prefix):
    fn = StoreFunctions(connect(redis_url), redis_prefix)
    settled, pending = rk.near_group(redis_prefix, rk.scope_digest("").hex(), 0, 0)
    with pytest.raises(redis.ResponseError, match="16-byte records"):
        fn.client.fcall("sdd_near_add_many", 2, settled, pending, b"x" * 15)
    with pytest.raises(redis.ResponseError, match="keep flag"):
        fn.client.fcall("sdd_near_settle_many", 2, settled, pending, b"x" * 16, "10")
    if not is_cluster(fn.client):  # a cluster client refuses the two slots itself
        with pytest.raises(redis.ResponseError, match="one table"):
            fn.client.fcall("sdd_near_add_many", 2, settled, rk.near_group(redis_prefix, "00" * 8, 1, 0)[1], b"")
    # nothing was written
    assert fn.client.exists(settled, pending) == 0


def _decide_share(url, prefix, docs, batch, out):
    decisions = NearDecisions(StoreFunctions(connect(url), prefix), lease_ms=20_000)
    results = []
    for lo in range(0, len(docs), batch):
        chunk = docs[lo : lo + batch]
        if batch == 1:
            outcomes = [decisions.decide("", fp, token, 3) for _, fp, token in chunk]
        else:
            outcomes = decisions.decide_many("", [(fp, token) for _, fp, token in chunk], 3)
        results += [(family, token, o.duplicate_of) for (family, _, token), o in zip(chunk, outcomes)]
    out.put(results)


def test_batches_and_single_decisions_in_several_processes_keep_one_page_per_family(redis_url, redis_prefix):
    # every process gets one copy of each family, in the same place of its list: the copies
    # of a family are decided at about the same moment, by batches and by single decisions
    rng = random.Random(9)
    families = 120
    shares: list[list[tuple[int, int, bytes]]] = [[] for _ in range(4)]
    for f in range(families):
        base = rng.getrandbits(64)
        for p in range(4):
            fp = base if p == 0 else base ^ (1 << rng.randrange(64))
            shares[p].append((f, fp, f"{f:05d}{p:03d}".encode()))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_decide_share, args=(redis_url, redis_prefix, share, batch, out))
             for share, batch in zip(shares, (16, 1, 9, 1))]
    for proc in procs:
        proc.start()
    results = [r for _ in procs for r in out.get(timeout=300)]
    for proc in procs:
        proc.join(timeout=60)
    assert len(results) == 4 * families
    kept = {}
    for family, token, duplicate_of in results:
        if duplicate_of is None:
            assert family not in kept, f"family {family} kept twice"
            kept[family] = token
    assert len(kept) == families
    for family, _, duplicate_of in results:
        assert duplicate_of in (None, kept[family])


def _die_mid_batch(url, prefix, docs):
    fn = StoreFunctions(connect(url), prefix)
    # the first step of decide_many: pending entries in, order numbers taken, buckets read
    fn.near_add_order_read("", docs, 500, 3)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_process_killed_mid_batch_is_reaped_after_its_lease(redis_url, redis_prefix):
    rng = random.Random(12)
    bases = [rng.getrandbits(64) for _ in range(6)]
    doomed = [(fp, f"doomed{i:02d}".encode()) for i, fp in enumerate(bases)]
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_die_mid_batch, args=(redis_url, redis_prefix, doomed))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL
    decisions = NearDecisions(StoreFunctions(connect(redis_url), redis_prefix))
    survivors = [(fp ^ 0b11, f"alive{i:03d}".encode()) for i, fp in enumerate(bases)]
    survivors.append((rng.getrandbits(64), b"unrelat1"))
    started = time.monotonic()
    outcomes = decisions.decide_many("", survivors, 3)
    assert time.monotonic() - started < 10
    assert all(o.kept for o in outcomes)
    assert sum(o.reaped for o in outcomes) == len(doomed)
    assert outcomes[-1].scans == 1  # not near any dead entry: decided at once
    for (fp, token), (dead_fp, _dead_token) in zip(survivors, doomed):
        settled, pending = decisions.fn.near_scan("", dead_fp, 3)
        assert settled == {(fp, token)} and pending == set()
    assert decisions.fn.order_get([t for _, t in doomed]) == [None] * len(doomed)
