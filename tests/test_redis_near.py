"""The near-duplicate tables of a shared Redis store: the buckets of one family spread over a
cluster's masters, and the client's scan of a bucket finds what the vectorised pass finds."""

from __future__ import annotations

import random

from redis_calls import near_put

from scrapy_dedup.store.redis.functions import StoreFunctions, connect


def families(count: int, copies: int, seed: int = 1) -> list[tuple[int, int, bytes]]:
    """(family, simhash, token): copies differ from their family's base in one bit, so any
    two copies are within distance 2; bases are random, so families are ~32 bits apart."""
    rng = random.Random(seed)
    docs = []
    for f in range(count):
        base = rng.getrandbits(64)
        for c in range(copies):
            fp = base if c == 0 else base ^ (1 << rng.randrange(64))
            docs.append((f, fp, f"{f:05d}{c:03d}".encode()))
    return docs


def test_decisions_are_spread_over_the_masters(redis_cluster, redis_prefix):
    """The table buckets one family touches live on every master, not on one hot slot."""
    client = connect(redis_cluster.url)
    fn = StoreFunctions(client, redis_prefix)
    for _, fp, token in families(40, 1, seed=5):
        near_put(fn, "", fp, token)  # a representative entered
    per_master = []  # buckets (hash fields) of the settled tables on each master
    for node in client.get_primaries():
        conn = client.get_redis_connection(node)
        per_master.append(sum(conn.hlen(key) for key in conn.scan_iter(match=f"{redis_prefix}:n:*", count=1000)))
    # 40 kept documents x 4 tables: each master holds about a third of the buckets
    assert len(per_master) == 3 and sum(per_master) == 160, per_master
    assert min(per_master) > 30 and max(per_master) < 80, per_master


def test_the_vectorised_pass_answers_as_a_loop_over_every_record():
    from scrapy_dedup.store.redis import keys as rk

    def loop(data, query, max_distance):
        out = set()
        for at in range(0, len(data), rk.NEAR_RECORD):
            fp, token = int.from_bytes(data[at : at + 8], "big"), data[at + 8 : at + rk.NEAR_RECORD]
            if (fp ^ query).bit_count() <= max_distance:
                out.add((fp, token))
        return out

    rng = random.Random(5)
    found = 0
    for _ in range(400):
        query = rng.getrandbits(64)
        # records near the query (a few bits off) or anywhere, some of them twice (in two tables' buckets)
        fps = [query ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) if rng.random() < 0.6
               else rng.getrandbits(64) for _ in range(rng.randrange(1, 30))]
        records = [rk.near_record(fp, rng.randbytes(8)) for fp in fps]
        data = b"".join(records + rng.sample(records, len(records) // 3))
        max_distance = rng.randrange(0, 6)
        expected = loop(data, query, max_distance)
        assert rk.records_near(data, query, max_distance) == expected
        found += len(expected)
    assert found > 100  # the cases do find records
