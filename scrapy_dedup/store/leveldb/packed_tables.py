"""Packed index tables of the LevelDB backend: many small entries in few keys.

The SimHash permutation tables and the MinHash LSH bands are the same kind of
index: an entry (scope, one or more 64-bit values, cluster id) is looked up
through several tables, each keyed by a slice of a value (a *block*).  One
key per table entry (the straightforward layout) makes an insert write one
key per table, and LevelDB's compactions rewrite them again and again.  Here
entries are written in packed runs instead:

- a new entry goes to a write-ahead key ``<wal><seq>`` in the decision's own
  atomic batch, and to memory: level 0, unsorted, scanned with numpy;
- full level 0s merge into level 1, kept sorted by block per table, so a lookup
  reads one slice per table;
- a full level 1 is written out as one key per (table, scope, block) and
  generation, ``<run><table><scope><block><gen>``, holding packed
  (value, cluster id) pairs; then its write-ahead keys are deleted.  A crash
  in between replays them: the same pairs may then be on disk twice, which a
  lookup folds together;
- removing an entry writes a tombstone ``<tomb>[<column>]<scope><value><cluster id>``
  that lookups check for the few candidates they return; adding the same entry
  again deletes it;
- compaction (:meth:`PackedTables.compact`, run when a crawl closes the store once
  tombstones pass ``COMPACT_RATIO`` of the entries written out) rewrites each
  (table, scope, block) as one run without the removed entries, then deletes the
  tombstones: a long-lived store with many updates stays as small and as fast as a
  fresh one with the same documents.

Memory is bounded by the two levels whatever the number of documents: each is
allocated once at its bound and reused after every merge and write-out; a lookup
reads at most one key per table and generation of level 1 written out.  The two
indexes are :data:`SIMHASH_SPEC` and :data:`BANDS_SPEC`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scrapy_dedup.core.bands import BANDS, BLOCK_BITS, BLOCKS

_SEQ = struct.Struct(">Q")
#: tombstones per entry written out above which closing the store compacts an index
COMPACT_RATIO = 0.2


def _malloc_trim() -> Callable[[int], Any]:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return lambda pad: 0


_trim = _malloc_trim()


def release_freed_memory() -> None:
    """Give the memory the allocator holds free back to the system (glibc's ``malloc_trim``).

    A write-out frees sorted copies of the level (megabytes a table) and the keys it wrote, and
    glibc keeps much of it in its heap. Measured on the store alone, 2 x 10^5 documents: private
    memory from 68,000 documents on grew 15 MB per 10^5 without it, 10 MB with it. Called once a
    level is written out (every 65,536 or 2^19 documents; a few milliseconds).
    """
    _trim(0)


def _u64(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


@dataclass(frozen=True)
class TableSpec:
    """What one packed index stores and how it slices it."""

    layout: str
    #: number of tables; each is keyed by a block of one value of the entry
    tables: int
    #: values per entry: 1 (every table slices the same value) or ``tables`` (one each)
    width: int
    block_bits: int
    #: key prefixes: write-ahead entries, packed runs, tombstones; and the generation counter
    wal: bytes
    run: bytes
    tomb: bytes
    gen_key: bytes
    #: shift of table t's block within its value
    shift: Callable[[int], int]
    l0_max: int
    l1_max: int

    def column(self, table: int) -> int:
        return table if self.width > 1 else 0

    def blocks(self, values: np.ndarray, table: int) -> np.ndarray:
        mask = np.uint64((1 << self.block_bits) - 1)
        return ((values >> np.uint64(self.shift(table))) & mask).astype(np.int64)

    def block(self, value: int, table: int) -> int:
        return (value >> self.shift(table)) & ((1 << self.block_bits) - 1)

    @property
    def entry(self) -> struct.Struct:
        """Write-ahead value: scope id, the values, cluster id (little-endian u64s)."""
        return struct.Struct("<" + "Q" * (self.width + 2))


#: The four 16-bit-block SimHash tables: table t is keyed by bits 16t..16t+15.
SIMHASH_SPEC = TableSpec(
    layout="packed-1",
    tables=BLOCKS,
    width=1,
    block_bits=BLOCK_BITS,
    wal=b"w",
    run=b"p",
    tomb=b"z",
    gen_key=b"m:tables_gen",
    shift=lambda table: BLOCK_BITS * table,
    # 56 bytes a document in level 1 (entry, block and order per table): about 32 MB at most
    l0_max=8192,
    l1_max=1 << 19,
)

#: The MinHash LSH bands: band t is keyed by the top 12 bits of its hash.  12 bits
#: and 2^16 documents a run put 16 entries (256 bytes) in a key; 472 bytes a document in
#: level 1 (entry, block and order per band): about 33 MB at most.
BANDS_SPEC = TableSpec(
    layout="bands-packed-1",
    tables=BANDS,
    width=BANDS,
    block_bits=12,
    wal=b"l",
    run=b"q",
    tomb=b"t",
    gen_key=b"m:bands_gen",
    shift=lambda table: 64 - 12,
    l0_max=2048,
    l1_max=1 << 16,
)


class _Level:
    """Entries in memory: scope id, values (n x width), cluster id, write-ahead seq.

    Allocated once at its capacity and reused after each merge or write-out: the process
    touches the same pages again instead of freeing arrays and allocating bigger ones
    (glibc kept much of what such merges freed, and private memory swung by tens of MB).
    """

    def __init__(self, capacity: int, width: int) -> None:
        self.sid = np.empty(capacity, np.uint64)
        self.vals = np.empty((capacity, width), np.uint64)
        self.cid = np.empty(capacity, np.uint64)
        self.seq = np.empty(capacity, np.uint64)
        self.n = 0

    def append(self, sid: int, values: Sequence[int], cid: int, seq: int) -> None:
        i = self.n
        self.sid[i], self.cid[i], self.seq[i] = sid, cid, seq
        self.vals[i] = values
        self.n += 1

    def extend(self, other: _Level) -> None:
        """Copy ``other``'s entries after this level's."""
        start, end = self.n, self.n + other.n
        self.sid[start:end], self.cid[start:end] = other.sid[: other.n], other.cid[: other.n]
        self.seq[start:end], self.vals[start:end] = other.seq[: other.n], other.vals[: other.n]
        self.n = end


class PackedTables:
    """One packed index of one store (see the module docstring)."""

    def __init__(self, db: Any, spec: TableSpec, *, l0_max: int | None = None, l1_max: int | None = None) -> None:
        self.db = db
        self.spec = spec
        self.l0_max = l0_max or spec.l0_max
        self.l1_max = l1_max or spec.l1_max
        self._entry = spec.entry
        raw_gen = db.get(spec.gen_key)
        self.gen = int(raw_gen) if raw_gen else 0
        self.l0 = _Level(self.l0_max, spec.width)
        # level 1 takes whole level 0s: it may pass its bound by one before it is written out
        capacity = self.l1_max + self.l0_max
        self.l1 = _Level(capacity, spec.width)
        # per table: the block of each entry (in entry order), the entries in block order,
        # and where each block's run starts in that order
        self.l1_blocks = [np.empty(capacity, np.uint16) for _ in range(spec.tables)]
        self.l1_order = [np.empty(capacity, np.uint32) for _ in range(spec.tables)]
        self.l1_starts = [np.zeros((1 << spec.block_bits) + 1, np.int64) for _ in range(spec.tables)]
        self.seq = 0
        # until something is removed, an insert need not look for a tombstone to lift
        self.any_removed = next(db.iterator(prefix=spec.tomb, include_value=False), None) is not None
        # entries written out to runs, and removals, since the last compaction (when to compact)
        self._counts_key = spec.gen_key.replace(b"_gen", b"_counts")
        raw_counts = db.get(self._counts_key)
        self.on_disk, self.removed = (int(n) for n in raw_counts.split(b",")) if raw_counts else (0, 0)
        self._replay()

    # -- writing ------------------------------------------------------------
    def stage_add(self, wb: Any, sid: bytes, values: Sequence[int], cid: bytes, pending: list, removed: set) -> None:
        """Write-ahead an entry in the batch; memory is updated by ``apply`` after it commits.

        ``removed`` holds the tombstones staged earlier in the same batch (a batch
        cannot read its own writes).
        """
        self.seq += 1
        wb.put(self.spec.wal + _SEQ.pack(self.seq), self._entry.pack(_u64(sid), *values, _u64(cid)))
        if self.any_removed or removed:
            for column, value in enumerate(values):
                tombstone = self._tombstone(column, sid, value, cid)
                # a read is cheaper than a write for the usual case, no tombstone (bloom filter)
                if tombstone in removed or (self.any_removed and self.db.get(tombstone) is not None):
                    wb.delete(tombstone)
                    removed.discard(tombstone)
        pending.append((_u64(sid), tuple(values), _u64(cid), self.seq))

    def stage_remove(self, wb: Any, sid: bytes, values: Sequence[int], cid: bytes, removed: set) -> None:
        self.any_removed = True
        # a count for deciding when to compact, not an exact one (a failed batch leaves it high)
        self.removed += 1
        for column, value in enumerate(values):
            tombstone = self._tombstone(column, sid, value, cid)
            wb.put(tombstone, b"")
            removed.add(tombstone)

    def apply(self, pending: Iterable[tuple[int, Sequence[int], int, int]]) -> None:
        for sid, values, cid, seq in pending:
            self.l0.append(sid, values, cid, seq)
            if self.l0.n >= self.l0_max:
                self._merge_l0()

    def _merge_l0(self) -> None:
        spec, l1, base = self.spec, self.l1, self.l1.n
        l1.extend(self.l0)
        self.l0.n = 0
        if l1.n >= self.l1_max:
            self._flush_l1()
            return
        for table in range(spec.tables):
            blocks = self.l1_blocks[table]
            blocks[base : l1.n] = spec.blocks(l1.vals[base : l1.n, spec.column(table)], table)
            # block order, entry order within a block: a stable sort of 16-bit keys is a radix
            # sort, O(n), into the level's own array
            self.l1_order[table][: l1.n] = np.argsort(blocks[: l1.n], kind="stable")
            self.l1_starts[table][1:] = np.cumsum(np.bincount(blocks[: l1.n], minlength=1 << spec.block_bits))

    def _reset_l1(self) -> None:
        self.l1.n = 0
        for starts in self.l1_starts:
            starts[:] = 0

    def _flush_l1(self) -> None:
        gen, l1 = self.gen.to_bytes(4, "big"), self.l1
        packed = np.empty((l1.n, 2), np.uint64)
        for table in range(self.spec.tables):
            values = l1.vals[: l1.n, self.spec.column(table)]
            blocks = self.spec.blocks(values, table)
            order = np.lexsort((blocks, l1.sid[: l1.n]))
            sids, blks = l1.sid[order], blocks[order]
            packed[:, 0], packed[:, 1] = values[order], l1.cid[order]
            raw = packed.astype("<u8").tobytes()
            cuts = np.flatnonzero((np.diff(sids) != 0) | (np.diff(blks) != 0)) + 1
            starts, ends = [0, *cuts.tolist()], [*cuts.tolist(), len(order)]
            for part in range(0, len(starts), 16384):
                with self.db.write_batch() as wb:
                    for i in range(part, min(part + 16384, len(starts))):
                        s, e = starts[i], ends[i]
                        key = self._run_prefix(table, int(sids[s]).to_bytes(8, "little"), int(blks[s])) + gen
                        wb.put(key, raw[16 * s : 16 * e])
        # the run is on disk: its write-ahead keys go, and the generation moves on, together
        with self.db.write_batch(transaction=True) as wb:
            for seq in l1.seq[: l1.n].tolist():
                wb.delete(self.spec.wal + _SEQ.pack(seq))
            wb.put(self.spec.gen_key, str(self.gen + 1).encode())
            self.on_disk += l1.n
            wb.put(self._counts_key, self._counts())
        self.gen += 1
        self._reset_l1()
        release_freed_memory()

    def _counts(self) -> bytes:
        return f"{self.on_disk},{self.removed}".encode()

    # -- compaction ---------------------------------------------------------
    def needs_compaction(self) -> bool:
        return self.removed > 0 and self.removed >= COMPACT_RATIO * max(self.on_disk, 1)

    def compact(self) -> int:
        """Drop removed entries from the packed runs, then their tombstones; returns how many.

        Each (table, scope, block) is rewritten as one run under a new generation; the old
        runs are deleted after the new ones are written and the tombstones last, so a crash at
        any point leaves a correct index (copies of a pair fold together in a lookup, removed
        pairs are still tombstoned).  Removed entries still in the write-ahead keys go too;
        the in-memory levels are rebuilt from what stays.
        """
        dead = self._tombstones()
        if not dead:
            self.removed = 0
            self.db.put(self._counts_key, self._counts())
            return 0
        gen = self.gen.to_bytes(4, "big")
        # the next flush must not reuse the generation the rewritten runs take
        self.gen += 1
        self.db.put(self.spec.gen_key, str(self.gen).encode())
        kept = [self._compact_table(table, dead.get(self.spec.column(table)), gen) for table in range(self.spec.tables)]
        wal = list(self.db.iterator(prefix=self.spec.wal))
        if wal and 0 in dead:
            entries = np.frombuffer(b"".join(v for _, v in wal), dtype="<u8").reshape(-1, self.spec.width + 2)
            # an entry is removed from every column at once: its first value tells
            first = np.ascontiguousarray(entries[:, [0, 1, -1]]).view("V24").ravel()
            with self.db.write_batch() as wb:
                for i in np.flatnonzero(np.isin(first, dead[0])).tolist():
                    wb.delete(wal[i][0])
        with self.db.write_batch() as wb:
            for key in self.db.iterator(prefix=self.spec.tomb, include_value=False):
                wb.delete(key)
            self.on_disk, self.removed = kept[0], 0
            wb.put(self._counts_key, self._counts())
        self.any_removed = False
        self.l0.n = 0
        self._reset_l1()
        self._replay()
        return len(dead[0]) if 0 in dead else sum(len(d) for d in dead.values())

    def _compact_table(self, table: int, dead: np.ndarray | None, gen: bytes) -> int:
        """Rewrite one table's runs without ``dead`` entries (or copies); returns entries kept."""
        keys, values = [], []
        for key, value in self.db.iterator(prefix=self.spec.run + bytes((table,))):
            keys.append(key)
            values.append(value)
        if not keys:
            return 0
        prefix_of: dict[bytes, int] = {}
        groups = np.array([prefix_of.setdefault(k[:-4], len(prefix_of)) for k in keys], np.uint64)
        counts = np.array([len(v) // 16 for v in values])
        pairs = np.frombuffer(b"".join(values), dtype="<u8").reshape(-1, 2)
        # one (run, scope, value, cluster) row per stored pair; a run is (table, scope, block)
        rows = np.empty((len(pairs), 4), "<u8")
        rows[:, 0] = np.repeat(groups, counts)
        rows[:, 1] = np.repeat(np.array([_u64(k[2:10]) for k in keys], np.uint64), counts)
        rows[:, 2:] = pairs
        if dead is not None:
            rows = rows[~np.isin(np.ascontiguousarray(rows[:, 1:]).view("V24").ravel(), dead)]
        # copies of a pair (a replayed flush) fold together; rows come out grouped by run
        rows = np.unique(np.ascontiguousarray(rows).view("V32").ravel()).view("<u8").reshape(-1, 4)
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        cuts = np.flatnonzero(np.diff(rows[:, 0])) + 1
        firsts = rows[np.r_[0, cuts], 0].tolist() if len(rows) else []  # every entry dead: no run
        bounds = dict(zip(firsts, zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)])))
        wb = self.db.write_batch()
        for n, (prefix, group) in enumerate(prefix_of.items(), 1):
            if group in bounds:
                start, end = bounds[group]
                wb.put(prefix + gen, np.ascontiguousarray(rows[start:end, 2:]).tobytes())
            if n % 4096 == 0:
                wb.write()
                wb = self.db.write_batch()
        # the new runs are written (or in this batch): the old ones can go
        for key in keys:
            wb.delete(key)
        wb.write()
        return len(rows)

    def _tombstones(self) -> dict[int, np.ndarray]:
        """Per column, every tombstone as a (scope id, value, cluster id) record for ``np.isin``."""
        head = 1 if self.spec.width > 1 else 0
        raw = b"".join(self.db.iterator(prefix=self.spec.tomb, include_value=False))
        if not raw:
            return {}
        keys = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 1 + head + 24)
        columns = keys[:, 1] if head else np.zeros(len(keys), np.uint8)
        body = keys[:, 1 + head :]
        out = np.empty((len(keys), 3), "<u8")
        out[:, 0] = np.ascontiguousarray(body[:, 0:8]).view("<u8").ravel()
        out[:, 1] = np.ascontiguousarray(body[:, 8:16]).view(">u8").ravel()
        out[:, 2] = np.ascontiguousarray(body[:, 16:24]).view("<u8").ravel()
        records = out.view("V24").ravel()
        return {int(c): records[columns == c] for c in np.unique(columns).tolist()}

    def live_entries(self) -> Iterator[tuple[bytes, int, bytes]]:
        """(scope id, first value, cluster id) of every live entry, each once (for checks)."""
        seen: set[tuple[bytes, int, bytes]] = set()

        def entries() -> Iterator[tuple[bytes, int, bytes]]:
            for _, value in self.db.iterator(prefix=self.spec.wal):
                sid, first, *_, cid = self._entry.unpack(value)
                yield sid.to_bytes(8, "little"), first, cid.to_bytes(8, "little")
            for key, value in self.db.iterator(prefix=self.spec.run + b"\x00"):
                sid = key[2:10]
                for i in range(0, len(value) - 15, 16):
                    yield sid, int.from_bytes(value[i : i + 8], "little"), value[i + 8 : i + 16]

        for entry in entries():
            if entry in seen or self.db.get(self._tombstone(0, *entry)) is not None:
                continue
            seen.add(entry)
            yield entry

    def _replay(self) -> None:
        pending = []
        for key, value in self.db.iterator(prefix=self.spec.wal):
            sid, *values, cid = self._entry.unpack(value)
            seq = _SEQ.unpack(key[1:])[0]
            pending.append((sid, values, cid, seq))
            self.seq = max(self.seq, seq)
        self.apply(pending)

    # -- reading ------------------------------------------------------------
    def find(
        self, sid: bytes, query: Sequence[int], keep: Callable[[np.ndarray, int], np.ndarray]
    ) -> Iterator[tuple[int, int, bytes]]:
        """(column, value, cluster id) of live entries sharing a block with ``query``, each once.

        ``query`` holds one value per column; ``keep(values, query value)`` filters
        the candidates of a column.
        """
        spec, sid_n, l0 = self.spec, np.uint64(_u64(sid)), self.l0
        found: list[tuple[int, np.ndarray, np.ndarray]] = []
        for table in range(spec.tables):
            column = spec.column(table)
            q = query[column]
            block = spec.block(q, table)
            if l0.n:
                values = l0.vals[: l0.n, column]
                hit = (spec.blocks(values, table) == block) & (l0.sid[: l0.n] == sid_n)
                found.append((column, values[hit], l0.cid[: l0.n][hit]))
            lo, hi = int(self.l1_starts[table][block]), int(self.l1_starts[table][block + 1])
            if hi > lo:
                idx = self.l1_order[table][lo:hi]
                idx = idx[self.l1.sid[idx] == sid_n]
                found.append((column, self.l1.vals[idx, column], self.l1.cid[idx]))
            chunks = b"".join(self.db.iterator(prefix=self._run_prefix(table, sid, block), include_key=False))
            if chunks:
                pairs = np.frombuffer(chunks, dtype="<u8").reshape(-1, 2)
                found.append((column, pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)))
        seen: set[tuple[int, int, int]] = set()
        for column, values, cids in found:
            kept = keep(values, query[column])
            for v, c in zip(values[kept].tolist(), cids[kept].tolist()):
                if (column, v, c) in seen:
                    continue
                seen.add((column, v, c))
                cid = c.to_bytes(8, "little")
                if not self.any_removed or self.db.get(self._tombstone(column, sid, v, cid)) is None:
                    yield column, v, cid

    def _run_prefix(self, table: int, sid: bytes, block: int) -> bytes:
        return self.spec.run + bytes((table,)) + sid + block.to_bytes(2, "big")

    def _tombstone(self, column: int, sid: bytes, value: int, cid: bytes) -> bytes:
        # one value per entry (SimHash): no column byte, the layout the tables always had
        head = self.spec.tomb + (bytes((column,)) if self.spec.width > 1 else b"")
        return head + sid + value.to_bytes(8, "big") + cid


