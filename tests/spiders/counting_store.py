"""A LevelDB store that counts its URL record reads and its writes, by the function that asked.

``DEDUP_STORE_BACKEND = "counting_store.CountingLevelDBStore"``: each crawl run appends one JSON
line to ``<store>.calls.jsonl`` when it closes the store, ``{"get_url": {caller: [url key, ...]},
"batch": {caller: n}}``: which frontier step read which record, and which steps wrote.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from scrapy_dedup.store.base import URL
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import get_url


class CountingLevelDBStore(LevelDBStore):
    def _calls(self) -> dict:
        if "_counted" not in self.__dict__:
            self._counted = {"get_url": defaultdict(list), "batch": defaultdict(int)}
        return self._counted

    def get(self, table, key):
        caller = sys._getframe(1)
        if table == URL and caller.f_code is get_url.__code__:  # a URL record read, for whom
            self._calls()["get_url"][caller.f_back.f_code.co_name].append(key)
        return super().get(table, key)

    def batch(self, later=False):
        self._calls()["batch"][sys._getframe(1).f_code.co_name] += 1
        return super().batch(later)

    def close(self) -> None:
        if not self._db.closed and "_counted" in self.__dict__:
            with open(f"{self.path}.calls.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps(self._counted) + "\n")
        super().close()
