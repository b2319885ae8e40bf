"""The embedded LevelDB backend (the default): one store in one directory, owned by one process.

- ``store.py``: :class:`LevelDBStore` and its key layout;
- ``packed_tables.py``: its packed SimHash tables and LSH bands;
- ``holder.py``: who holds a store (``HOLDER``, next to LevelDB's ``LOCK``);
- ``snapshot.py``: a copy of a store another process is writing (:meth:`LevelDBStore.open_snapshot`);
- ``repair.py`` and ``migrate.py``: ``scrapy dedup repair`` and ``scrapy dedup migrate``.
"""

from scrapy_dedup.store.leveldb.store import LAYOUT, LevelDBBatch, LevelDBStore

__all__ = ["LAYOUT", "LevelDBBatch", "LevelDBStore"]
