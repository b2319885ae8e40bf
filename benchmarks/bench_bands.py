"""The MinHash LSH band index: insert rate, bytes on disk and lookups, per layout.

    .venv/bin/python benchmarks/bench_bands.py [--size tiny|default|large] [--n 100000]

N representatives with a random SimHash and BANDS random band hashes each (seeded), entered
one document per atomic batch, as the content index writes them. Configurations, each in its
own process and store, side by side in one run:

- ``store``: scrapy-dedup's LevelDBStore through its interface
  (``batch().index_near(scope, simhash, bands, cluster_id)``; lookup = ``near_candidates(scope, None, bands).bands``);
- ``store-simhash-only``: the same, with no bands (``index_near(scope, simhash, (), cid)``):
  what the SimHash tables alone cost, so ``store`` minus this is what the bands cost;
- ``per-key``: the band layout the store used before it was packed, one LevelDB key per band
  per representative (``b<band><scope><band hash><cluster>``, empty value), written here on
  plyvel directly, with no SimHash tables.

Reported: inserts/s, bytes on disk per document (after close), lookup p50/p99 (wall and the
thread's CPU time) over ``--queries`` lookups: half with the bands of a stored document with
all but one band changed (must find it: recall), half random (misses). Writes results/bands.json.
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

from run_all import RESULTS, SIZES, fmt, log, ratio, row, run_child, write_result  # noqa: E402

from scrapy_dedup.core.bands import BANDS  # noqa: E402

NAME = "bands"
CONFIGS = ("store", "store-simhash-only", "per-key")
SIZES_N = {"tiny": [2_000], "default": [100_000], "large": [100_000, 1_000_000]}
QUERIES = {"tiny": 100, "default": 2000, "large": 2000}
SEED = 20261201


def documents(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    simhashes = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    bands = rng.integers(0, 2**64, size=(n, BANDS), dtype=np.uint64)
    return simhashes, bands


def lookups(bands: np.ndarray, count: int) -> tuple[list[tuple[int, ...]], list[int | None]]:
    """(band tuples, the document each must find or None)."""
    rng = np.random.default_rng(SEED + 1)
    queries, expected = [], []
    for i in range(count):
        if i % 2 == 0:
            doc = int(rng.integers(0, len(bands)))
            q = rng.integers(0, 2**64, size=BANDS, dtype=np.uint64)
            keep = int(rng.integers(0, BANDS))
            q[keep] = bands[doc, keep]
            queries.append(tuple(int(x) for x in q))
            expected.append(doc)
        else:
            queries.append(tuple(int(x) for x in rng.integers(0, 2**64, size=BANDS, dtype=np.uint64)))
            expected.append(None)
    return queries, expected


def cid(i: int) -> str:
    return f"{i + 1:016x}"


class StoreConfig:
    def __init__(self, path: str, with_bands: bool) -> None:
        from scrapy_dedup.store.leveldb import LevelDBStore

        self.store = LevelDBStore(path, {"benchmark": NAME})
        self.with_bands = with_bands

    def insert(self, simhash: int, bands: tuple[int, ...], cluster_id: str) -> None:
        with self.store.batch() as batch:
            batch.index_near("", simhash, bands if self.with_bands else (), cluster_id)

    def lookup(self, bands: tuple[int, ...]) -> set[str]:
        return self.store.near_candidates("", None, bands).bands

    def close(self) -> None:
        self.store.close()


class PerKeyConfig:
    """The former layout: one key per band per representative."""

    def __init__(self, path: str) -> None:
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True, lru_cache_size=16 << 20,
                            write_buffer_size=8 << 20, bloom_filter_bits=10)
        self.scope = bytes(8)

    def _prefix(self, band: int, band_hash: int) -> bytes:
        return b"b" + bytes((band,)) + self.scope + band_hash.to_bytes(8, "big")

    def insert(self, simhash: int, bands: tuple[int, ...], cluster_id: str) -> None:
        cid_bytes = bytes.fromhex(cluster_id)
        with self.db.write_batch(transaction=True) as wb:
            for band, band_hash in enumerate(bands):
                wb.put(self._prefix(band, band_hash) + cid_bytes, b"")

    def lookup(self, bands: tuple[int, ...]) -> set[str]:
        found = set()
        for band, band_hash in enumerate(bands):
            prefix = self._prefix(band, band_hash)
            for k in self.db.iterator(prefix=prefix, include_value=False):
                found.add(k[len(prefix):].hex())
        return found

    def close(self) -> None:
        self.db.close()


def dir_bytes(path: str) -> int:
    return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())


def child(config: str, n: int, queries: int) -> dict:
    simhashes, bands = documents(n)
    band_rows = [tuple(int(x) for x in r) for r in bands]
    sims = [int(x) for x in simhashes]
    qs, expected = lookups(bands, queries)
    tmp = tempfile.mkdtemp(prefix=f"bench-bands-{config}-")
    path = os.path.join(tmp, "store")
    try:
        index = PerKeyConfig(path) if config == "per-key" else StoreConfig(path, config == "store")
        t0 = time.perf_counter()
        for i in range(n):
            index.insert(sims[i], band_rows[i], cid(i))
        insert_s = time.perf_counter() - t0
        wall, cpu, found = [], [], 0
        for q, want in zip(qs, expected):
            w0, c0 = time.perf_counter(), time.thread_time()
            got = index.lookup(q)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
            if want is not None and cid(want) in got:
                found += 1
        index.close()
        disk = dir_bytes(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    planted = sum(1 for e in expected if e is not None)
    ms = lambda xs, p: float(np.percentile(np.array(xs) * 1000, p))  # noqa: E731
    return {
        "config": config,
        "n": n,
        "insert_docs_per_s": n / insert_s,
        "disk_bytes_per_doc": disk / n,
        "lookup_ms": {"p50": ms(wall, 50), "p99": ms(wall, 99)},
        "lookup_cpu_ms": {"p50": ms(cpu, 50), "p99": ms(cpu, 99)},
        "recall": found / planted if planted else None,
    }


def make_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for n in sorted({r["n"] for r in runs}):
        by = {r["config"]: r for r in runs if r["n"] == n}
        store, simhash_only, per_key = by.get("store"), by.get("store-simhash-only"), by.get("per-key")
        label = f"{n:,} docs"
        if store and simhash_only:
            band_bytes = store["disk_bytes_per_doc"] - simhash_only["disk_bytes_per_doc"]
            rows.append(row(NAME, f"{label}: inserts/s, LevelDBStore (SimHash tables + bands)",
                            fmt(store["insert_docs_per_s"]),
                            f"SimHash tables alone {fmt(simhash_only['insert_docs_per_s'])}",
                            f"{store['insert_docs_per_s'] / simhash_only['insert_docs_per_s']:.2f}x"))
            rows.append(row(NAME, f"{label}: disk B/doc of the bands (store minus SimHash tables alone)",
                            fmt(band_bytes), f"former one-key-per-band layout {fmt(per_key['disk_bytes_per_doc'])}"
                            if per_key else "", f"{ratio(band_bytes, per_key['disk_bytes_per_doc']):.2f}x"
                            if per_key else ""))
        if store and per_key:
            rows.append(row(NAME, f"{label}: band lookup ms p50 / p99 (CPU p99)",
                            f"{store['lookup_ms']['p50']:.3f} / {store['lookup_ms']['p99']:.3f} "
                            f"({store['lookup_cpu_ms']['p99']:.3f})",
                            f"former layout {per_key['lookup_ms']['p50']:.3f} / {per_key['lookup_ms']['p99']:.3f} "
                            f"({per_key['lookup_cpu_ms']['p99']:.3f})",
                            f"{per_key['lookup_cpu_ms']['p99'] / store['lookup_cpu_ms']['p99']:.2f}x"
                            if store["lookup_cpu_ms"]["p99"] else ""))
            rows.append(row(NAME, f"{label}: recall of a document sharing one band", f"{store['recall']:.2f}",
                            f"former layout {per_key['recall']:.2f}", "", "1.0", store["recall"] == 1.0))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--n", help="comma-separated numbers of documents (default by size)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"subset of {','.join(CONFIGS)}")
    parser.add_argument("--queries", type=int, help="lookups (default by size)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    queries = args.queries or QUERIES[args.size]
    if args.child:
        print(json.dumps(child(args.child, int(args.n), queries)))
        return 0
    ns = [int(float(x)) for x in args.n.split(",")] if args.n else SIZES_N[args.size]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    runs = []
    for n in ns:
        for config in configs:
            log(NAME, f"{config} at N={n:,} ...")
            r = run_child([str(Path(__file__)), "--child", config, "--n", str(n), "--queries", str(queries)])
            log(NAME, f"{config} N={n:,}: {r['insert_docs_per_s']:,.0f} inserts/s, {r['disk_bytes_per_doc']:.0f} B/doc, "
                      f"lookup p50 {r['lookup_ms']['p50']:.3f} p99 {r['lookup_ms']['p99']:.3f} ms "
                      f"(cpu p99 {r['lookup_cpu_ms']['p99']:.3f}), recall {r['recall']}")
            runs.append(r)
    notes = [f"{BANDS} bands of random 64-bit hashes per document, one atomic batch per document; "
             f"{queries} lookups, half sharing exactly one band with a stored document."]
    write_result(NAME, {"size": args.size, "n": ns, "runs": runs, "rows": make_rows(runs), "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
