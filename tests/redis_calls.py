"""The store's server-side functions called one by one, as the tests and ``bench_redis.py`` call
them (a crawl calls them through :class:`~scrapy_dedup.store.redis.store.RedisStore`)."""

from __future__ import annotations

from collections.abc import Iterable

from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.functions import StoreFunctions


def frontier_mark_many(fn: StoreFunctions, url_keys: Iterable[str], run: int) -> list[int]:
    """Mark each key scheduled in ``run`` (``sdd_frontier_mark_url``, its URL the key itself,
    pipelined); per key, the run it was last scheduled in before, 0 for never."""
    pipe = fn.client.pipeline(transaction=False)
    for url_key in url_keys:
        bucket, rid = rk.frontier_slot(fn.prefix, url_key)
        pipe.fcall("sdd_frontier_mark_url", 2, bucket, bucket.replace(":f:", ":fu:", 1), run, rid, url_key)
    return [int(previous) for previous, _ in pipe.execute()]


def frontier_mark(fn: StoreFunctions, url_key: str, run: int) -> int:
    return frontier_mark_many(fn, [url_key], run)[0]


def _near_call(fn: StoreFunctions, function: str, scope: str, simhash: int, token: bytes) -> None:
    pipe = fn.client.pipeline(transaction=False)
    for key in rk.near_buckets(fn.prefix, scope, simhash):
        pipe.fcall(function, 1, key, rk.simhash_bytes(simhash), token)
    pipe.execute()


def near_put(fn: StoreFunctions, scope: str, simhash: int, token: bytes) -> None:
    """Enter a representative in its four SimHash buckets (``sdd_near_put``, as on a cluster)."""
    _near_call(fn, "sdd_near_put", scope, simhash, token)


def near_remove(fn: StoreFunctions, scope: str, simhash: int, token: bytes) -> None:
    _near_call(fn, "sdd_near_remove", scope, simhash, token)


def near_scan(fn: StoreFunctions, scope: str, simhash: int, max_distance: int) -> set[tuple[int, bytes]]:
    """The entries within ``max_distance`` in the four buckets of ``simhash``, read as a decision reads them."""
    pipe = fn.client.pipeline(transaction=False)
    decode = fn.queue_near_read(pipe, scope, simhash, max_distance)
    return decode(pipe.execute())