class PackedSimhashTables(PackedTables):
    """The four SimHash tables: an entry is one fingerprint."""

    def __init__(self, db: Any, *, l0_max: int | None = None, l1_max: int | None = None) -> None:
        super().__init__(db, SIMHASH_SPEC, l0_max=l0_max, l1_max=l1_max)

    def near(self, sid: bytes, fp: int, max_distance: int | None) -> Iterator[tuple[int, bytes]]:
        """(simhash, cluster id) of live entries sharing a block with ``fp`` (within ``max_distance``)."""
        q = np.uint64(fp)

        def keep(values: np.ndarray, _: int) -> np.ndarray:
            if max_distance is None:
                return np.ones(len(values), bool)
            return np.bitwise_count(values ^ q) <= max_distance

        for _, value, cid in self.find(sid, (fp,), keep):
            yield value, cid


class PackedBands(PackedTables):
    """The MinHash LSH bands: an entry is one hash per band."""

    def __init__(self, db: Any, *, l0_max: int | None = None, l1_max: int | None = None) -> None:
        super().__init__(db, BANDS_SPEC, l0_max=l0_max, l1_max=l1_max)

    def colliding(self, sid: bytes, bands: Sequence[int]) -> set[bytes]:
        """Cluster ids of live entries that equal ``bands`` in at least one band.

        Like :meth:`find`, with the memory levels compared in one pass over all bands
        and a point read per band and generation on disk: a band hash matches exactly,
        so the bloom filters answer most reads without touching a table file.
        """
        spec, sid_n, l0 = self.spec, np.uint64(_u64(sid)), self.l0
        query = np.array(bands, np.uint64)
        hits: list[tuple[int, int]] = []  # (band, cluster id)
        if l0.n:
            rows, cols = np.nonzero((l0.vals[: l0.n] == query) & (l0.sid[: l0.n] == sid_n)[:, None])
            hits += zip(cols.tolist(), l0.cid[rows].tolist())
        gens = [g.to_bytes(4, "big") for g in range(self.gen)]
        for band, band_hash in enumerate(bands):
            block = spec.block(band_hash, band)
            lo, hi = int(self.l1_starts[band][block]), int(self.l1_starts[band][block + 1])
            if hi > lo:
                idx = self.l1_order[band][lo:hi]
                idx = idx[(self.l1.vals[idx, band] == query[band]) & (self.l1.sid[idx] == sid_n)]
                hits += ((band, c) for c in self.l1.cid[idx].tolist())
            prefix = self._run_prefix(band, sid, block)
            for gen in gens:
                raw = self.db.get(prefix + gen)
                if raw is not None:
                    pairs = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
                    hits += ((band, c) for c in pairs[pairs[:, 0] == query[band], 1].tolist())
        found: set[bytes] = set()
        for band, c in set(hits):
            cid = c.to_bytes(8, "little")
            if cid in found:
                continue
            if not self.any_removed or self.db.get(self._tombstone(band, sid, bands[band], cid)) is None:
                found.add(cid)
        return found
