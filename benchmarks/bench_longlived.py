"""A long-lived store against a fresh one: SimHash lookups and bytes on disk after many updates.

    .venv/bin/python benchmarks/bench_longlived.py [--size tiny|default|large] [--n 1000000]

N documents are indexed (``store.batch()`` + ``index_near``, as the content index does), then
five crawl runs each change 30% of the live documents: half of them are updated (the old
fingerprint leaves the tables, a new one enters) and half are deleted, replaced by as many new
documents, so N stay live.  Each run opens and closes the store, as a crawl does (closing is
when the packed tables compact their tombstones).  The same last N fingerprints are then indexed
into a fresh store, and both are measured the same way:

- lookup CPU time (the thread's own, so other processes on a shared machine do not count),
  p50 and p99, over stored fingerprints with 0..3 bits flipped and as many random ones;
- bytes on disk per live document, after LevelDB's own compaction of both stores
  (``compact_range``), so that what is measured is what the store keeps, not when LevelDB
  gets round to dropping deleted keys.

The aged store is also measured without compaction, to show what it saves.  The target is that
the aged store stays within 1.2x of the fresh one for both.  Writes results/longlived.json.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run_all import RESULTS, SIZES, fmt, log, row, write_result  # noqa: E402

from scrapy_dedup.store.leveldb import LevelDBStore, packed_tables  # noqa: E402

NAME = "longlived"
N = {"tiny": 3000, "default": 1_000_000, "large": 1_000_000}
RUNS = 5
CHANGED = 0.3
BATCH = 200
TARGET = 1.2


def _flip(fp: int, rng: random.Random, bits: int) -> int:
    for bit in rng.sample(range(64), bits):
        fp ^= 1 << bit
    return fp


def _index(store: LevelDBStore, docs: list[tuple[int, str]], remove: bool = False) -> None:
    for start in range(0, len(docs), BATCH):
        with store.batch() as batch:
            for fp, cid in docs[start : start + BATCH]:
                if remove:
                    batch.unindex_near("", fp, (), cid)
                else:
                    batch.index_near("", fp, (), cid)


def _disk_bytes(path: str) -> int:
    # LevelDB's info logs (LOG, LOG.old) are not data: they grow with each open, whatever the size
    return sum(
        entry.stat().st_size
        for entry in os.scandir(path)
        if entry.is_file() and entry.name not in ("LOG", "LOG.old", "HOLDER")
    )


def _measure(path: str, live: list[tuple[int, str]], queries: int, seed: int) -> dict:
    rng = random.Random(seed)
    with LevelDBStore.open_existing(path) as store:
        store._db.compact_range()
        kept = sum(len(k) + len(v) for k, v in store._db.iterator())
        for _ in range(200):  # the first lookups open table files
            store.near_candidates("", rng.getrandbits(64), (), 3)
        times = []
        found = 0
        for i in range(queries):
            fp, cid = live[rng.randrange(len(live))]
            q = _flip(fp, rng, i % 4) if i % 2 == 0 else rng.getrandbits(64)
            t0 = time.thread_time_ns()
            hits = store.near_candidates("", q, (), 3).simhash
            times.append(time.thread_time_ns() - t0)
            if i % 2 == 0:
                found += (fp, cid) in hits
    times.sort()
    return {
        "lookup_cpu_ms": {
            "p50": times[len(times) // 2] / 1e6,
            "p99": times[min(len(times) - 1, int(len(times) * 0.99))] / 1e6,
        },
        "recall": found / ((queries + 1) // 2),
        "bytes_per_doc": _disk_bytes(path) / len(live),
        # what the store holds (keys and values), whenever LevelDB drops what was deleted
        "kept_bytes_per_doc": kept / len(live),
    }


def _age(path: str, n: int, rng: random.Random, compact: bool) -> list[tuple[int, str]]:
    """Index n documents, then five runs that change 30% of them; returns the live ones."""
    ratio = packed_tables.COMPACT_RATIO
    packed_tables.COMPACT_RATIO = ratio if compact else float("inf")
    try:
        live = [(rng.getrandbits(64), f"{i:016x}") for i in range(n)]
        next_id = n
        with LevelDBStore(path, {}) as store:
            _index(store, live)
        for run in range(RUNS):
            t0 = time.perf_counter()
            rng.shuffle(live)
            changed = int(len(live) * CHANGED)
            updated, deleted = live[: changed // 2], live[changed // 2 : changed]
            new_versions = [(rng.getrandbits(64), cid) for _, cid in updated]
            replacements = [(rng.getrandbits(64), f"{next_id + i:016x}") for i in range(len(deleted))]
            next_id += len(deleted)
            with LevelDBStore(path, {}) as store:
                store.begin_run()
                _index(store, updated + deleted, remove=True)
                _index(store, new_versions + replacements)
            live = new_versions + replacements + live[changed:]
            log(NAME, f"run {run + 1}: {changed:,} changed, {time.perf_counter() - t0:.1f} s "
                      f"({'with' if compact else 'without'} compaction)")
        return live
    finally:
        packed_tables.COMPACT_RATIO = ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--n", type=int, help="documents (default: 10^6; tiny: 3,000)")
    parser.add_argument("--queries", type=int, help="lookups measured per store (default 20,000; tiny 500)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    n = args.n or N[args.size]
    queries = args.queries or (500 if args.size == "tiny" else 20_000)
    tmp = tempfile.mkdtemp(prefix="bench-longlived-")
    try:
        results = {}
        for config, compact in (("aged", True), ("aged_no_compaction", False)):
            path = os.path.join(tmp, config)
            live = _age(path, n, random.Random(7), compact)
            results[config] = _measure(path, live, queries, seed=11)
        fresh = os.path.join(tmp, "fresh")
        with LevelDBStore(fresh, {}) as store:
            _index(store, live)
        results["fresh"] = _measure(fresh, live, queries, seed=11)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for config, r in results.items():
        log(NAME, f"{config}: lookup CPU p50 {r['lookup_cpu_ms']['p50']:.3f} ms, p99 {r['lookup_cpu_ms']['p99']:.3f} ms, "
                  f"{r['bytes_per_doc']:.1f} B/doc on disk, {r['kept_bytes_per_doc']:.1f} B/doc kept, "
                  f"recall {r['recall']:.3f}")
    aged, fresh_r, raw = results["aged"], results["fresh"], results["aged_no_compaction"]
    p99 = aged["lookup_cpu_ms"]["p99"] / fresh_r["lookup_cpu_ms"]["p99"]
    size = aged["bytes_per_doc"] / fresh_r["bytes_per_doc"]
    label = "10^6" if n == 10**6 else f"{n:,}"
    what = f"{label} documents, 30% changed in each of {RUNS} runs"
    rows = [
        row(NAME, f"{what}: lookup CPU ms p99, aged vs fresh store",
            f"{fmt(aged['lookup_cpu_ms']['p99'])}", f"fresh {fmt(fresh_r['lookup_cpu_ms']['p99'])}; "
            f"aged without compaction {fmt(raw['lookup_cpu_ms']['p99'])}", f"{p99:.2f}x", f"<= {TARGET}x", p99 <= TARGET),
        row(NAME, f"{what}: bytes on disk per live document, aged vs fresh store",
            f"{aged['bytes_per_doc']:.1f}", f"fresh {fresh_r['bytes_per_doc']:.1f}; "
            f"aged without compaction {raw['bytes_per_doc']:.1f}", f"{size:.2f}x", f"<= {TARGET}x", size <= TARGET),
        row(NAME, f"{what}: recall of planted near duplicates (d <= 3), aged / fresh",
            f"{aged['recall']:.3f}", f"fresh {fresh_r['recall']:.3f}", "", "1.0",
            aged["recall"] == 1.0 and fresh_r["recall"] == 1.0),
    ]
    notes = [what + "; each run opens and closes the store; both stores compacted by LevelDB before measuring."]
    write_result(NAME, {"size": args.size, "n": n, "runs": RUNS, "queries": queries, "results": results,
                        "rows": rows, "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
