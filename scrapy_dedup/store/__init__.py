"""Store backends behind one interface (:class:`DedupStore`)."""

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
