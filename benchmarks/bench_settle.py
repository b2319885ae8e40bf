"""Settling a store: documents/s and memory of ``settle`` against the online decisions.

    .venv/bin/python benchmarks/bench_settle.py --size default   # 2 x 10^4 documents
    .venv/bin/python benchmarks/bench_settle.py --size large     # 10^5 documents

Families of near-duplicate texts (300 words, each member up to 8 words edited; a quarter of
the documents are family founders), decided online one at a time in a shuffled order through
``ContentIndex.ingest`` into a LevelDB store, as ingest or a crawl decides them. Then, each in
a process of its own, on that store: the first settle (every document: it revises what the
order decided otherwise) and a second one (incremental: nothing was decided since, so only
the scan and the check of every cluster's members remain); then 1% more documents
(edited copies of earlier ones) are decided online and the store settled again,
incrementally: its time against those decisions'. Reported: documents/s of each against
the online decisions of the same documents (a ratio taken in the same run: absolute times are
noise on a shared machine), the provisional decisions revised, and the settle's peak private
memory above its start.
"""

from __future__ import annotations

import argparse
import json
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

from run_all import MemoryWatch, fmt, log, row, run_child, write_result  # noqa: E402

NAME = "settle"
RESULTS = HERE / "results"
SIZES = {"tiny": 1_000, "default": 20_000, "large": 100_000}
SETTINGS = {"max_distance": 3, "min_jaccard": 0.8, "min_tokens": 50}
#: the issue's target for a full settle, per core
TARGET_RATE = 5_000


def texts(n: int) -> list[str]:
    rng = random.Random(1)
    vocabulary = [f"w{i}" for i in range(20_000)]
    founders = [[rng.choice(vocabulary) for _ in range(300)] for _ in range(max(1, n // 4))]
    out = []
    for i in range(n):
        words = list(founders[i % len(founders)])
        for _ in range(rng.randrange(0, 8)):
            words[rng.randrange(300)] = rng.choice(vocabulary)
        out.append(" ".join(words))
    rng.shuffle(out)
    return out


def build(path: str, n: int, changes: int = 0) -> dict:
    """Decide ``n`` documents online; with ``changes``, open the store again and decide that
    many more: edited copies of the first ones (a re-crawl's new pages)."""
    from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
    from scrapy_dedup.decide.index import ContentIndex, Document
    from scrapy_dedup.store.leveldb import LevelDBStore

    all_texts = texts(n)
    if changes:
        rng = random.Random(2)
        first = n
        edited = []
        for text in all_texts[:changes]:
            words = text.split()
            words[rng.randrange(len(words))] = f"edit{rng.randrange(10**6)}"
            edited.append(" ".join(words))
        all_texts = edited
        store = LevelDBStore.open_existing(path)
    else:
        first = 0
        store = LevelDBStore(path, {"bench": NAME})
    docs = [(text, fingerprint(text)) for text in all_texts]
    with store:
        store.begin_run()
        index = ContentIndex(store, store.run, **SETTINGS)
        start = time.perf_counter()
        for i, (text, fp) in enumerate(docs, first):
            url = f"http://bench.example/doc/{i}"
            index.ingest(Document(url, url, fp, raw_hash(text.encode()), text=text))
        seconds = time.perf_counter() - start
    return {"docs": len(docs), "seconds": seconds}


def child(path: str) -> dict:
    from scrapy_dedup.decide.settle import settle
    from scrapy_dedup.store.leveldb import LevelDBStore

    with MemoryWatch() as mem, LevelDBStore.open_existing(path) as store:
        start = time.perf_counter()
        result = settle(store, **SETTINGS)
        seconds = time.perf_counter() - start
    report = mem.report()
    return {
        "docs": result.documents,
        "clusters": result.clusters,
        "revised": result.revised,
        "rewritten": result.rewritten,
        "affected": result.affected,
        "seconds": seconds,
        "peak_anon_mb": (report["peak_anon"] - report["base_anon"]) / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", metavar="STORE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    n = SIZES[args.size]
    tmp = tempfile.mkdtemp(prefix="bench-settle-")
    try:
        path = os.path.join(tmp, "store")
        log(NAME, f"deciding {n:,} documents online into a LevelDB store")
        online = build(path, n)
        log(NAME, f"online: {online}")
        first = run_child([str(Path(__file__)), "--child", path])
        log(NAME, f"first settle: {first}")
        again = run_child([str(Path(__file__)), "--child", path])
        log(NAME, f"second settle: {again}")
        changed = build(path, n, changes=max(1, n // 100))
        log(NAME, f"1% more documents decided online: {changed}")
        after = run_child([str(Path(__file__)), "--child", path])
        log(NAME, f"settle after them: {after}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    online_rate = online["docs"] / online["seconds"]
    rows = []
    for label, res in (("first settle", first), ("incremental settle, nothing decided since", again)):
        rate = res["docs"] / res["seconds"]
        rows.append(row(NAME, f"{n:,} documents: documents/s, {label} vs the online decisions", fmt(rate),
                        f"online {fmt(online_rate)}", f"{rate / online_rate:.2f}x", f">= {TARGET_RATE:,}/s per core",
                        rate >= TARGET_RATE))
    share = after["seconds"] / changed["seconds"]
    rows.append(row(NAME, f"{n:,} documents, then {changed['docs']:,} more: the incremental settle's time against "
                    f"their online decisions' ({after['affected']:,} documents settled again)", f"{after['seconds']:.2f} s",
                    f"online {changed['seconds']:.2f} s", f"{share:.2f}x", "report"))
    rows.append(row(NAME, f"{n:,} documents: provisional decisions the first settle revised", f"{first['revised']:,}",
                    f"{first['clusters']:,} clusters", "", "report"))
    rows.append(row(NAME, f"{n:,} documents: settle's peak private memory above start", f"+{first['peak_anon_mb']:.0f} MB",
                    "", "", "flat", None))
    payload = {"size": args.size, "results": {"online": online, "first": first, "again": again, "changed": changed,
                                               "after": after}, "rows": rows,
               "notes": ["a full settle holds every document's URL record and MinHash in memory: not flat yet"]}
    write_result(NAME, payload, args.out)
    for r in rows:
        print(f"{r['measure']}: {r['scrapy_dedup']} | {r['alternatives']} | {r['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
