"""Frontier memory: N distinct URLs through Scrapy's default dupefilter and the store-backed one.

    .venv/bin/python benchmarks/bench_frontier.py [--size tiny|default|large] [--urls N]

Each configuration runs in its own process: a crawler built with the project's settings
(``scrapy.utils.test.get_crawler``), its ``DUPEFILTER_CLASS`` built from it, then
``request_seen(Request(url))`` for N distinct URLs plus every tenth URL again (a repeat,
which both must drop). Configurations:

- ``rfp``: plain Scrapy (``ADDONS = {}``): ``RFPDupeFilter``, a Python set of request fingerprints;
- ``dedup``: ``ADDONS = {"scrapy_dedup.Addon": 500}``: the store-backed ``DedupDupeFilter``
  (``DEDUP_STORE`` in a temporary directory);
- each also with 0 URLs: the empty crawl the target is measured against.

Reported: peak private memory (RssAnon) and peak RSS (VmHWM, which also counts the store's
files that LevelDB maps) above the empty crawl of the same configuration, and the time per
URL. Writes results/frontier.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run_all import RESULTS, SIZES, MemoryWatch, fmt, log, row, run_child, write_result  # noqa: E402

NAME = "frontier"
URLS = {"tiny": 3_000, "default": 1_000_000, "large": 3_000_000}
REPEAT_EVERY = 10
#: "flat": within this many MB of the empty crawl
FLAT_MB = 40


def url(i: int) -> str:
    # many hosts and sections, realistic lengths (60-90 characters); all distinct
    return f"https://www.site{i % 251}.example.org/section-{i % 1000}/articles/{i // 1000}/page-{i}.html?id={i}"


def child(config: str, n: int) -> dict:
    from scrapy import Request, Spider
    from scrapy.utils.misc import build_from_crawler, load_object
    from scrapy.utils.test import get_crawler

    tmp = tempfile.mkdtemp(prefix="bench-frontier-")
    settings = {"ADDONS": {}, "LOG_ENABLED": False}
    if config == "dedup":
        settings = {"ADDONS": {"scrapy_dedup.Addon": 500}, "DEDUP_STORE": f"{tmp}/store", "LOG_ENABLED": False}
    try:
        crawler = get_crawler(Spider, settings)
        dupefilter = build_from_crawler(load_object(crawler.settings["DUPEFILTER_CLASS"]), crawler)
        seen = 0
        with MemoryWatch() as mem:
            dupefilter.open()  # the scheduler opens it: the store opens here
            # one URL that is not counted, so that the first timed one finds everything warm
            dupefilter.request_seen(Request("https://warm.example.org/"))
            t0 = time.perf_counter()
            for i in range(n):
                request = Request(url(i))
                seen += dupefilter.request_seen(request)
                if i % REPEAT_EVERY == 0:
                    seen += dupefilter.request_seen(Request(url(i)))
            seconds = time.perf_counter() - t0
        dupefilter.close("finished")
        if config == "dedup":
            from scrapy_dedup.crawl.state import DedupState

            DedupState.of(crawler).close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pushed = n + (n + REPEAT_EVERY - 1) // REPEAT_EVERY
    return {
        "config": config,
        "urls": n,
        "requests": pushed,
        "dropped": seen,
        "expected_dropped": (n + REPEAT_EVERY - 1) // REPEAT_EVERY,
        "seconds": seconds,
        "us_per_request": 1e6 * seconds / pushed if n else None,
        "dupefilter": type(dupefilter).__name__,
        "memory": mem.report(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--urls", type=int, help="distinct URLs (default by size)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n = args.urls if args.urls is not None else URLS[args.size]
    if args.child:
        print(json.dumps(child(args.child, n)))
        return 0

    runs = {}
    for config in ("rfp", "dedup"):
        for count in (0, n):
            log(NAME, f"{config} with {count:,} URLs ...")
            r = run_child([str(Path(__file__)), "--child", config, "--urls", str(count)])
            runs[f"{config}/{count}"] = r
            m = r["memory"]
            log(NAME, f"{config} {count:,}: peak anon {m['peak_anon'] / 2**20:.0f} MB, rss {m['peak_rss'] / 2**20:.0f} MB, "
                      f"{r['seconds']:.1f} s, dropped {r['dropped']:,}")
    mb = 2**20
    growth = {}
    for config in ("rfp", "dedup"):
        empty, full = runs[f"{config}/0"]["memory"], runs[f"{config}/{n}"]["memory"]
        growth[config] = {
            "anon": (full["peak_anon"] - empty["peak_anon"]) / mb,
            "rss": (full["peak_rss"] - empty["peak_rss"]) / mb,
        }
    dedup, rfp = runs[f"dedup/{n}"], runs[f"rfp/{n}"]
    label = f"{n:,} URLs" if n != 10**6 else "10^6 URLs"
    rows = [
        row(NAME, f"{label}: peak private memory above the empty crawl", f"+{growth['dedup']['anon']:.0f} MB",
            f"RFPDupeFilter +{growth['rfp']['anon']:.0f} MB",
            f"{growth['rfp']['anon'] / max(growth['dedup']['anon'], 1):.1f}x less",
            f"flat (< {FLAT_MB} MB)", growth["dedup"]["anon"] < FLAT_MB),
        row(NAME, f"{label}: peak RSS (VmHWM, includes mapped store files) above the empty crawl",
            f"+{growth['dedup']['rss']:.0f} MB", f"RFPDupeFilter +{growth['rfp']['rss']:.0f} MB", "",
            f"flat (< {FLAT_MB} MB)", growth["dedup"]["rss"] < FLAT_MB),
        row(NAME, f"{label}: time per request_seen", f"{dedup['us_per_request']:.1f} us" if n else "n/a",
            f"RFPDupeFilter {rfp['us_per_request']:.1f} us" if n else "n/a",
            f"{dedup['us_per_request'] / rfp['us_per_request']:.1f}x slower" if n else "", "report", None),
        row(NAME, f"{label}: repeats dropped (of {dedup['expected_dropped']:,})", fmt(dedup["dropped"]),
            f"RFPDupeFilter {fmt(rfp['dropped'])}", "", "all", dedup["dropped"] == dedup["expected_dropped"]),
    ]
    notes = [
        f"{n:,} distinct URLs plus every {REPEAT_EVERY}th again, through request_seen() of the dupefilter each "
        "configuration builds; memory above the same configuration with 0 URLs (the add-on's store open, empty)."
    ]
    write_result(NAME, {"size": args.size, "urls": n, "runs": runs, "growth_mb": growth, "rows": rows,
                        "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
