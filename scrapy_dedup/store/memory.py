"""An in-memory backend: the interface with nothing but dictionaries behind it.

For tests and short single-process crawls that need no store afterwards.  It
passes the same contract suite as the LevelDB backend, so it is also the
smallest example of what a backend implements.  Stores are kept per path for
the life of the process: opening the same path again finds what was written,
as a file would; nothing reaches the disk.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from scrapy_dedup.core.bands import BLOCK_BITS, BLOCKS
from scrapy_dedup.store.base import (
    FRONTIER,
    META,
    SETS,
    STORE_FORMAT,
    TABLES,
    DedupStore,
    NearCandidates,
    StoreBatch,
    StoreError,
    band_tuple,
)
from scrapy_dedup.store.records import get_meta

LAYOUT = "memory-1"


@dataclass
class _Data:
    tables: dict[str, dict[str, bytes]] = field(default_factory=lambda: {t: {} for t in TABLES})
    sets: dict[str, dict[str, dict[str, bytes]]] = field(default_factory=lambda: {s: {} for s in SETS})
    frontier: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: scope -> {(simhash, cluster id)}
    simhashes: dict[str, set[tuple[int, str]]] = field(default_factory=dict)
    #: (scope, band, band hash) -> {cluster id}
    bands: dict[tuple[str, int, int], set[str]] = field(default_factory=dict)
    #: one lock per store: every call below is atomic, as the interface asks of a shared backend
    lock: threading.RLock = field(default_factory=threading.RLock)


_STORES: dict[str, _Data] = {}
_STORES_LOCK = threading.Lock()


class MemoryBatch(StoreBatch):
    """Writes recorded as operations and applied together, under the store's lock."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.ops: list[tuple[str, tuple]] = []

    def put(self, table: str, key: str, value: bytes) -> None:
        self.ops.append(("put", (table, key, bytes(value))))

    def delete(self, table: str, key: str) -> None:
        self.ops.append(("delete", (table, key)))

    def add_to_set(self, name: str, owner: str, member: str, value: bytes = b"") -> None:
        self.ops.append(("add", (name, owner, member, bytes(value))))

    def remove_from_set(self, name: str, owner: str, member: str) -> None:
        self.ops.append(("remove", (name, owner, member)))

    def index_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        self.ops.append(("index", (scope, simhash, band_tuple(bands), cluster_id)))

    def unindex_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        self.ops.append(("unindex", (scope, simhash, band_tuple(bands), cluster_id)))

    def apply(self, data: _Data) -> None:
        for op, args in self.ops:
            if op == "put":
                table, key, value = args
                data.tables[table][key] = value
            elif op == "delete":
                table, key = args
                data.tables[table].pop(key, None)
            elif op == "add":
                name, owner, member, value = args
                data.sets[name].setdefault(owner, {})[member] = value
            elif op == "remove":
                name, owner, member = args
                members = data.sets[name].get(owner, {})
                members.pop(member, None)
                if not members:
                    data.sets[name].pop(owner, None)
            elif op == "index":
                scope, simhash, bands, cid = args
                data.simhashes.setdefault(scope, set()).add((simhash, cid))
                for band, band_hash in enumerate(bands):
                    data.bands.setdefault((scope, band, band_hash), set()).add(cid)
            else:
                scope, simhash, bands, cid = args
                data.simhashes.get(scope, set()).discard((simhash, cid))
                for band, band_hash in enumerate(bands):
                    data.bands.get((scope, band, band_hash), set()).discard(cid)


class MemoryStore(DedupStore):
    """A store in this process's memory, kept under its path until the process ends."""

    def __init__(self, path: str, params: dict[str, Any], *, cache_mb: int = 16) -> None:
        self.path = str(path)
        with _STORES_LOCK:
            self._data = _STORES.setdefault(self.path, _Data())
        self.params = self._check_params({**params, "store_format": STORE_FORMAT, "layout": LAYOUT})
        self._read_run()

    @classmethod
    def open_existing(cls, path: str) -> MemoryStore:
        data = _STORES.get(str(path))
        if data is None or "params" not in data.tables[META]:
            raise StoreError(f"no dedup store at {str(path)!r} in this process's memory")
        store = cls.__new__(cls)
        store.path, store._data = str(path), data
        store.params = get_meta(store, "params")
        store._check_format(store.params)
        store._read_run()
        return store

    @classmethod
    def discard(cls, path: str) -> None:
        """Forget the store kept under ``path``."""
        with _STORES_LOCK:
            _STORES.pop(str(path), None)

    def close(self) -> None:
        pass  # the data stays under its path, as a file would

    @contextmanager
    def batch(self, later: bool = False) -> Iterator[MemoryBatch]:
        batch = MemoryBatch(self)
        yield batch
        with self._data.lock:
            batch.apply(self._data)

    # -- records ------------------------------------------------------------
    def get(self, table: str, key: str) -> bytes | None:
        return self._data.tables[table].get(key)

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        with self._data.lock:
            rows = sorted(self._data.tables[table].items())
        yield from rows

    def count(self, table: str) -> int:
        return len(self._data.frontier if table == FRONTIER else self._data.tables[table])

    def put_if_absent(self, table: str, key: str, value: bytes) -> bytes | None:
        with self._data.lock:
            rows = self._data.tables[table]
            previous = rows.get(key)
            if previous is None:
                rows[key] = bytes(value)
            return previous

    def set_members_many(self, name: str, owners: Sequence[str]) -> list[list[tuple[str, bytes]]]:
        with self._data.lock:
            return [sorted(self._data.sets[name].get(owner, {}).items()) for owner in owners]

    def increment_meta(self, name: str) -> int:
        with self._data.lock:
            rows = self._data.tables[META]
            value = int(json.loads(rows.get(name, b"0"))) + 1
            rows[name] = json.dumps(value).encode()
            return value

    # -- frontier -----------------------------------------------------------
    def _frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
        with self._data.lock:
            previous = self._data.frontier.get(key)
            self._data.frontier[key] = (run, previous[1] if previous else url)
            return previous

    # -- near-duplicate index -----------------------------------------------
    def near_candidates(
        self, scope: str, simhash: int | None, bands: Iterable[int], max_distance: int | None = None
    ) -> NearCandidates:
        mask = (1 << BLOCK_BITS) - 1
        found = NearCandidates([], set())
        with self._data.lock:
            entries = sorted(self._data.simhashes.get(scope, ()))
            for band, band_hash in enumerate(band_tuple(bands)):
                found.bands.update(self._data.bands.get((scope, band, band_hash), ()))
        if simhash is not None:
            for stored, cid in entries:
                shares = any(((stored ^ simhash) >> (BLOCK_BITS * t)) & mask == 0 for t in range(BLOCKS))
                if shares and (max_distance is None or (stored ^ simhash).bit_count() <= max_distance):
                    found.simhash.append((stored, cid))
        return found
