"""Ingest speed: `scrapy dedup ingest`'s path (decide/ingest.py) over real documentation pages.

    .venv/bin/python benchmarks/bench_ingest.py                # 400 pages of PostgreSQL 15.20's docs
    .venv/bin/python benchmarks/bench_ingest.py --size large   # all 1,169

Runs side by side on the same pages (PostgreSQL 15.20's docs, or $SCRAPY_DEDUP_BENCH_PAGES):
records with the text already given, records with HTML extracted in-process, and records with
HTML extracted by 2 worker processes (``--workers 2``). Each run starts from an empty LevelDB
store in a temporary directory, and ends in the same statuses.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
from run_all import fmt, log, row, write_result  # noqa: E402

from scrapy_dedup.core.fingerprints import DEFAULT_MAX_DISTANCE, DEFAULT_MIN_JACCARD, DEFAULT_MIN_TOKENS  # noqa: E402
from scrapy_dedup.core.urls import UrlRules  # noqa: E402
from scrapy_dedup.decide.index import ContentIndex  # noqa: E402
from scrapy_dedup.decide.ingest import ingest  # noqa: E402
from scrapy_dedup.extraction.main_text import _decode  # noqa: E402
from scrapy_dedup.store.leveldb import LevelDBStore  # noqa: E402

NAME = "ingest"
RESULTS = HERE / "results"
SIZES = {"tiny": 400, "default": 400, "large": 100_000}  # pages, capped by the pages there are


def run(lines: list[str], workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, LevelDBStore(str(Path(tmp) / "store"), {"bench": NAME}) as store:
        store.begin_run()
        index = ContentIndex(store, store.run, max_distance=DEFAULT_MAX_DISTANCE, min_jaccard=DEFAULT_MIN_JACCARD,
                             min_tokens=DEFAULT_MIN_TOKENS)
        start = time.perf_counter()
        counts = ingest(lines, index, UrlRules().key, workers=workers)
        seconds = time.perf_counter() - start
    return {"records": len(lines), "workers": workers, "seconds": round(seconds, 3),
            "documents_per_s": round(counts.documents / seconds, 1), "statuses": counts.statuses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    root = _corpus.docs_root()
    pages = _corpus.html_pages(root)[: SIZES[args.size]]
    # decoded as the extractor decodes bytes (BOM, <meta charset>, else UTF-8), so that both runs see one text
    html = {p: _decode((root / p).read_bytes()) for p in pages}
    texts = _corpus.extracted_texts(root, pages)
    base = "http://docs.example/"
    text_lines = [json.dumps({"url": base + p, "text": texts[p]}) for p in pages]
    html_lines = [json.dumps({"url": base + p, "html": html[p]}) for p in pages]
    runs = {}
    for label, lines, workers in (("text", text_lines, 0), ("html", html_lines, 0), ("html, 2 workers", html_lines, 2)):
        runs[label] = run(lines, workers)
        log(NAME, f"{label}: {runs[label]}")
    n = len(pages)
    same = len({json.dumps(r["statuses"], sort_keys=True) for r in runs.values()}) == 1
    text_rate, html_rate, workers_rate = (runs[k]["documents_per_s"] for k in ("text", "html", "html, 2 workers"))
    rows = [
        row(NAME, f"{n} doc pages: documents/s, text given vs HTML extracted in-process", fmt(text_rate),
            f"HTML {fmt(html_rate)}", f"{text_rate / html_rate:.1f}x", "report"),
        row(NAME, f"{n} doc pages: documents/s, HTML with 2 extraction workers vs in-process", fmt(workers_rate),
            f"in-process {fmt(html_rate)}", f"{workers_rate / html_rate:.2f}x", "report"),
        row(NAME, f"{n} doc pages: same statuses from text, HTML and 2 workers",
            "yes" if same else "no", "", "", "same", same),
    ]
    write_result(NAME, {"size": args.size, "results": {"pages": n, "root": str(root), "runs": runs}, "rows": rows,
                        "notes": []}, args.out)
    for r in rows:
        print(f"{r['measure']}: {r['scrapy_dedup']} | {r['alternatives']} | {r['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
