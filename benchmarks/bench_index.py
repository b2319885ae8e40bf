"""Near-duplicate index at scale: N random 64-bit fingerprints, planted near duplicates.

    .venv/bin/python benchmarks/bench_index.py [--size tiny|default|large] [--n 100000,1000000]

Every configuration runs in its own process (so its peak memory is its own), on the same
fingerprints (seeded), inserted one document at a time and committed every ``--batch``:

- ``store``: scrapy-dedup's LevelDBStore through its interface, as the content index uses it
  (``store.batch()`` + ``index_near(scope, simhash, (), cluster_id)``; lookup =
  ``near_candidates(scope, simhash, (), k)``). Layout ``packed-1``
  (:mod:`scrapy_dedup.store.leveldb.packed_tables`), which grew out of prototype A.
- ``packed``: prototype layout A (below): one LevelDB key per (table, 16-bit block, flush)
  holding a packed array of (simhash, cluster) records; the newest documents in memory
  (bounded) and in a write-ahead key per document.
- ``probe``: prototype layout B (below): 2 tables of 32-bit halves, one key per half holding
  its records; a lookup is 2 x 33 point reads (the half and its 32 one-bit neighbours).
- ``linear``: a numpy array of every fingerprint, XOR + popcount over all of it.
- ``simhash``: ``SimhashIndex`` of the ``simhash`` package (in memory, k = 3), up to
  ``--simhash-max`` documents.

Queries: for every distance d = 0..k, ``--queries`` stored fingerprints with d random bits
flipped (recall must be 1.0), and as many random fingerprints (misses: any hit among them
would be a false match). ``--warmup`` other random lookups run first, untimed (a store
opens its files on first use). Reported: insert rate, lookup p50/p99 in wall time and in the
thread's CPU time (the CPU figure ignores other processes on a shared machine), recall,
bytes on disk per document, peak RSS (VmHWM, which counts the store's files LevelDB maps
into memory) and peak private memory (RssAnon), each also above the process's baseline
after the fingerprints were generated. Writes results/index.json.

Prototype layouts, measured side by side to choose the store's next layout:

A. packed (4 tables x 65536 buckets, appended in large flushes)::

    W<scope 8><seq 8>                 -> simhash, cluster (16 bytes)   write-ahead, one per doc
    T<table 1><scope 8><block 2><gen 4> -> N x (simhash u64le, cluster u64le)
    M<scope 8>                        -> gen, first seq not yet flushed

   New documents go to an unsorted in-memory level L0 (scanned with numpy, at most
   L0_MAX) and to their write-ahead key in the same atomic batch. Full L0s are merged into
   L1: per table, block-sorted arrays searched with ``searchsorted``. A full L1 (L1_MAX
   documents) is written as one key per (table, block) -- about L1_MAX / 65536 records each --
   and its write-ahead keys are deleted, in one batch. A lookup reads L0, L1, and one prefix
   range per table (N / L1_MAX keys), then XOR + popcount on the concatenated records. Memory
   is bounded by L1_MAX (flat in N); on open, the write-ahead keys rebuild L0/L1.

B. probe (2 tables of 32-bit halves)::

    P<table 1><scope 8><half 4>       -> N x (simhash u64le, cluster u64le), usually N = 1

   Distance <= 3 leaves one half with at most one differing bit, so probing the half and its
   32 one-bit neighbours in both tables finds every stored fingerprint within 3. Point reads
   use LevelDB's bloom filters; an insert reads its two keys first (read-modify-write).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run_all import RESULTS, SIZES, MemoryWatch, fmt, log, missing_packages, row, run_child, write_result  # noqa: E402

NAME = "index"
K = 3
CONFIGS = ("store", "packed", "probe", "linear", "simhash", "tables")
SIZES_N = {"tiny": [2_000], "default": [100_000, 1_000_000], "large": [100_000, 1_000_000, 10_000_000]}
QUERIES = {"tiny": 40, "default": 1000, "large": 1000}
WARMUP = {"tiny": 20, "default": 2000, "large": 4000}
#: the linear scan is O(N) per lookup: fewer queries at 10^7
LINEAR_MAX_QUERIES = 200
SIMHASH_MAX = 1_000_000
BATCH = 1000
SEED = 20240601
#: targets from the issue
P99_TARGETS_MS = {1_000_000: 0.5, 10_000_000: 1.0}
INSERT_TARGET = 100_000

_U64 = np.uint64
_M16 = 0xFFFF
_M32 = 0xFFFFFFFF


# -- data ------------------------------------------------------------------------------------


def fingerprints(n: int) -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)


def queries(fps: np.ndarray, per_distance: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query fingerprints, planted source index or -1, distance or -1)."""
    rng = np.random.default_rng(SEED + 1)
    qs, src, dist = [], [], []
    for d in range(K + 1):
        idx = rng.integers(0, len(fps), size=per_distance)
        for i in idx:
            q = int(fps[i])
            for bit in rng.choice(64, size=d, replace=False):
                q ^= 1 << int(bit)
            qs.append(q)
            src.append(int(i))
            dist.append(d)
    randoms = rng.integers(0, 2**64, size=per_distance, dtype=np.uint64, endpoint=False)
    qs.extend(int(x) for x in randoms)
    src.extend([-1] * per_distance)
    dist.extend([-1] * per_distance)
    order = rng.permutation(len(qs))  # mixed, as a crawl would ask
    return np.array(qs, dtype=np.uint64)[order], np.array(src)[order], np.array(dist)[order]


