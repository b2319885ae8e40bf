"""The embedded LevelDB backend (through plyvel).

LevelDB allows one process per database: the crawl that holds the store is
the only one that can open it, so every call of the interface that must be
atomic (see :mod:`scrapy_dedup.store.base`) is, and batches are LevelDB write
batches.  ``scrapy dedup`` commands read a store that no crawl holds (or a
copy of one).

Key layout (format 5, :data:`~scrapy_dedup.store.base.STORE_FORMAT`, recorded as ``store_format``
in the store parameters)::

    m:params                      JSON parameters (fingerprints, tables, format)
    m:run                         current crawl run number
    m:<name>                      other metadata (JSON), e.g. m:url_rules
    f:<url key>                   frontier: run the key was last scheduled in (4 bytes), first URL
    o:<pending id>                request still owed (pickled request dict); the id is its URL key
    e:<url key>                   content hash of the last item emitted for the key
    C:<url key>                   a representative's chunks and paragraph keys (JSON, DEDUP_CHUNKS)
    H:<scope id>:<chunk hash>     chunk exact index -> url key NUL chunk id of the first source
    P:<url key>\0<chunk id>       a chunk's near fingerprint
    S:<scope>:<band>:<hash>       chunk LSH band -> lines "order TAB url key NUL chunk id" of its sources
    B:<group>\0<paragraph key>    document frequency of a line on 2+ pages of its group (JSON)
    G:<group>                     the group's page count, threshold and boilerplate keys (JSON)
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
    m:tables_gen                  next packed SimHash run generation
    l<seq>                        LSH band entry not yet packed: scope, 32 band hashes, cluster
    q<band><scope><block><gen>    packed band run: (band hash, cluster) pairs; block = top 12 bits
    t<band><scope><hash><cluster> removed band entry (tombstone)
    m:bands_gen                   next packed band run generation

Both packed indexes are described in :mod:`scrapy_dedup.store.leveldb.packed_tables`.
Format 2 kept one key per band per representative (``b<band><scope><hash><cluster>``); formats
2 and 3 kept MinHash signatures of 4-byte slots (``scrapy dedup migrate`` brings both to 4).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import plyvel

from scrapy_dedup.store.base import (
    ALIASES,
    BOILERPLATE,
    BOILERPLATE_GROUP,
    CHANGES,
    CHUNK_BANDS,
    CHUNK_EXACT,
    CHUNK_PRINT,
    CHUNKS,
    CLUSTER,
    EMITTED,
    EXACT,
    FRONTIER,
    MEMBERS,
    META,
    MINHASH,
    PENDING,
    RAW,
    STORE_FORMAT,
    TEXT,
    URL,
    VARIANT,
    DedupStore,
    NearCandidates,
    StoreBatch,
    StoreError,
    StoreLocked,
    StoreWriteError,
    band_tuple,
    scope_id,
)
from scrapy_dedup.store.leveldb.holder import held_message, record_holder, release_holder
from scrapy_dedup.store.leveldb.packed_tables import BANDS_SPEC, SIMHASH_SPEC, PackedBands, PackedSimhashTables
from scrapy_dedup.store.leveldb.snapshot import copy_store
from scrapy_dedup.store.records import get_meta

_RUN = struct.Struct(">I")
#: copies attempted while a writer keeps changing the store's files
SNAPSHOT_ATTEMPTS = 5

#: what this backend records in the store parameters about its layout
LAYOUT = {"store_format": STORE_FORMAT, "simhash_layout": SIMHASH_SPEC.layout, "band_layout": BANDS_SPEC.layout}

#: record table -> key prefix
_TABLE_PREFIX = {
    URL: b"u:",
    VARIANT: b"v:",
    CLUSTER: b"c:",
    EXACT: b"h:",
    RAW: b"r:",
    MINHASH: b"n:",
    TEXT: b"x:",
    PENDING: b"o:",
    EMITTED: b"e:",
    CHUNKS: b"C:",
    CHUNK_EXACT: b"H:",
    CHUNK_PRINT: b"P:",
    CHUNK_BANDS: b"S:",
    BOILERPLATE: b"B:",
    BOILERPLATE_GROUP: b"G:",
    CHANGES: b"D:",
    META: b"m:",
}
#: owned set -> (key prefix, separator between owner and member)
_SET_PREFIX = {ALIASES: (b"a:", b"\0"), MEMBERS: (b"k:", b":")}

#: derived keys, rebuilt from the URL records by ``scrapy dedup repair`` and ``migrate``:
#: clusters, memberships, exact and raw indexes, the packed indexes (write-ahead entries, runs,
#: tombstones, counters) and format 2's band keys; and the change history (decide.changes),
#: which starts again at the next settle
DERIVED = (
    b"D:",
    b"c:",
    b"k:",
    b"h:",
    b"r:",
    b"b",
    *(
        prefix
        for spec in (SIMHASH_SPEC, BANDS_SPEC)
        for prefix in (spec.wal, spec.run, spec.tomb, spec.gen_key, spec.gen_key.replace(b"_gen", b"_counts"))
    ),
)


def record_key(table: str, key: str) -> bytes:
    """The key of a record in LevelDB (a migration converts the keys of a table with it)."""
    return _TABLE_PREFIX[table] + key.encode()


def _set_prefix(name: str, owner: str) -> bytes:
    prefix, sep = _SET_PREFIX[name]
    return prefix + owner.encode() + sep


def _cid_bytes(cluster_id: str) -> bytes:
    return bytes.fromhex(cluster_id)


class LevelDBBatch(StoreBatch):
    def __init__(self, store: LevelDBStore, wb: Any, pending: tuple[list, list]) -> None:
        self._store = store
        self._wb = wb
        self._tables = store._tables
        self._bands = store._bands
        self._pending = pending
        self._removed: set[bytes] = set()

    def put(self, table: str, key: str, value: bytes) -> None:
        self._wb.put(record_key(table, key), value)

    def delete(self, table: str, key: str) -> None:
        self._wb.delete(record_key(table, key))

    def add_to_set(self, name: str, owner: str, member: str, value: bytes = b"") -> None:
        self._wb.put(_set_prefix(name, owner) + member.encode(), value)

    def remove_from_set(self, name: str, owner: str, member: str) -> None:
        self._wb.delete(_set_prefix(name, owner) + member.encode())

    def index_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        sid, cid, bands = scope_id(scope), _cid_bytes(cluster_id), band_tuple(bands)
        self._tables.stage_add(self._wb, sid, (simhash,), cid, self._pending[0], self._removed)
        if bands:
            self._bands.stage_add(self._wb, sid, bands, cid, self._pending[1], self._removed)

    def unindex_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        sid, cid, bands = scope_id(scope), _cid_bytes(cluster_id), band_tuple(bands)
        self._tables.stage_remove(self._wb, sid, (simhash,), cid, self._removed)
        if bands:
            self._bands.stage_remove(self._wb, sid, bands, cid, self._removed)


def _open_db(path: str, locked_message: str, **options: Any) -> Any:
    try:
        db = plyvel.DB(path, **options)
    except plyvel.IOError as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(
                f"the dedup store {path!r} is in use {locked_message.format(holder=held_message(path))}"
            ) from exc
        raise _open_error(path, exc) from exc
    except plyvel.Error as exc:
        raise _open_error(path, exc) from exc
    record_holder(path)
    return db


def _detail(exc: Exception) -> str:
    """LevelDB's message (plyvel gives it as bytes)."""
    detail = exc.args[0] if exc.args else exc
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


