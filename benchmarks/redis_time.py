"""Benchmark instrumentation for the crawl processes of bench_redis.py: the time a crawl
process spends in its Redis round trips, the store's apart from scrapy-redis's queue.

A round trip's time is the time in redis-py's ``send_packed_command`` (writing the
commands) and ``read_response`` (waiting for the server and reading each reply): what the
server's distance and work cost the process, without the client's own code around it. The
queue's client is told apart by its name (the benchmark sets ``REDIS_PARAMS =
{"client_name": QUEUE_CLIENT}`` for scrapy-redis).

Enabled with ``EXTENSIONS = {"redis_time.RedisTime": 0}`` and this folder on PYTHONPATH;
adds ``bench/redis_store_s``, ``bench/redis_queue_s`` and the replies read by each
(``bench/redis_store_replies``, ``bench/redis_queue_replies``) to the crawl's stats.
Measurement only: it is not part of the extension.
"""

from __future__ import annotations

import time

from redis.connection import AbstractConnection
from scrapy import signals

QUEUE_CLIENT = "bench-queue"


class RedisTime:
    def __init__(self, stats) -> None:
        self.stats = stats
        self.seconds = {"store": 0.0, "queue": 0.0}
        self.replies = {"store": 0, "queue": 0}
        for name in ("send_packed_command", "read_response"):
            setattr(AbstractConnection, name, self._timed(getattr(AbstractConnection, name), name == "read_response"))

    @classmethod
    def from_crawler(cls, crawler):
        extension = cls(crawler.stats)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def _timed(self, original, is_reply: bool):
        seconds, replies = self.seconds, self.replies

        def timed(connection, *args, **kwargs):
            side = "queue" if connection.client_name == QUEUE_CLIENT else "store"
            started = time.perf_counter()
            try:
                return original(connection, *args, **kwargs)
            finally:
                seconds[side] += time.perf_counter() - started
                replies[side] += is_reply

        return timed

    def spider_closed(self, spider) -> None:
        for side in ("store", "queue"):
            self.stats.set_value(f"bench/redis_{side}_s", self.seconds[side])
            self.stats.set_value(f"bench/redis_{side}_replies", self.replies[side])
