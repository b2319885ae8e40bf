"""``scrapy dedup export`` on a large store: documents/s and peak memory, against a plain dump.

    .venv/bin/python benchmarks/bench_export.py --size default   # 10^5 documents
    .venv/bin/python benchmarks/bench_export.py --size large     # 10^6 documents

The store is built through the store interface (the writes a crawl makes for a document: its
URL record, cluster, member, text, and two URL variants as aliases), with texts of about 1 kB
drawn from real page texts (the demo site's, so nothing is downloaded). The export runs in its
own process to /dev/null; the alternative is the least a user would otherwise write: one pass
over the clusters printing each representative's text with no sources (``json.dumps`` of
``get_text``), in another process. Memory is that process's private peak above its start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from scrapy_dedup.store.records import add_member, get_text, iter_clusters, put_cluster, put_text

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run_all import MemoryWatch, fmt, log, row, run_child, write_result  # noqa: E402

NAME = "export"
RESULTS = HERE / "results"
SIZES = {"tiny": 2_000, "default": 100_000, "large": 1_000_000}


def build(path: str, n: int) -> None:
    from scrapy_dedup.core.records import Cluster, UrlRecord
    from scrapy_dedup.store.leveldb import LevelDBStore

    demo = HERE.parent / "example_project" / "demo_site" / "articles"
    words = " ".join(p.read_text(encoding="utf-8") for p in sorted(demo.glob("*.html"))).split()
    with LevelDBStore(path, {"bench": NAME}) as store:
        for start in range(0, n, 5_000):
            with store.batch() as b:
                for i in range(start, min(n, start + 5_000)):
                    key = f"http://bench.example/doc/{i}"
                    cid = f"{i:016x}"
                    text = " ".join(words[(i * 37 + k) % len(words)] for k in range(160))
                    b.put_url(UrlRecord(key, key, status="new", cluster_id=cid, content_hash=f"{i:032x}",
                                        text_length=len(text), first_seen=1.7e9 + i, last_seen=1.7e9 + i, first_run=1))
                    put_cluster(b, Cluster(cid, key, key, len(text), 1))
                    add_member(b, cid, key)
                    put_text(b, key, text)
                    for variant in ("?utm_source=a", "#top"):
                        b.count_variant(key + variant, key, 1.7e9 + i)


def child(mode: str, path: str) -> dict:
    from scrapy_dedup.reports import export
    from scrapy_dedup.store.leveldb import LevelDBStore

    out = open(os.devnull, "w", encoding="utf-8")
    with MemoryWatch() as mem, LevelDBStore.open_existing(path) as store:
        start = time.perf_counter()
        if mode == "export":
            counts = export.write(store, out)
            docs = counts.documents
        else:
            docs = 0
            for cluster in iter_clusters(store):
                out.write(json.dumps({"url": cluster.rep_url, "text": get_text(store, cluster.representative)}) + "\n")
                docs += 1
        seconds = time.perf_counter() - start
    report = mem.report()
    return {"docs": docs, "seconds": seconds, "peak_anon_mb": (report["peak_anon"] - report["base_anon"]) / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    n = SIZES[args.size]
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        path = os.path.join(tmp, "store")
        log(NAME, f"building a store of {n:,} documents through the store interface")
        start = time.perf_counter()
        build(path, n)
        log(NAME, f"built in {time.perf_counter() - start:.1f} s")
        results = {}
        for mode in ("export", "plain"):
            results[mode] = run_child([str(Path(__file__)), "--child", mode, path])
            log(NAME, f"{mode}: {results[mode]}")
    ours, plain = results["export"], results["plain"]
    rate, plain_rate = ours["docs"] / ours["seconds"], plain["docs"] / plain["seconds"]
    rows = [
        row(NAME, f"{n:,} documents: documents/s, export (every source) vs texts only", fmt(rate), f"texts only {fmt(plain_rate)}",
            f"{rate / plain_rate:.2f}x", "report"),
        row(NAME, f"{n:,} documents: peak private memory above start", f"+{ours['peak_anon_mb']:.0f} MB",
            f"texts only +{plain['peak_anon_mb']:.0f} MB", "", "flat", None),
    ]
    write_result(NAME, {"size": args.size, "results": {"documents": n, **results}, "rows": rows, "notes": []}, args.out)
    for r in rows:
        print(f"{r['measure']}: {r['scrapy_dedup']} | {r['alternatives']} | {r['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
