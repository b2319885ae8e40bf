"""The Redis backend: one store shared by many crawl processes, on a server or a cluster.

- ``store.py``: :class:`~scrapy_dedup.store.redis.store.RedisStore`;
- ``keys.py``: its key layout and hash-tag slots;
- ``functions.py``: the connection and the server-side functions (``functions.lua``);
- ``wire.py``: its commands packed by hiredis, the server's errors it tells apart.

Importing this package imports no Redis client: the store's modules do.
"""
