"""The SimHash permutation tables of the LevelDB backend, packed (layout ``packed-1``).

One key per table entry (the straightforward layout) makes a lookup read
4 x N/65,536 keys and an insert write 4: too slow at tens of millions of
documents.  Here entries are written in packed runs instead:

- a new entry goes to a write-ahead key ``w<seq>`` in the decision's own atomic
  batch, and to memory: level 0, unsorted, scanned with numpy;
- full level 0s merge into level 1, kept sorted by block per table, so a lookup
  reads one slice per table;
- a full level 1 is written out as one key per (table, scope, block) and
  generation, ``p<table><scope><block><gen>``, holding packed
  (simhash, cluster id) pairs; then its write-ahead keys are deleted.  A crash
  in between replays them: the same pairs may then be on disk twice, which a
  lookup folds together;
- removing an entry writes a tombstone ``z<scope><simhash><cluster id>`` that
  lookups check for the few candidates within the distance asked for; adding
  the same entry again deletes it;
- compaction (:meth:`PackedSimhashTables.compact`, run when the store closes once
  tombstones pass ``COMPACT_RATIO`` of the entries on disk) rewrites each
  (table, scope, block) as one run without the removed entries, then deletes the
  tombstones: a long-lived store with many updates stays as small and as fast as a
  fresh one with the same documents.

Memory is bounded by the two levels (about 40 MB at the default sizes),
whatever the number of documents; a lookup reads at most one key per table and
generation of level 1 written out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from scrapy_dedup.core.bands import BLOCK_BITS, BLOCKS

LAYOUT = "packed-1"

_SEQ = struct.Struct(">Q")
_ENTRY = struct.Struct("<QQQ")  # scope id, simhash, cluster id
_BLOCK_MASK = np.uint64((1 << BLOCK_BITS) - 1)
_GEN_KEY = b"m:tables_gen"
#: entries written out to packed runs, and tombstones written, since the last compaction
_COUNTS_KEY = b"m:tables_counts"
#: tombstones per entry on disk above which closing the store compacts the tables
COMPACT_RATIO = 0.2


def _u64(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


class _Level:
    """Entries in memory: (scope id, simhash, cluster id) as three uint64 arrays."""

    def __init__(self, capacity: int) -> None:
        self.sid = np.empty(capacity, np.uint64)
        self.fp = np.empty(capacity, np.uint64)
        self.cid = np.empty(capacity, np.uint64)
        self.seq = np.empty(capacity, np.uint64)
        self.n = 0

    def append(self, sid: int, fp: int, cid: int, seq: int) -> None:
        if self.n == len(self.fp):
            for name in ("sid", "fp", "cid", "seq"):
                old = getattr(self, name)
                grown = np.empty(2 * len(old), np.uint64)
                grown[: self.n] = old[: self.n]
                setattr(self, name, grown)
        i = self.n
        self.sid[i], self.fp[i], self.cid[i], self.seq[i] = sid, fp, cid, seq
        self.n += 1


class PackedSimhashTables:
    """The four 16-bit-block tables of one store."""

    def __init__(self, db: Any, *, l0_max: int = 8192, l1_max: int = 1 << 19) -> None:
        self.db = db
        self.l0_max, self.l1_max = l0_max, l1_max
        raw_gen = db.get(_GEN_KEY)
        self.gen = int(raw_gen) if raw_gen else 0
        self.l0 = _Level(l0_max)
        self._reset_l1()
        self.seq = 0
        # until something is removed, an insert need not look for a tombstone to lift
        self.any_removed = next(db.iterator(prefix=b"z", include_value=False), None) is not None
        raw_counts = db.get(_COUNTS_KEY)
        self.on_disk, self.removed = (int(n) for n in raw_counts.split(b",")) if raw_counts else (0, 0)
        self._replay()

    # -- writing ------------------------------------------------------------
    def stage_add(self, wb: Any, sid: bytes, fp: int, cid: bytes, pending: list, removed: set) -> None:
        """Write-ahead an entry in the batch; memory is updated by ``apply`` after it commits.

        ``removed`` holds the tombstones staged earlier in the same batch (a batch
        cannot read its own writes).
        """
        self.seq += 1
        entry = _ENTRY.pack(_u64(sid), fp, _u64(cid))
        wb.put(b"w" + _SEQ.pack(self.seq), entry)
        tombstone = _tombstone(sid, fp, cid)
        # a read is cheaper than a write for the usual case, no tombstone (bloom filter)
        if tombstone in removed or (self.any_removed and self.db.get(tombstone) is not None):
            wb.delete(tombstone)
            removed.discard(tombstone)
        pending.append((_u64(sid), fp, _u64(cid), self.seq))

    def stage_remove(self, wb: Any, sid: bytes, fp: int, cid: bytes, removed: set) -> None:
        self.any_removed = True
        tombstone = _tombstone(sid, fp, cid)
        wb.put(tombstone, b"")
        removed.add(tombstone)
        # a count for deciding when to compact, not an exact one (a failed batch leaves it high)
        self.removed += 1

    def apply(self, pending: Iterable[tuple[int, int, int, int]]) -> None:
        for sid, fp, cid, seq in pending:
            self.l0.append(sid, fp, cid, seq)
            if self.l0.n >= self.l0_max:
                self._merge_l0()

    def _merge_l0(self) -> None:
        l0, n0, base = self.l0, self.l0.n, len(self.l1_fp)
        new_fp = l0.fp[:n0].copy()
        self.l1_sid = np.concatenate([self.l1_sid, l0.sid[:n0]])
        self.l1_fp = np.concatenate([self.l1_fp, new_fp])
        self.l1_cid = np.concatenate([self.l1_cid, l0.cid[:n0]])
        self.l1_seq = np.concatenate([self.l1_seq, l0.seq[:n0]])
        self.l0 = _Level(self.l0_max)
        if len(self.l1_fp) >= self.l1_max:
            self._flush_l1()
            return
        for table in range(BLOCKS):
            # merge the new entries into the table's block order: O(n), not a full sort
            blocks = _blocks(new_fp, table).astype(np.uint16)
            order = np.argsort(blocks, kind="stable")
            blocks = blocks[order]
            at = np.searchsorted(self.l1_blocks[table], blocks, side="right")
            self.l1_blocks[table] = np.insert(self.l1_blocks[table], at, blocks)
            self.l1_order[table] = np.insert(self.l1_order[table], at, (order + base).astype(np.uint32))
            self.l1_starts[table][1:] = np.cumsum(np.bincount(self.l1_blocks[table], minlength=1 << BLOCK_BITS))

    def _reset_l1(self) -> None:
        empty = np.empty(0, np.uint64)
        self.l1_sid, self.l1_fp, self.l1_cid, self.l1_seq = empty, empty, empty, empty
        # per table: block of each entry in block order, the entry indices in that order,
        # and where each block's run starts
        self.l1_blocks = [np.empty(0, np.uint16) for _ in range(BLOCKS)]
        self.l1_order = [np.empty(0, np.uint32) for _ in range(BLOCKS)]
        self.l1_starts = [np.zeros((1 << BLOCK_BITS) + 1, np.int64) for _ in range(BLOCKS)]

    def _flush_l1(self) -> None:
        gen = self.gen.to_bytes(4, "big")
        packed = np.empty((len(self.l1_fp), 2), np.uint64)
        for table in range(BLOCKS):
            blocks = _blocks(self.l1_fp, table)
            order = np.lexsort((blocks, self.l1_sid))
            sids, blks = self.l1_sid[order], blocks[order]
            packed[:, 0], packed[:, 1] = self.l1_fp[order], self.l1_cid[order]
            raw = packed.astype("<u8").tobytes()
            cuts = np.flatnonzero((np.diff(sids) != 0) | (np.diff(blks) != 0)) + 1
            starts, ends = [0, *cuts.tolist()], [*cuts.tolist(), len(order)]
            for part in range(0, len(starts), 16384):
                with self.db.write_batch() as wb:
                    for i in range(part, min(part + 16384, len(starts))):
                        s, e = starts[i], ends[i]
                        key = _chunk_prefix(table, int(sids[s]).to_bytes(8, "little"), int(blks[s])) + gen
                        wb.put(key, raw[16 * s : 16 * e])
        # the run is on disk: its write-ahead keys go, and the generation moves on, together
        with self.db.write_batch(transaction=True) as wb:
            for seq in self.l1_seq.tolist():
                wb.delete(b"w" + _SEQ.pack(seq))
            wb.put(_GEN_KEY, str(self.gen + 1).encode())
            self.on_disk += len(self.l1_fp)
            wb.put(_COUNTS_KEY, self._counts())
        self.gen += 1
        self._reset_l1()

    def _counts(self) -> bytes:
        return f"{self.on_disk},{self.removed}".encode()

    # -- compaction ---------------------------------------------------------
    def needs_compaction(self) -> bool:
        return self.removed > 0 and self.removed >= COMPACT_RATIO * max(self.on_disk, 1)

    def compact(self) -> int:
        """Drop removed entries from the packed runs and their tombstones; returns how many.

        Each (table, scope, block) is rewritten as one run under a new generation; the old
        runs are deleted after the new ones are written and the tombstones last, so a crash at
        any point leaves correct tables (copies of a pair fold together in a lookup, removed
        pairs are still tombstoned).  Removed entries still in the write-ahead keys go too;
        the in-memory levels are rebuilt from what stays.
        """
        dead = self._tombstones()
        if not len(dead):
            self.removed = 0
            self.db.put(_COUNTS_KEY, self._counts())
            return 0
        gen = self.gen.to_bytes(4, "big")
        # the next flush must not reuse the generation the rewritten runs take
        self.gen += 1
        self.db.put(_GEN_KEY, str(self.gen).encode())
        kept_first_table = 0
        for table in range(BLOCKS):
            kept = self._compact_table(table, dead, gen)
            if table == 0:
                kept_first_table = kept
        wal = list(self.db.iterator(prefix=b"w"))
        if wal:
            entries = np.frombuffer(b"".join(v for _, v in wal), dtype="<u8").reshape(-1, 3)
            gone = np.isin(entries.view("V24").ravel(), dead)
            with self.db.write_batch() as wb:
                for i in np.flatnonzero(gone).tolist():
                    wb.delete(wal[i][0])
        with self.db.write_batch() as wb:
            for key in self.db.iterator(prefix=b"z", include_value=False):
                wb.delete(key)
            self.on_disk, self.removed = kept_first_table, 0
            wb.put(_COUNTS_KEY, self._counts())
        self.any_removed = False
        self.l0 = _Level(self.l0_max)
        self._reset_l1()
        self._replay()
        return len(dead)

    def _compact_table(self, table: int, dead: np.ndarray, gen: bytes) -> int:
        """Rewrite one table's runs without ``dead`` entries (or copies); returns entries kept."""
        keys, values = [], []
        for key, value in self.db.iterator(prefix=b"p" + bytes((table,))):
            keys.append(key)
            values.append(value)
        if not keys:
            return 0
        prefixes = [key[:-4] for key in keys]
        # one (run, scope, simhash, cluster) row per stored pair; a run is (table, scope, block)
        group_of_prefix: dict[bytes, int] = {}
        groups = np.array([group_of_prefix.setdefault(p, len(group_of_prefix)) for p in prefixes], np.uint64)
        counts = np.array([len(v) // 16 for v in values])
        pairs = np.frombuffer(b"".join(values), dtype="<u8").reshape(-1, 2)
        rows = np.empty((len(pairs), 4), "<u8")
        rows[:, 0] = np.repeat(groups, counts)
        rows[:, 1] = np.repeat(np.array([_u64(p[2:10]) for p in prefixes], np.uint64), counts)
        rows[:, 2:] = pairs
        rows = rows[~np.isin(np.ascontiguousarray(rows[:, 1:]).view("V24").ravel(), dead)]
        # copies of a pair (a replayed flush) fold together; rows come out grouped by run
        rows = np.unique(rows.view("V32").ravel()).view("<u8").reshape(-1, 4)
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        cuts = np.flatnonzero(np.diff(rows[:, 0])) + 1
        starts, ends = [0, *cuts.tolist()], [*cuts.tolist(), len(rows)]
        by_group = {int(rows[s, 0]): (s, e) for s, e in zip(starts, ends) if e > s}
        prefix_of = {g: p for p, g in group_of_prefix.items()}
        wb = self.db.write_batch()
        # each run's new key and the deletion of its old ones go in one batch
        for n, (g, prefix) in enumerate(prefix_of.items(), 1):
            if g in by_group:
                s, e = by_group[g]
                wb.put(prefix + gen, np.ascontiguousarray(rows[s:e, 2:]).tobytes())
            if n % 4096 == 0:
                wb.write()
                wb = self.db.write_batch()
        for key in keys:
            if key[-4:] != gen:
                wb.delete(key)
        wb.write()
        return len(rows)

    def _tombstones(self) -> np.ndarray:
        """Every tombstone as a (scope id, simhash, cluster id) record, for ``np.isin``."""
        raw = b"".join(self.db.iterator(prefix=b"z", include_value=False))
        keys = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 25)
        out = np.empty((len(keys), 3), "<u8")
        out[:, 0] = np.ascontiguousarray(keys[:, 1:9]).view("<u8").ravel()
        out[:, 1] = np.ascontiguousarray(keys[:, 9:17]).view(">u8").ravel()
        out[:, 2] = np.ascontiguousarray(keys[:, 17:25]).view("<u8").ravel()
        return out.view("V24").ravel()

    def _replay(self) -> None:
        pending = []
        for key, value in self.db.iterator(prefix=b"w"):
            sid, fp, cid = _ENTRY.unpack(value)
            seq = _SEQ.unpack(key[1:])[0]
            pending.append((sid, fp, cid, seq))
            self.seq = max(self.seq, seq)
        self.apply(pending)

    # -- reading ------------------------------------------------------------
    def near(self, sid: bytes, fp: int, max_distance: int | None) -> Iterator[tuple[int, bytes]]:
        """(simhash, cluster id) of live entries sharing a block with ``fp`` (within ``max_distance``)."""
        sid_n, q = np.uint64(_u64(sid)), np.uint64(fp)
        q_blocks = [(fp >> (BLOCK_BITS * t)) & ((1 << BLOCK_BITS) - 1) for t in range(BLOCKS)]
        found_fp: list[np.ndarray] = []
        found_cid: list[np.ndarray] = []

        l0 = self.l0
        if l0.n:
            fps = l0.fp[: l0.n]
            shares = np.zeros(l0.n, bool)
            for table, block in enumerate(q_blocks):
                shares |= _blocks(fps, table) == block
            keep = shares & (l0.sid[: l0.n] == sid_n)
            found_fp.append(fps[keep])
            found_cid.append(l0.cid[: l0.n][keep])
        for table, block in enumerate(q_blocks):
            lo, hi = int(self.l1_starts[table][block]), int(self.l1_starts[table][block + 1])
            if hi > lo:
                idx = self.l1_order[table][lo:hi]
                idx = idx[self.l1_sid[idx] == sid_n]
                found_fp.append(self.l1_fp[idx])
                found_cid.append(self.l1_cid[idx])
            chunks = b"".join(self.db.iterator(prefix=_chunk_prefix(table, sid, block), include_key=False))
            if chunks:
                pairs = np.frombuffer(chunks, dtype="<u8").reshape(-1, 2)
                found_fp.append(pairs[:, 0].astype(np.uint64))
                found_cid.append(pairs[:, 1].astype(np.uint64))
        if not found_fp:
            return
        fps, cids = np.concatenate(found_fp), np.concatenate(found_cid)
        if max_distance is not None:
            close = np.bitwise_count(fps ^ q) <= max_distance
            fps, cids = fps[close], cids[close]
        seen: set[tuple[int, int]] = set()
        for f, c in zip(fps.tolist(), cids.tolist()):
            if (f, c) in seen:
                continue
            seen.add((f, c))
            cid = c.to_bytes(8, "little")
            if self.db.get(_tombstone(sid, f, cid)) is None:
                yield f, cid


def _blocks(fps: np.ndarray, table: int) -> np.ndarray:
    return ((fps >> np.uint64(BLOCK_BITS * table)) & _BLOCK_MASK).astype(np.int64)


def _chunk_prefix(table: int, sid: bytes, block: int) -> bytes:
    return b"p" + bytes((table,)) + sid + block.to_bytes(2, "big")


def _tombstone(sid: bytes, fp: int, cid: bytes) -> bytes:
    return b"z" + sid + fp.to_bytes(8, "big") + cid
