"""Store backends behind one interface (:class:`DedupStore`).

``scrapy_dedup.store.leveldb.LevelDBStore`` (the default) keeps a store on
disk; ``scrapy_dedup.store.memory.MemoryStore`` keeps it in memory.
"""

from scrapy_dedup.store.base import (
    STORE_FORMAT,
    DedupStore,
    IncompatibleStore,
    StoreBatch,
    StoreError,
    StoreLocked,
    StoreWriteError,
)

__all__ = [
    "STORE_FORMAT",
    "DedupStore",
    "IncompatibleStore",
    "StoreBatch",
    "StoreError",
    "StoreLocked",
    "StoreWriteError",
]
