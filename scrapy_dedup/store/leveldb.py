"""The embedded LevelDB backend (through plyvel).

LevelDB allows one process per database: the crawl that holds the store is
the only one that can open it.  ``scrapy dedup`` commands read a store that
no crawl holds (or a copy of one).

Key layout (format 1, recorded as ``store_format`` in the store parameters)::

    m:params                      JSON parameters (fingerprints, tables, format)
    m:run                         current crawl run number
    m:<name>                      other metadata (JSON), e.g. m:url_rules
    f:<url key>                   frontier: run the key was last scheduled in (4 bytes), first URL
    u:<url key>                   UrlRecord (JSON)
    v:<url>                       URL variant dropped before fetch (JSON)
    a:<target key>\0<url>         redirect or URL variant pointing to a key -> reason
    c:<cluster id>                Cluster (JSON)
    k:<cluster id>:<url key>      cluster membership
    h:<scope id>:<content hash>   exact index -> cluster id
    r:<raw hash>                  raw body hash -> url key (skips extraction)
    n:<url key>                   MinHash signature (bytes)
    x:<url key>                   document text, zlib-compressed (DEDUP_KEEP_TEXT)
    w<seq>                        SimHash table entry not yet packed (write-ahead)
    p<table><scope><block><gen>   packed SimHash table run: (simhash, cluster) pairs
    z<scope><simhash><cluster>    removed SimHash table entry (tombstone)
    m:tables_gen                  next packed run generation
    b<band><scope><band hash><cluster>          LSH band entry (binary, 1+8+8+8 bytes)

The SimHash tables are described in :mod:`scrapy_dedup.store.simhash_tables`.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import plyvel
import xxhash

from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.store.holder import held_message, record_holder, release_holder
from scrapy_dedup.store.simhash_tables import LAYOUT, PackedSimhashTables
from scrapy_dedup.store.base import (
    STORE_FORMAT,
    DedupStore,
    IncompatibleStore,
    StoreBatch,
    StoreError,
    StoreLocked,
    StoreWriteError,
    format_problem,
)

_U64 = struct.Struct(">Q")
_RUN = struct.Struct(">I")


def scope_id(scope: str) -> bytes:
    """8 bytes that stand for a dedup scope in binary keys."""
    return xxhash.xxh64_digest(scope.encode("utf-8"))


def _cid_bytes(cluster_id: str) -> bytes:
    return bytes.fromhex(cluster_id)


def _band_prefix(band: int, scope: bytes, band_hash: int) -> bytes:
    return b"b" + bytes((band,)) + scope + _U64.pack(band_hash)


class LevelDBBatch(StoreBatch):
    def __init__(self, wb: Any, tables: PackedSimhashTables, pending: list) -> None:
        self._wb = wb
        self._tables = tables
        self._pending = pending
        self._removed: set[bytes] = set()

    def put_url(self, record: UrlRecord) -> None:
        self._wb.put(b"u:" + record.key.encode(), record.to_json())

    def put_variant(
        self, url: str, key: str, seen_at: float, previous: dict | None = None, reason: str = "seen"
    ) -> None:
        data = previous or {"key": key, "first_seen": seen_at, "count": 0}
        data.update(key=key, last_seen=seen_at, count=data.get("count", 0) + 1, reason=reason)
        self._wb.put(b"v:" + url.encode(), json.dumps(data, separators=(",", ":")).encode())
        if previous is None or previous.get("key") != key:
            self.put_alias(key, url, "url_variant")

    def put_alias(self, target_key: str, url: str, reason: str) -> None:
        self._wb.put(_alias_key(target_key, url), reason.encode())

    def delete_alias(self, target_key: str, url: str) -> None:
        self._wb.delete(_alias_key(target_key, url))

    def put_cluster(self, cluster: Cluster) -> None:
        self._wb.put(b"c:" + cluster.cluster_id.encode(), cluster.to_json())

    def delete_cluster(self, cluster_id: str) -> None:
        self._wb.delete(b"c:" + cluster_id.encode())

    def add_member(self, cluster_id: str, key: str) -> None:
        self._wb.put(b"k:" + cluster_id.encode() + b":" + key.encode(), b"")

    def remove_member(self, cluster_id: str, key: str) -> None:
        self._wb.delete(b"k:" + cluster_id.encode() + b":" + key.encode())

    def index_exact(self, scope: str, content_hash: str, cluster_id: str) -> None:
        self._wb.put(_exact_key(scope, content_hash), cluster_id.encode())

    def unindex_exact(self, scope: str, content_hash: str) -> None:
        self._wb.delete(_exact_key(scope, content_hash))

    def index_raw(self, raw_hash: str, key: str) -> None:
        self._wb.put(b"r:" + raw_hash.encode(), key.encode())

    def put_minhash(self, key: str, minhash: bytes) -> None:
        self._wb.put(b"n:" + key.encode(), minhash)

    def delete_minhash(self, key: str) -> None:
        self._wb.delete(b"n:" + key.encode())

    def put_text(self, key: str, text: str) -> None:
        self._wb.put(b"x:" + key.encode(), zlib.compress(text.encode("utf-8", "surrogatepass"), 6))

    def delete_text(self, key: str) -> None:
        self._wb.delete(b"x:" + key.encode())

    def index_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        sid, cid = scope_id(scope), _cid_bytes(cluster_id)
        self._tables.stage_add(self._wb, sid, simhash, cid, self._pending, self._removed)
        for entry in _band_entries(sid, bands, cid):
            self._wb.put(entry, b"")

    def unindex_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        sid, cid = scope_id(scope), _cid_bytes(cluster_id)
        self._tables.stage_remove(self._wb, sid, simhash, cid, self._removed)
        for entry in _band_entries(sid, bands, cid):
            self._wb.delete(entry)


def _alias_key(target_key: str, url: str) -> bytes:
    return b"a:" + target_key.encode() + b"\0" + url.encode()


def _exact_key(scope: str, content_hash: str) -> bytes:
    return b"h:" + scope_id(scope).hex().encode() + b":" + content_hash.encode()


def _band_entries(sid: bytes, bands: Iterable[int], cid: bytes) -> Iterator[bytes]:
    for band, band_hash in enumerate(bands):
        yield _band_prefix(band, sid, band_hash) + cid


def _open_error(path: str, exc: Exception) -> StoreError:
    detail = exc.args[0] if exc.args else exc
    detail = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
    if "No space left" in detail:
        # opening replays the log into a table: LevelDB needs room to open a store
        return StoreWriteError(
            f"cannot open the dedup store {path!r}: no space left on its filesystem (opening writes "
            f"a little); free some space and try again ({detail})"
        )
    return StoreError(f"cannot open the dedup store {path!r}: {detail}")


class LevelDBStore(DedupStore):
    """A store in one LevelDB directory, owned by one process."""

    def __init__(self, path: str, params: dict[str, Any], *, cache_mb: int = 16) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        try:
            # Memory is bounded by the block cache and two write buffers, whatever the size of
            # the store: a crawl of millions of URLs stays flat.
            self._db = plyvel.DB(
                path,
                create_if_missing=True,
                lru_cache_size=cache_mb * 1024 * 1024,
                write_buffer_size=max(1, min(cache_mb // 2, 16)) * 1024 * 1024,
                bloom_filter_bits=10,
            )
        except plyvel.IOError as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked(
                    f"the dedup store {path!r} is in use by another process, {held_message(path)} "
                    "(LevelDB allows one process per store: wait for it to finish, or read a copy)"
                ) from exc
            raise _open_error(path, exc) from exc
        except plyvel.Error as exc:
            raise StoreError(f"cannot open the dedup store {path!r}: {exc}") from exc
        record_holder(path)
        self.params = self._check_params({**params, "store_format": STORE_FORMAT, "simhash_layout": LAYOUT})
        raw_run = self._db.get(b"m:run")
        self._run = int(raw_run) if raw_run else 0
        self._tables = PackedSimhashTables(self._db)
        self._writer = True

    @classmethod
    def open_existing(cls, path: str) -> LevelDBStore:
        """Open a store for reading with the parameters it was written with."""
        if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "CURRENT")):
            raise StoreError(f"no dedup store at {path!r}")
        store = cls.__new__(cls)
        store.path = path
        try:
            store._db = plyvel.DB(path, create_if_missing=False)
        except plyvel.IOError as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked(
                    f"the dedup store {path!r} is in use by a running crawl, {held_message(path)} "
                    "(LevelDB allows one process per store); try again when it ends"
                ) from exc
            raise _open_error(path, exc) from exc
        except plyvel.Error as exc:
            raise StoreError(f"cannot open the dedup store {path!r}: {exc}") from exc
        record_holder(path)
        raw = store._db.get(b"m:params")
        store.params = json.loads(raw) if raw else {}
        problem = format_problem(path, store.params.get("store_format"))
        if problem is None and store.params.get("simhash_layout") != LAYOUT:
            problem = (
                f"the dedup store {path!r} has store format {store.params.get('store_format')!r}; "
                f"this version reads format {STORE_FORMAT} ({LAYOUT} SimHash tables)"
            )
        if problem is not None:
            store.close()
            raise IncompatibleStore(problem)
        raw_run = store._db.get(b"m:run")
        store._run = int(raw_run) if raw_run else 0
        store._tables = PackedSimhashTables(store._db)
        return store

    def _check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        # JSON round trip so that tuples and lists compare equal
        params = json.loads(json.dumps(params, sort_keys=True))
        raw = self._db.get(b"m:params")
        if raw is None:
            self._db.put(b"m:params", json.dumps(params, sort_keys=True).encode())
            return params
        stored = json.loads(raw)
        problem = format_problem(self.path, stored.get("store_format"))
        if problem is not None:
            self.close()
            raise IncompatibleStore(problem)
        if stored != params:
            diff = ", ".join(
                f"{k}: store has {stored.get(k)!r}, this crawl uses {params.get(k)!r}"
                for k in sorted(set(stored) | set(params))
                if stored.get(k) != params.get(k)
            )
            self.close()
            raise IncompatibleStore(
                f"the dedup store {self.path!r} was built with other parameters ({diff}); "
                "use a new DEDUP_STORE directory, or the parameters it was built with"
            )
        return stored

    # -- life cycle ---------------------------------------------------------
    def close(self) -> None:
        if not self._db.closed:
            if getattr(self, "_writer", False) and self._tables.needs_compaction():
                # the end of a crawl run: a good moment to drop what updates and deletions left
                try:
                    self._tables.compact()
                except plyvel.Error:
                    pass  # safe to leave for the next run: every step keeps the tables correct
            release_holder(self.path)
            self._db.close()

    def begin_run(self) -> int:
        with self._writing():
            self._db.put(b"m:run", str(self._run + 1).encode())
        self._run += 1
        return self._run

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn a failed write into one StoreWriteError that names the store and the cause.

        LevelDB applies nothing of a batch whose log write failed, and refuses every later
        write of this process: the store stays as it was before the failure.
        """
        try:
            yield
        except plyvel.IOError as exc:
            detail = exc.args[0] if exc.args else exc
            detail = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
            cause = detail.rsplit(": ", 1)[-1] if ": " in detail else detail
            raise StoreWriteError(f"cannot write to the dedup store {self.path!r}: {cause} ({detail})") from exc

    @property
    def run(self) -> int:
        return self._run

    @contextmanager
    def batch(self) -> Iterator[LevelDBBatch]:
        pending: list = []
        with self._writing():
            with self._db.write_batch(transaction=True) as wb:
                yield LevelDBBatch(wb, self._tables, pending)
            # only what was written reaches the tables' memory
            self._tables.apply(pending)

    # -- frontier -----------------------------------------------------------
    def frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
        k = b"f:" + key.encode()
        previous = self._db.get(k)
        if previous is None:
            with self._writing():
                self._db.put(k, _RUN.pack(run) + url.encode())
            return None
        last_run, first_url = _RUN.unpack(previous[:4])[0], previous[4:].decode()
        if last_run != run:
            with self._writing():
                self._db.put(k, _RUN.pack(run) + previous[4:])
        return last_run, first_url

    def frontier_size(self) -> int:
        return sum(1 for _ in self._db.iterator(prefix=b"f:", include_value=False))

    # -- URL records --------------------------------------------------------
    def get_url(self, key: str) -> UrlRecord | None:
        raw = self._db.get(b"u:" + key.encode())
        return UrlRecord.from_json(raw) if raw is not None else None

    def iter_urls(self) -> Iterator[UrlRecord]:
        for _, raw in self._db.iterator(prefix=b"u:"):
            yield UrlRecord.from_json(raw)

    def iter_aliases_of(self, key: str) -> Iterator[tuple[str, str]]:
        prefix = b"a:" + key.encode() + b"\0"
        for k, reason in self._db.iterator(prefix=prefix):
            yield k[len(prefix):].decode(), reason.decode()

    def get_meta(self, name: str) -> Any:
        raw = self._db.get(b"m:" + name.encode())
        return json.loads(raw) if raw is not None else None

    def put_meta(self, name: str, value: Any) -> None:
        with self._writing():
            self._db.put(b"m:" + name.encode(), json.dumps(value, sort_keys=True).encode())

    def get_variant(self, url: str) -> dict[str, Any] | None:
        raw = self._db.get(b"v:" + url.encode())
        return json.loads(raw) if raw is not None else None

    def iter_variants(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for k, raw in self._db.iterator(prefix=b"v:"):
            yield k[2:].decode(), json.loads(raw)

    # -- content index ------------------------------------------------------
    def find_exact(self, scope: str, content_hash: str) -> str | None:
        raw = self._db.get(_exact_key(scope, content_hash))
        return raw.decode() if raw is not None else None

    def find_raw(self, raw_hash: str) -> str | None:
        raw = self._db.get(b"r:" + raw_hash.encode())
        return raw.decode() if raw is not None else None

    def get_minhash(self, key: str) -> bytes | None:
        return self._db.get(b"n:" + key.encode())

    def get_text(self, key: str) -> str | None:
        raw = self._db.get(b"x:" + key.encode())
        return zlib.decompress(raw).decode("utf-8", "surrogatepass") if raw is not None else None

    def simhash_candidates(
        self, scope: str, simhash: int, max_distance: int | None = None
    ) -> Iterator[tuple[int, str]]:
        for fp, cid in self._tables.near(scope_id(scope), simhash, max_distance):
            yield fp, cid.hex()

    def band_candidates(self, scope: str, bands: Iterable[int]) -> set[str]:
        sid = scope_id(scope)
        found: set[str] = set()
        for band, band_hash in enumerate(bands):
            prefix = _band_prefix(band, sid, band_hash)
            start = len(prefix)
            for k in self._db.iterator(prefix=prefix, include_value=False):
                found.add(k[start:].hex())
        return found

    def get_cluster(self, cluster_id: str) -> Cluster | None:
        raw = self._db.get(b"c:" + cluster_id.encode())
        return Cluster.from_json(raw) if raw is not None else None

    def cluster_members(self, cluster_id: str) -> list[str]:
        prefix = b"k:" + cluster_id.encode() + b":"
        return [k[len(prefix):].decode() for k in self._db.iterator(prefix=prefix, include_value=False)]

    def iter_clusters(self) -> Iterator[Cluster]:
        for _, raw in self._db.iterator(prefix=b"c:"):
            yield Cluster.from_json(raw)