def _open_error(path: str, exc: Exception) -> StoreError:
    detail = _detail(exc)
    if "No space left" in detail:
        # opening replays the log into a table: LevelDB needs room to open a store
        return StoreWriteError(
            f"cannot open the dedup store {path!r}: no space left on its filesystem (opening writes "
            f"a little); free some space and try again ({detail})"
        )
    return StoreError(f"cannot open the dedup store {path!r}: {detail}")


class LevelDBStore(DedupStore):
    """A store in one LevelDB directory, owned by one process."""

    #: the directory of a snapshot's copy (:meth:`open_snapshot`), removed at close
    _copy: str | None = None

    def __init__(self, path: str, params: dict[str, Any], *, cache_mb: int = 16) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        # Memory is bounded by the block cache and two write buffers, whatever the size of
        # the store: a crawl of millions of URLs stays flat.
        self._db = _open_db(
            path,
            "by another process, {holder} (LevelDB allows one process per store: wait for it to finish, "
            "or read a copy)",
            create_if_missing=True,
            lru_cache_size=cache_mb * 1024 * 1024,
            write_buffer_size=max(1, min(cache_mb // 2, 16)) * 1024 * 1024,
            bloom_filter_bits=10,
        )
        self.params = self._check_params({**params, **LAYOUT})
        self._read_run()
        self._open_indexes()
        self._writer = True

    @classmethod
    def open_existing(cls, path: str) -> LevelDBStore:
        """Open a store for reading with the parameters it was written with."""
        if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "CURRENT")):
            raise StoreError(f"no dedup store at {path!r}")
        store = cls.__new__(cls)
        store.path = path
        store._db = _open_db(
            path,
            "by a running crawl, {holder} (LevelDB allows one process per store); try again when it ends",
            create_if_missing=False,
        )
        store.params = get_meta(store, "params") or {}
        store._check_format(store.params)
        store._read_run()
        store._open_indexes()
        return store

    @classmethod
    def open_snapshot(cls, path: str, **options: Any) -> LevelDBStore:
        """A copy of the store's files, opened (:mod:`scrapy_dedup.store.leveldb.snapshot`):
        LevelDB lets one process open a store, and the copy reads the same without a space of
        its own on a full filesystem. Closing it removes the copy. StoreLocked when no
        consistent copy could be taken while the writer went on."""
        last_error: Exception | None = None
        for _ in range(SNAPSHOT_ATTEMPTS):
            copy_dir = tempfile.mkdtemp(prefix="scrapy-dedup-snapshot-")
            try:
                copy_store(path, copy_dir)
                # LevelDB refuses to open a copy that lacks a table its manifest names
                store = cls.open_existing(copy_dir, **options)
            except (OSError, StoreError, plyvel.Error) as exc:
                last_error = exc
                shutil.rmtree(copy_dir, ignore_errors=True)
                continue
            store._copy = copy_dir
            return store
        raise StoreLocked(
            f"the dedup store {path!r} is in use by a running crawl and no consistent snapshot "
            f"could be taken ({' '.join(str(last_error).split())}); try again when the crawl ends"
        )

    def _open_indexes(self) -> None:
        self._tables = PackedSimhashTables(self._db)
        self._bands = PackedBands(self._db)

    # -- life cycle ---------------------------------------------------------
    def close(self) -> None:
        if not self._db.closed:
            if getattr(self, "_writer", False):
                # the end of a crawl run: a good moment to drop what updates and deletions left
                for index in (self._tables, self._bands):
                    if index.needs_compaction():
                        try:
                            index.compact()
                        except plyvel.Error:
                            break  # safe to leave for the next run: every step keeps the index correct
            release_holder(self.path)
            self._db.close()
            if self._copy is not None:
                shutil.rmtree(self._copy, ignore_errors=True)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn a failed write into one StoreWriteError that names the store and the cause.

        LevelDB applies nothing of a batch whose log write failed, and refuses every later
        write of this process: the store stays as it was before the failure.
        """
        try:
            yield
        except plyvel.IOError as exc:
            detail = _detail(exc)
            cause = detail.rsplit(": ", 1)[-1] if ": " in detail else detail
            raise StoreWriteError(f"cannot write to the dedup store {self.path!r}: {cause} ({detail})") from exc

    @contextmanager
    def batch(self, later: bool = False) -> Iterator[LevelDBBatch]:
        pending: tuple[list, list] = ([], [])
        with self._writing():
            with self._db.write_batch(transaction=True) as wb:
                yield LevelDBBatch(self, wb, pending)
            # only what was written reaches the indexes' memory
            self._tables.apply(pending[0])
            self._bands.apply(pending[1])

    # -- records ------------------------------------------------------------
    def get(self, table: str, key: str) -> bytes | None:
        return self._db.get(record_key(table, key))

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        prefix = _TABLE_PREFIX[table]
        for k, value in self._db.iterator(prefix=prefix):
            yield k[len(prefix):].decode(), value

    def count(self, table: str) -> int:
        prefix = b"f:" if table == FRONTIER else _TABLE_PREFIX[table]
        return sum(1 for _ in self._db.iterator(prefix=prefix, include_value=False))

    def put_if_absent(self, table: str, key: str, value: bytes) -> bytes | None:
        k = record_key(table, key)
        previous = self._db.get(k)
        if previous is None:
            with self._writing():
                self._db.put(k, value)
        return previous

    def set_members_many(self, name: str, owners: Sequence[str]) -> list[list[tuple[str, bytes]]]:
        # one iterator moved to each set in turn: one made for each cost 3.5 times as much
        found = []
        with self._db.iterator() as rows:
            for owner in owners:
                prefix, pairs = _set_prefix(name, owner), []
                rows.seek(prefix)
                for k, value in rows:
                    if not k.startswith(prefix):
                        break
                    pairs.append((k[len(prefix):].decode(), value))
                found.append(pairs)
        return found

    # -- check, repair, migrate: LevelDB's own keys ---------------------------
    def set_entries(self, name: str) -> Iterator[tuple[str, str]]:
        """``(owner, member)`` of every owned set ``name``, an owner's that no longer exists too."""
        prefix, sep = _SET_PREFIX[name]
        for k in self._db.iterator(prefix=prefix, include_value=False):
            owner, _, member = k[len(prefix):].decode().partition(sep.decode())
            yield owner, member

    def packed_entries(self, index: str) -> Iterator[tuple[int, str]]:
        """``(value, cluster id)`` of every live entry of a packed index: ``"simhash"`` (the
        SimHash tables: the fingerprint) or ``"bands"`` (the LSH bands: the first band hash)."""
        packed = {"simhash": self._tables, "bands": self._bands}[index]
        for _, value, cid in packed.live_entries():
            yield value, cid.hex()

    def clear_derived(self) -> Counter[str]:
        """Delete every key :data:`DERIVED` lists, and start the indexes' memory again from empty
        ones (for a rebuild from the URL records); returns how many keys went, per prefix."""
        removed: Counter[str] = Counter()
        with self._writing():
            for prefix in DERIVED:
                with self._db.write_batch() as wb:
                    for k in self._db.iterator(prefix=prefix, include_value=False):
                        wb.delete(k)
                        removed[prefix.decode()] += 1
        self._open_indexes()
        return removed

    def delete_meta(self, name: str) -> None:
        with self._writing():
            self._db.delete(record_key(META, name))

    # -- counters -----------------------------------------------------------
    def increment_meta(self, name: str) -> int:
        k = record_key(META, name)
        value = int(json.loads(self._db.get(k) or b"0")) + 1  # one process writes the store
        with self._writing():
            self._db.put(k, json.dumps(value).encode())
        return value

    # -- frontier -----------------------------------------------------------
    def _frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
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

    # -- near-duplicate index -----------------------------------------------
    def near_candidates(
        self, scope: str, simhash: int | None, bands: Iterable[int], max_distance: int | None = None
    ) -> NearCandidates:
        sid, bands = scope_id(scope), band_tuple(bands)
        near = [] if simhash is None else [(fp, cid.hex()) for fp, cid in self._tables.near(sid, simhash, max_distance)]
        return NearCandidates(near, lambda: {cid.hex() for cid in self._bands.colliding(sid, bands)} if bands else set())
