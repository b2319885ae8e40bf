"""Ingest speed: `scrapy dedup ingest`'s path (decide/ingest.py) over real documentation pages.

Two runs side by side on the same pages (PostgreSQL 15.20's docs, or $SCRAPY_DEDUP_BENCH_PAGES):
records with HTML (extracted as the crawl extracts), and records with the text already given.
Each run starts from an empty LevelDB store in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _corpus  # noqa: E402

from scrapy_dedup.core.urls import UrlRules  # noqa: E402
from scrapy_dedup.decide.index import ContentIndex  # noqa: E402
from scrapy_dedup.decide.ingest import ingest  # noqa: E402
from scrapy_dedup.store.leveldb import LevelDBStore  # noqa: E402


def run(lines: list[str], workers: int) -> tuple[float, dict[str, int]]:
    with tempfile.TemporaryDirectory() as tmp, LevelDBStore(str(Path(tmp) / "store"), {"bench": 1}) as store:
        store.begin_run()
        index = ContentIndex(store, store.run, max_distance=3, min_jaccard=0.8, min_tokens=50)
        start = time.perf_counter()
        counts = ingest(lines, index, UrlRules().key, workers=workers)
        return time.perf_counter() - start, counts.statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=400, help="pages to ingest (default 400)")
    parser.add_argument("--workers", type=int, default=0, help="extraction workers for the HTML run")
    args = parser.parse_args()
    root = _corpus.docs_root()
    pages = _corpus.html_pages(root)[: args.pages]
    html = {p: (root / p).read_bytes().decode("utf-8", "replace") for p in pages}
    texts = _corpus.extracted_texts(root, pages)
    base = "http://docs.example/"
    html_lines = [json.dumps({"url": base + p, "html": html[p]}) for p in pages]
    text_lines = [json.dumps({"url": base + p, "text": texts[p]}) for p in pages]
    for label, lines, workers in (("html", html_lines, args.workers), ("text", text_lines, 0)):
        elapsed, statuses = run(lines, workers)
        print(f"| {label} | {len(lines)} | {workers} | {elapsed:.1f} s | {len(lines) / elapsed:,.0f} | {statuses} |")


if __name__ == "__main__":
    main()
