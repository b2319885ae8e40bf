"""Store backends behind one interface (:class:`DedupStore`).

``scrapy_dedup.store.leveldb.LevelDBStore`` (the default) keeps a store on
disk; ``scrapy_dedup.store.memory.MemoryStore`` keeps it in memory;
``scrapy_dedup.store.redis.store.RedisStore`` shares one on a Redis server or cluster.
"""

from typing import Any

from scrapy_dedup._moved import moved_module
from scrapy_dedup.store.base import (
    STORE_FORMAT,
    DedupStore,
    IncompatibleStore,
    StoreBatch,
    StoreError,
    StoreLocked,
    StoreWriteError,
)

#: the backend a ``redis://`` or ``rediss://`` location selects (it needs the ``redis`` extra)
REDIS_BACKEND = "scrapy_dedup.store.redis.store.RedisStore"


def is_redis_url(value: Any) -> bool:
    """Whether a store location names a Redis server (``redis://`` or ``rediss://``).

    >>> is_redis_url("rediss://:secret@cache:6380/1"), is_redis_url("/var/lib/dedup")
    (True, False)
    """
    return isinstance(value, str) and value.split("://", 1)[0].lower() in ("redis", "rediss")


# the Redis backend's modules before they moved into store/redis/: old imports and settings work on
for _old, _new in (("redis_store", "store"), ("redis_keys", "keys"), ("redis_functions", "functions"),
                   ("redis_wire", "wire")):
    moved_module(f"{__name__}.{_old}", f"{__name__}.redis.{_new}")

__all__ = [
    "REDIS_BACKEND",
    "STORE_FORMAT",
    "DedupStore",
    "IncompatibleStore",
    "StoreBatch",
    "StoreError",
    "StoreLocked",
    "StoreWriteError",
    "is_redis_url",
]