TABLES, BLOCK_BITS = 4, 16


def candidates(fps: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Stored fingerprints a lookup of each query reads: those sharing its 16-bit block, summed
    over the 4 tables (what the layout scans with XOR + popcount). Exact, from the block counts;
    about 4 N / 65536 for random fingerprints, whatever the layout."""
    total = np.zeros(len(qs), dtype=np.int64)
    mask = np.uint64((1 << BLOCK_BITS) - 1)
    for t in range(TABLES):
        shift = np.uint64(BLOCK_BITS * t)
        counts = np.bincount(((fps >> shift) & mask).astype(np.int64), minlength=1 << BLOCK_BITS)
        total += counts[((qs >> shift) & mask).astype(np.int64)]
    return total


def dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# -- the store through its interface ------------------------------------------------------


class StoreIndex:
    on_disk = True

    def __init__(self, path: str) -> None:
        from scrapy_dedup.store.leveldb import LevelDBStore

        self.store = LevelDBStore(path, {"benchmark": "index"})

    def insert(self, fps: np.ndarray, start: int) -> None:
        with self.store.batch() as batch:
            for i, fp in enumerate(fps.tolist(), start):
                batch.index_near("", fp, (), f"{i:016x}")

    def near(self, q: int) -> list[int]:
        return [int(cid, 16) for _, cid in self.store.near_candidates("", q, (), K).simhash]

    def generations(self) -> int:
        """Runs written out per (table, block): a lookup reads this many keys per table."""
        return self.store._tables.gen

    def close(self) -> None:
        self.store.close()


# -- prototype A: packed buckets --------------------------------------------------------------


class PackedIndex:
    """Layout A (see the module docstring)."""

    on_disk = True
    L0_MAX = 8192
    L1_MAX = 1 << 19
    TABLES = 4
    FLUSH_KEYS = 16384  # keys per write batch when L1 is written out

    def __init__(self, path: str, scope: bytes = b"\0" * 8, cache_mb: int = 16, batch: int = BATCH) -> None:
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True, lru_cache_size=cache_mb << 20,
                            write_buffer_size=16 << 20, bloom_filter_bits=10)
        self.sid = scope
        meta = self.db.get(b"M" + scope)
        self.gen, self.flushed = (int.from_bytes(meta[:4], "big"), int.from_bytes(meta[4:], "big")) if meta else (0, 0)
        self.seq = self.flushed
        cap = self.L0_MAX + max(batch, self.L0_MAX)
        self.l0_fp, self.l0_cid = np.empty(cap, np.uint64), np.empty(cap, np.uint64)
        self.l0_n = 0
        self.l1_fp, self.l1_cid = np.empty(self.L1_MAX + cap, np.uint64), np.empty(self.L1_MAX + cap, np.uint64)
        self._reset_l1()
        self.prefixes = [b"T" + bytes((t,)) + scope for t in range(self.TABLES)]
        self._replay()

    def _replay(self) -> None:
        # the write-ahead keys of documents not yet flushed rebuild L0/L1 after a restart
        prefix = b"W" + self.sid
        raw = b"".join(self.db.iterator(prefix=prefix, include_key=False))
        recs = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
        self.seq = self.flushed + len(recs)  # the keys are seq flushed+1 .. flushed+len, in order
        for start in range(0, len(recs), self.L0_MAX):
            part = recs[start : start + self.L0_MAX]
            self.l0_fp[: len(part)], self.l0_cid[: len(part)] = part[:, 0], part[:, 1]
            self.l0_n = len(part)
            self._merge_l0()
            if self.l1_n >= self.L1_MAX:
                self._flush_l1()

    def insert(self, fps: np.ndarray, start: int) -> None:
        wal = b"W" + self.sid
        with self.db.write_batch(transaction=True) as wb:
            put = wb.put
            for i, fp in enumerate(fps.tolist(), start):
                self.seq += 1
                put(wal + self.seq.to_bytes(8, "big"), fp.to_bytes(8, "little") + i.to_bytes(8, "little"))
        # applied to memory once the batch is written
        n, at = len(fps), self.l0_n
        self.l0_fp[at : at + n] = fps
        self.l0_cid[at : at + n] = np.arange(start, start + n, dtype=np.uint64)
        self.l0_n += n
        if self.l0_n >= self.L0_MAX:
            self._merge_l0()
            if self.l1_n >= self.L1_MAX:
                self._flush_l1()

    def _blocks(self, fps: np.ndarray, table: int) -> np.ndarray:
        return ((fps >> _U64(16 * table)) & _U64(_M16)).astype(np.uint16)

    def _merge_l0(self) -> None:
        n, base = self.l0_n, self.l1_n
        self.l1_fp[base : base + n] = self.l0_fp[:n]
        self.l1_cid[base : base + n] = self.l0_cid[:n]
        self.l1_n = base + n
        new_fps = self.l0_fp[:n]
        for t in range(self.TABLES):
            blocks = self._blocks(new_fps, t)
            order = np.argsort(blocks, kind="stable")
            blocks = blocks[order]
            at = np.searchsorted(self.l1_blocks[t], blocks, side="right")
            self.l1_blocks[t] = np.insert(self.l1_blocks[t], at, blocks)
            self.l1_order[t] = np.insert(self.l1_order[t], at, (order + base).astype(np.uint32))
            # where each block's run starts in the sorted order: a lookup reads two numbers
            self.l1_starts[t][1:] = np.cumsum(np.bincount(self.l1_blocks[t], minlength=1 << 16))
        self.l0_n = 0

    def _reset_l1(self) -> None:
        self.l1_n = 0
        self.l1_blocks = [np.empty(0, np.uint16) for _ in range(self.TABLES)]
        self.l1_order = [np.empty(0, np.uint32) for _ in range(self.TABLES)]
        self.l1_starts = [np.zeros((1 << 16) + 1, np.int64) for _ in range(self.TABLES)]

    def _flush_l1(self) -> None:
        # Written in bounded batches (memory): a crash midway leaves some chunks of generation
        # `gen` and every write-ahead key; the replay then flushes the same generation again,
        # rewriting the same keys, so the flush is idempotent. The meta key and the write-ahead
        # deletions go last.
        n = self.l1_n
        gen = self.gen.to_bytes(4, "big")
        recs = np.empty((n, 2), dtype=np.uint64)
        for t in range(self.TABLES):
            blocks, order = self.l1_blocks[t], self.l1_order[t]
            recs[:, 0], recs[:, 1] = self.l1_fp[order], self.l1_cid[order]
            raw = recs.tobytes()
            cuts = (np.flatnonzero(np.diff(blocks)) + 1).tolist()
            starts, ends = [0, *cuts], [*cuts, n]
            keys = blocks[starts].tolist()
            prefix = self.prefixes[t]
            for part in range(0, len(starts), self.FLUSH_KEYS):
                with self.db.write_batch() as wb:
                    for i in range(part, min(part + self.FLUSH_KEYS, len(starts))):
                        wb.put(prefix + keys[i].to_bytes(2, "big") + gen, raw[16 * starts[i] : 16 * ends[i]])
            del raw
        wal = b"W" + self.sid
        self.gen += 1
        self.flushed += n
        with self.db.write_batch(transaction=True) as wb:
            wb.put(b"M" + self.sid, self.gen.to_bytes(4, "big") + self.flushed.to_bytes(8, "big"))
            for seq in range(self.flushed - n + 1, self.flushed + 1):
                wb.delete(wal + seq.to_bytes(8, "big"))
        self._reset_l1()

    def near(self, q: int) -> list[int]:
        f = _U64(q)
        found: list[np.ndarray] = []
        if self.l0_n:
            hits = np.flatnonzero(np.bitwise_count(self.l0_fp[: self.l0_n] ^ f) <= K)
            if len(hits):
                found.append(self.l0_cid[hits])
        chunks, l1_runs = [], []
        for t in range(self.TABLES):
            b = (q >> (16 * t)) & _M16
            starts = self.l1_starts[t]
            lo, hi = int(starts[b]), int(starts[b + 1])
            if hi > lo:
                l1_runs.append(self.l1_order[t][lo:hi])
            chunks.append(b"".join(self.db.iterator(prefix=self.prefixes[t] + b.to_bytes(2, "big"), include_key=False)))
        if l1_runs:
            idx = np.concatenate(l1_runs)
            found.append(self.l1_cid[idx[np.bitwise_count(self.l1_fp[idx] ^ f) <= K]])
        raw = b"".join(chunks)
        if raw:
            recs = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
            found.append(recs[np.bitwise_count(recs[:, 0] ^ f) <= K, 1])
        return sorted({int(c) for part in found for c in part.tolist()})

    def close(self) -> None:
        self.db.close()


# -- prototype B: probed 32-bit halves ------------------------------------------------------


class ProbeIndex:
    """Layout B (see the module docstring)."""

    on_disk = True
    FLIPS = (0, *(1 << i for i in range(32)))

    def __init__(self, path: str, scope: bytes = b"\0" * 8, cache_mb: int = 16) -> None:
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True, lru_cache_size=cache_mb << 20,
                            write_buffer_size=16 << 20, bloom_filter_bits=10)
        self.prefixes = (b"P\0" + scope, b"P\1" + scope)

    def insert(self, fps: np.ndarray, start: int) -> None:
        get = self.db.get
        lo_p, hi_p = self.prefixes
        pending: dict[bytes, bytes] = {}  # keys written earlier in this batch
        with self.db.write_batch(transaction=True) as wb:
            for i, fp in enumerate(fps.tolist(), start):
                rec = fp.to_bytes(8, "little") + i.to_bytes(8, "little")
                for key in (lo_p + (fp & _M32).to_bytes(4, "big"), hi_p + (fp >> 32).to_bytes(4, "big")):
                    old = pending.get(key)
                    if old is None:
                        old = get(key)
                    value = rec if old is None else old + rec
                    pending[key] = value
                    wb.put(key, value)

    def near(self, q: int) -> list[int]:
        get = self.db.get
        values = []
        for prefix, half in ((self.prefixes[0], q & _M32), (self.prefixes[1], q >> 32)):
            for flip in self.FLIPS:
                v = get(prefix + (half ^ flip).to_bytes(4, "big"))
                if v is not None:
                    values.append(v)
        if not values:
            return []
        recs = np.frombuffer(b"".join(values), dtype="<u8").reshape(-1, 2)
        return sorted({int(c) for c in recs[np.bitwise_count(recs[:, 0] ^ _U64(q)) <= K, 1].tolist()})

    def close(self) -> None:
        self.db.close()


# -- in-memory comparisons --------------------------------------------------------------------


class LinearScan:
    on_disk = False

    def __init__(self, path: str, capacity: int) -> None:
        self.fps = np.empty(capacity, dtype=np.uint64)
        self.n = 0

    def insert(self, fps: np.ndarray, start: int) -> None:
        self.fps[start : start + len(fps)] = fps
        self.n = start + len(fps)

    def near(self, q: int) -> list[int]:
        return np.flatnonzero(np.bitwise_count(self.fps[: self.n] ^ _U64(q)) <= K).tolist()

    def close(self) -> None:
        pass


class TablesInMemory:
    """The store's four 16-bit-block tables in memory (numpy), without LevelDB: what a lookup
    costs for its candidates alone. Inserts fill an array; the tables (per table: fingerprints
    sorted by block, where each block starts) are built at the first lookup, outside the timed
    inserts. Used to measure 10^8 documents, where the store's own insert takes hours here."""

    on_disk = False

    def __init__(self, path: str, capacity: int) -> None:
        self.fps = np.empty(capacity, dtype=np.uint64)
        self.n = 0
        self.tables: list[tuple[np.ndarray, np.ndarray]] | None = None

    def insert(self, fps: np.ndarray, start: int) -> None:
        self.fps[start : start + len(fps)] = fps
        self.n = start + len(fps)

    def _build(self) -> None:
        self.tables = []
        mask = _U64(_M16)
        for t in range(TABLES):
            blocks = ((self.fps[: self.n] >> _U64(BLOCK_BITS * t)) & mask).astype(np.uint16)
            order = np.argsort(blocks, kind="stable")
            starts = np.zeros((1 << BLOCK_BITS) + 1, np.int64)
            starts[1:] = np.cumsum(np.bincount(blocks, minlength=1 << BLOCK_BITS))
            del blocks
            self.tables.append((self.fps[order], order.astype(np.uint32), starts))
            del order

    def near(self, q: int) -> list[int]:
        if self.tables is None:
            self._build()
        f = _U64(q)
        values, ids = [], []
        for t, (fps, order, starts) in enumerate(self.tables):
            b = (q >> (BLOCK_BITS * t)) & _M16
            lo, hi = starts[b], starts[b + 1]
            values.append(fps[lo:hi])
            ids.append(order[lo:hi])
        cands = np.concatenate(values)
        return sorted(set(np.concatenate(ids)[np.bitwise_count(cands ^ f) <= K].tolist()))

    def close(self) -> None:
        pass


class SimhashPackage:
    on_disk = False

    def __init__(self, path: str) -> None:
        import logging

        from simhash import Simhash, SimhashIndex

        logging.getLogger("simhash").setLevel(logging.ERROR)  # it logs every "big bucket"
        self.Simhash = Simhash
        self.index = SimhashIndex([], f=64, k=K)

    def insert(self, fps: np.ndarray, start: int) -> None:
        add, S = self.index.add, self.Simhash
        for i, fp in enumerate(fps.tolist(), start):
            add(str(i), S(fp))

    def near(self, q: int) -> list[int]:
        return sorted(int(x) for x in self.index.get_near_dups(self.Simhash(q)))

    def close(self) -> None:
        pass


# -- one configuration (child process) ---------------------------------------------------


def child(config: str, n: int, per_distance: int, warmup: int, batch: int) -> dict:
    fps = fingerprints(n)
    qs, src, dist = queries(fps, per_distance)
    rng = np.random.default_rng(SEED + 2)
    warm = rng.integers(0, 2**64, size=warmup, dtype=np.uint64, endpoint=False).tolist()
    if config == "linear" and len(qs) > LINEAR_MAX_QUERIES * (K + 2) and n >= 5_000_000:
        keep = np.arange(len(qs)) % max(1, len(qs) // (LINEAR_MAX_QUERIES * (K + 2))) == 0
        qs, src, dist = qs[keep], src[keep], dist[keep]
        warm = warm[:50]
    tmp = tempfile.mkdtemp(prefix=f"bench-index-{config}-")
    path = os.path.join(tmp, "db")
    mem = MemoryWatch().__enter__()
    try:
        index = {
            "store": lambda: StoreIndex(path),
            "packed": lambda: PackedIndex(path, batch=batch),
            "probe": lambda: ProbeIndex(path),
            "linear": lambda: LinearScan(path, n),
            "simhash": lambda: SimhashPackage(path),
            "tables": lambda: TablesInMemory(path, n),
        }[config]()
        t0 = time.perf_counter()
        c0 = time.process_time()
        for start in range(0, n, batch):
            index.insert(fps[start : start + batch], start)
        insert_s = time.perf_counter() - t0
        insert_cpu = time.process_time() - c0
        for q in warm:
            index.near(q)
        wall, cpu, hits = [], [], []
        for q in qs.tolist():
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            found = index.near(q)
            cpu.append(time.thread_time_ns() - c0)
            wall.append(time.perf_counter_ns() - w0)
            hits.append(found)
        generations = index.generations() if hasattr(index, "generations") else None
        index.close()
        mem.__exit__(None, None, None)
        disk = dir_bytes(path) if index.on_disk else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall_ms, cpu_ms = np.array(wall) / 1e6, np.array(cpu) / 1e6
    cands = candidates(fps, qs)
    recall = {}
    for d in range(K + 1):
        sel = np.flatnonzero(dist == d)
        recall[str(d)] = float(np.mean([int(src[i]) in hits[i] for i in sel])) if len(sel) else None
    false_hits = sum(len(hits[i]) for i in np.flatnonzero(dist < 0))
    m = mem.report()
    return {
        "config": config,
        "n": n,
        "insert_docs_per_s": n / insert_s,
        "insert_seconds": insert_s,
        "insert_cpu_seconds": insert_cpu,
        "lookups": len(qs),
        "lookup_ms": {"p50": float(np.percentile(wall_ms, 50)), "p99": float(np.percentile(wall_ms, 99)),
                      "max": float(wall_ms.max())},
        "lookup_cpu_ms": {"p50": float(np.percentile(cpu_ms, 50)), "p99": float(np.percentile(cpu_ms, 99))},
        "recall": recall,
        "random_query_hits": false_hits,
        "candidates": {"mean": float(cands.mean()), "p99": float(np.percentile(cands, 99)),
                       "expected": TABLES * n / 2**BLOCK_BITS},
        "generations": generations,
        "disk_bytes": disk,
        "disk_bytes_per_doc": disk / n,
        "memory": m,
        "index_rss_bytes": m["peak_rss"] - m["base_rss"],
        "index_anon_bytes": m["peak_anon"] - m["base_anon"],
    }


# -- the comparison ---------------------------------------------------------------------------


def mb(x: float) -> str:
    return f"{x / 2**20:,.0f} MB"


def p10(n: int) -> str:
    e = len(str(n)) - 1
    return f"10^{e}" if n == 10**e else f"{n:,}"


def make_rows(runs: list[dict], ns: list[int], skipped: list[str]) -> list[dict]:
    """Per size and layout: lookup latency, inserts, then recall + disk + memory in one row.
    The latency target is judged on the lookup's CPU p99: the wall p99 on a shared machine
    also counts time spent waiting for a core (both are shown)."""
    rows = []
    by = {(r["config"], r["n"]): r for r in runs}
    labels = {"store": "LevelDBStore (packed-1)", "packed": "prototype A packed", "probe": "prototype B probe",
              "tables": "4 x 16-bit tables in memory (numpy)"}
    layouts = [c for c in labels if any(r["config"] == c for r in runs)]
    for n in ns:
        lin, sh = by.get(("linear", n)), by.get(("simhash", n))
        alt_lookup = "; ".join(
            f"{label} {r['lookup_ms']['p50']:.3f} / {r['lookup_ms']['p99']:.3f} ({r['lookup_cpu_ms']['p99']:.3f})"
            for label, r in (("SimhashIndex", sh), ("linear", lin)) if r
        )
        alt_mem = "; ".join(f"{label} {mb(r['index_anon_bytes'])}" for label, r in (("SimhashIndex", sh), ("linear", lin)) if r)
        target = P99_TARGETS_MS.get(n)
        for c in layouts:
            r = by.get((c, n))
            if r is None:
                continue
            label = labels[c]
            cpu99 = r["lookup_cpu_ms"]["p99"]
            ratio_text = f"{sh['lookup_cpu_ms']['p99'] / cpu99:.2f}x SimhashIndex's CPU p99" if sh else ""
            rows.append(row(NAME, f"{p10(n)}: lookup ms p50 / p99 (CPU p99), {label}",
                            f"{r['lookup_ms']['p50']:.3f} / {r['lookup_ms']['p99']:.3f} ({cpu99:.3f})", alt_lookup,
                            ratio_text, f"CPU p99 < {target} ms" if target else "report",
                            (cpu99 < target) if target else None))
            cands = r.get("candidates")
            if cands:
                rows.append(row(NAME, f"{p10(n)}: candidates per lookup mean / p99 (4 N / 65536), {label}",
                                f"{cands['mean']:,.0f} / {cands['p99']:,.0f}"
                                + (f"; {r['generations']} runs per table" if r.get("generations") is not None else ""),
                                "", "", "report", None))
            if c != "tables":  # its inserts fill an array: nothing to compare
                rows.append(row(NAME, f"{p10(n)}: inserts/s, {label}", fmt(r["insert_docs_per_s"]),
                                f"SimhashIndex {fmt(sh['insert_docs_per_s'])}" if sh else "",
                                f"{r['insert_docs_per_s'] / sh['insert_docs_per_s']:.2f}x" if sh else "",
                                f">= {INSERT_TARGET:,}", r["insert_docs_per_s"] >= INSERT_TARGET))
            rec = r["recall"]
            ok = all(rec[str(d)] == 1.0 for d in range(K + 1)) and r["random_query_hits"] == 0
            rows.append(row(NAME, f"{p10(n)}: recall d=0..3; disk B/doc; memory private (all resident), {label}",
                            " / ".join(f"{rec[str(d)]:.2f}" for d in range(K + 1))
                            + f"; {r['disk_bytes_per_doc']:.0f} B; {mb(r['index_anon_bytes'])} ({mb(r['index_rss_bytes'])})",
                            alt_mem + " (RAM only, nothing on disk)" if alt_mem else "", "", "recall 1.0", ok))
    # flat in N: judged between the two largest sizes once both are past the bounded buffers
    # and caches (10^6 and up); below that the growth is shown but not judged
    if len(ns) > 1:
        small, large = ns[-2], ns[-1]
        for c in layouts:
            if c == "tables":  # all in memory by design: its growth is the index itself
                continue
            a, b = by.get((c, small)), by.get((c, large))
            if a and b:
                growth = b["index_anon_bytes"] - a["index_anon_bytes"]
                sh_a, sh_b = by.get(("simhash", small)), by.get(("simhash", large))
                alt = f"SimhashIndex +{mb(sh_b['index_anon_bytes'] - sh_a['index_anon_bytes'])}" if sh_a and sh_b else ""
                judged = small >= 1_000_000
                rows.append(row(NAME, f"private memory growth {p10(small)} -> {p10(large)}, {labels[c]}", f"+{mb(growth)}",
                                alt, "", "flat: < +50 MB" if judged else "flat (judged from 10^6 on: --size large)",
                                (growth < 50 * 2**20) if judged else None))
    for s in skipped:
        rows.append(row(NAME, s, "", "skipped", "", "", None))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--n", help="comma-separated index sizes (default by size)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"subset of {','.join(CONFIGS)}")
    parser.add_argument("--queries", type=int, help="queries per planted distance (default by size)")
    parser.add_argument("--warmup", type=int, help="untimed lookups before timing (default by size)")
    parser.add_argument("--batch", type=int, default=BATCH, help="documents per write batch")
    parser.add_argument("--packed-l1", type=int, default=PackedIndex.L1_MAX,
                        help="prototype A: documents kept in memory before a flush (tests use a small one)")
    parser.add_argument("--simhash-max", type=int, default=SIMHASH_MAX, help="largest N given to SimhashIndex")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    per_distance = args.queries or QUERIES[args.size]
    warmup = args.warmup if args.warmup is not None else WARMUP[args.size]
    PackedIndex.L1_MAX = args.packed_l1
    PackedIndex.L0_MAX = min(PackedIndex.L0_MAX, max(1, args.packed_l1 // 8))
    if args.child:
        n = int(args.n)
        print(json.dumps(child(args.child, n, per_distance, warmup, args.batch)))
        return 0

    ns = [int(float(x)) for x in args.n.split(",")] if args.n else SIZES_N[args.size]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    skipped = []
    if "simhash" in configs and "simhash" in missing_packages():
        configs.remove("simhash")
        skipped.append("SimhashIndex comparison: package 'simhash' not installed (pip install -e '.[bench]')")
    runs = []
    for n in ns:
        for config in configs:
            if config == "simhash" and n > args.simhash_max:
                skipped.append(f"SimhashIndex at {p10(n)}: above --simhash-max {p10(args.simhash_max)} "
                               f"(about {617 * n // 10**6:,} MB of RAM extrapolated from 10^6)")
                continue
            log(NAME, f"{config} at N={n:,} ...")
            r = run_child([str(Path(__file__)), "--child", config, "--n", str(n), "--queries", str(per_distance),
                           "--warmup", str(warmup), "--batch", str(args.batch), "--size", args.size,
                           "--packed-l1", str(args.packed_l1)])
            log(NAME, f"{config} N={n:,}: {r['insert_docs_per_s']:,.0f} inserts/s, "
                      f"p50 {r['lookup_ms']['p50']:.3f} p99 {r['lookup_ms']['p99']:.3f} ms "
                      f"(cpu p99 {r['lookup_cpu_ms']['p99']:.3f}), recall {r['recall']}, "
                      f"{r['disk_bytes_per_doc']:.0f} B/doc, anon +{mb(r['index_anon_bytes'])}, "
                      f"rss +{mb(r['index_rss_bytes'])}, candidates {r['candidates']['mean']:,.0f} "
                      f"(p99 {r['candidates']['p99']:,.0f}), generations {r['generations']}")
            runs.append(r)
    rows = make_rows(runs, ns, skipped)
    notes = [
        f"random 64-bit fingerprints, k = {K}; {per_distance} planted queries per distance 0..{K} and "
        f"{per_distance} random ones, after {warmup} untimed lookups; inserts committed every {args.batch} documents.",
        "lookup targets are judged on the CPU p99 (the lookup thread's own CPU time); the wall p99 also counts "
        "time the process waited for a core on a shared machine (load average in the machine line).",
        "memory: private = peak RssAnon above the baseline after generating the fingerprints; all resident = VmHWM "
        "above baseline, which includes the store's files that LevelDB maps (page cache, reclaimable).",
    ]
    write_result(NAME, {"size": args.size, "n": ns, "k": K, "runs": runs, "rows": rows, "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
