"""Memory soak: the crawl process's RSS over a long crawl of distinct pages, against plain Scrapy.

    .venv/bin/python benchmarks/bench_soak.py [--size tiny|default|large] [--pages 200000] [--trace]

A generated site on 127.0.0.1 (port 0) serves N distinct pages: page i has its own title and
about 250 words drawn from a fixed vocabulary by a generator seeded with i (so no two pages are
near duplicates), and links to its 16 children 16i+1 .. 16i+16. The example project's ``site``
spider crawls it (``scrapy crawl site``, CONCURRENT_REQUESTS 16, 16 per domain) twice, in
subprocesses: with the add-on (defaults; a fresh ``DEDUP_STORE``) and as plain Scrapy
(``ADDONS = {}``, Scrapy's own dupefilter and nothing else).

An extension of this module (``RssProbe``) samples the crawl process's own VmRSS and RssAnon
every N/50 responses. Growth after warm-up is RSS at the end minus RSS at 20% of the pages,
scaled to 10^5 pages; the target is at most 10 MB per 10^5 pages, judged from 10^5 pages on
(``--size large``: 2 x 10^5 pages; the smaller sizes only show the curve). ``--trace`` also runs
``tracemalloc`` in the crawl process and writes the top allocation sites that grew between 20%,
60% and 100% to results/soak_trace.txt (slow: use it on a smaller crawl to find what grows).
Writes results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

NAME = "soak"
PAGES = {"tiny": 1_000, "default": 5_000, "large": 200_000}
#: below this many pages the bounded structures are still filling: the growth is shown, not judged
JUDGED_FROM = 100_000
FANOUT = 16
TARGET_MB_PER_1E5 = 10.0
WARM = 0.2
_WORDS = None


# -- the site ---------------------------------------------------------------------------------


def _vocabulary() -> list[str]:
    rng = random.Random(39)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(5000)]


def page(i: int, n: int) -> bytes:
    """Page ``i`` of ``n``: distinct text, links to its children."""
    global _WORDS
    if _WORDS is None:
        _WORDS = _vocabulary()
    rng = random.Random(i)
    paragraphs = ["<p>" + " ".join(rng.choices(_WORDS, k=85)) + ".</p>" for _ in range(3)]
    children = range(FANOUT * i + 1, min(FANOUT * i + FANOUT, n - 1) + 1)
    links = "".join(f'<li><a href="/p/{c}.html">page {c}</a></li>' for c in children)
    return (
        f"<!DOCTYPE html><html><head><title>Page {i}</title></head><body>"
        f"<nav><a href=\"/p/0.html\">home</a></nav><article><h1>Page {i}</h1>{''.join(paragraphs)}</article>"
        f"<ul>{links}</ul></body></html>"
    ).encode()


def serve(n: int):
    sys.path.insert(0, str(REPO))
    from tests.local_site import LocalSite

    def reply(path: str):
        name = path.rsplit("/", 1)[-1]
        if path.startswith("/p/") and name.endswith(".html") and name[:-5].isdigit() and int(name[:-5]) < n:
            return 200, {}, page(int(name[:-5]), n)
        return 404, {}, b"<html><body>not found</body></html>"

    return LocalSite(reply)


# -- the probe, loaded into the crawl process ---------------------------------------------------


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


class RssProbe:
    """Samples this process's RSS every ``SOAK_PAGES / 50`` responses; writes ``SOAK_OUT``."""

    def __init__(self, crawler, out: str, pages: int, trace: bool) -> None:
        self.crawler, self.out, self.pages, self.trace = crawler, Path(out), pages, trace
        self.every = max(1, pages // 50)
        self.responses = 0
        self.samples: list[dict] = []
        self.snapshots: dict[int, object] = {}
        self.t0 = time.monotonic()

    @classmethod
    def from_crawler(cls, crawler):
        from scrapy import signals
        from scrapy.exceptions import NotConfigured

        out = crawler.settings.get("SOAK_OUT")
        if not out:
            raise NotConfigured
        probe = cls(crawler, out, crawler.settings.getint("SOAK_PAGES"), crawler.settings.getbool("SOAK_TRACE"))
        crawler.signals.connect(probe.response_received, signal=signals.response_received)
        crawler.signals.connect(probe.spider_closed, signal=signals.spider_closed)
        if probe.trace:
            import tracemalloc

            tracemalloc.start(1)
        return probe

    def response_received(self, response, request, spider=None) -> None:
        self.responses += 1
        if self.responses % self.every == 0 or self.responses == self.pages:
            s = _status()
            self.samples.append({"responses": self.responses, "rss": s["VmRSS"], "anon": s["RssAnon"],
                                 "file": s["RssFile"], "seconds": time.monotonic() - self.t0})
            # written as it goes: a crawl stopped early still shows its curve
            self.out.with_suffix(".partial").write_text(json.dumps(self.samples) + "\n", encoding="utf-8")
            if self.trace:
                for share in (0.2, 0.6, 1.0):
                    if self.responses == max(self.every, int(self.pages * share) // self.every * self.every) \
                            and share not in self.snapshots:
                        import gc
                        import tracemalloc

                        gc.collect()
                        self.snapshots[share] = tracemalloc.take_snapshot()

    def spider_closed(self, spider=None, reason=None) -> None:
        s = _status()
        payload = {"samples": self.samples, "closed": {"rss": s["VmRSS"], "anon": s["RssAnon"], "file": s["RssFile"]},
                   "responses": self.responses}
        if self.trace and 0.2 in self.snapshots:
            lines = []
            base = self.snapshots[0.2]
            for share in (0.6, 1.0):
                if share not in self.snapshots:
                    continue
                stats = self.snapshots[share].compare_to(base, "lineno")
                lines.append(f"== growth from 20% to {share:.0%} of the pages (top 30 by size)")
                lines += [str(st) for st in stats[:30]]
            payload["trace"] = lines
        self.out.write_text(json.dumps(payload) + "\n", encoding="utf-8")


# -- the store alone ------------------------------------------------------------------------------


def store_child(n: int, every: int) -> dict:
    """The store's part of a crawl without the crawl: ``n`` distinct documents indexed as the
    content layer indexes a new cluster (``index_near`` with a SimHash and 32 band hashes, in
    batches), each batch followed by a SimHash and a band lookup; RSS sampled every ``every``."""
    from scrapy_dedup.store.leveldb import LevelDBStore

    rng = random.Random(39)
    path = tempfile.mkdtemp(prefix="soak-store-")
    samples = []
    t0 = time.monotonic()
    try:
        store = LevelDBStore(path, {"benchmark": "soak"})
        for start in range(0, n, 16):
            with store.batch() as batch:
                for i in range(start, min(start + 16, n)):
                    batch.index_near("", rng.getrandbits(64), [rng.getrandbits(64) for _ in range(32)], f"{i:016x}")
            store.simhash_candidates("", rng.getrandbits(64), 3)
            store.band_candidates("", [rng.getrandbits(64) for _ in range(32)])
            done = min(start + 16, n)
            if done % every < 16 or done == n:
                st = _status()
                samples.append({"responses": done, "rss": st["VmRSS"], "anon": st["RssAnon"],
                                "file": st["RssFile"], "seconds": time.monotonic() - t0})
        store.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {"samples": samples, "responses": n}


# -- the runs -----------------------------------------------------------------------------------


def _growth(result: dict, pages: int) -> dict:
    samples = result["samples"]
    warm = min(samples, key=lambda s: abs(s["responses"] - WARM * pages))
    end = samples[-1]
    span = end["responses"] - warm["responses"]
    return {
        "warm": warm,
        "end": end,
        "growth_bytes": end["rss"] - warm["rss"],
        "growth_anon_bytes": end["anon"] - warm["anon"],
        "growth_mb_per_1e5": (end["rss"] - warm["rss"]) / 2**20 / span * 1e5 if span else None,
        "peak_anon_after_warm": max(s["anon"] for s in samples if s["responses"] >= warm["responses"]),
    }


def crawl(mode: str, url: str, pages: int, work: Path, trace: bool) -> dict:
    if mode == "store":
        from run_all import run_child

        t0 = time.perf_counter()
        result = run_child([str(Path(__file__)), "--store-child", str(pages)])
        return {**result, **_growth(result, pages), "mode": mode, "wall_s": time.perf_counter() - t0, "errors": []}
    run = Path(tempfile.mkdtemp(prefix=f"soak-{mode}-", dir=work))
    out = run / "probe.json"
    settings = {
        "LOG_LEVEL": "WARNING",
        "CONCURRENT_REQUESTS": "16",
        "CONCURRENT_REQUESTS_PER_DOMAIN": "16",
        "EXTENSIONS": json.dumps({"bench_soak.RssProbe": 0}),
        "SOAK_OUT": str(out),
        "SOAK_PAGES": str(pages),
        "SOAK_TRACE": str(trace),
        "DEDUP_STORE": str(run / "store"),
        "DEDUP_LOGSTATS_INTERVAL": "0",
    }
    if mode == "scrapy":
        settings["ADDONS"] = "{}"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start_url={url}/p/0.html"]
    for k, v in settings.items():
        cmd += ["-s", f"{k}={v}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), str(REPO), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO / "example_project", capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"soak crawl {mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text(encoding="utf-8"))
    shutil.rmtree(run, ignore_errors=True)
    result.update({
        "mode": mode,
        "wall_s": wall,
        **_growth(result, pages),
        "errors": [line for line in proc.stderr.splitlines() if " ERROR" in line or "Traceback" in line][:5],
    })
    return result


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from run_all import RESULTS, SIZES, log, row, write_result

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--pages", type=int, help="distinct pages (default by size)")
    parser.add_argument("--modes", default="dedup,scrapy,store",
                        help="dedup (the crawl with the add-on), scrapy (plain Scrapy), store (the store alone)")
    parser.add_argument("--parallel", action="store_true", help="run the modes at the same time (a long soak)")
    parser.add_argument("--trace", action="store_true", help="tracemalloc in the crawl process (slow)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--store-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.store_child:
        print(json.dumps(store_child(args.store_child, max(1, args.store_child // 50))))
        return 0
    pages = args.pages or PAGES[args.size]
    site = serve(pages)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    runs = {}
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    def one(mode: str) -> None:
        log(NAME, f"{mode}: {pages:,} pages ...")
        r = crawl(mode, site.url, pages, work, args.trace)
        log(NAME, f"{mode}: {r['responses']:,} responses in {r['wall_s']:.0f} s; RSS {r['warm']['rss'] >> 20} MB "
                  f"at {r['warm']['responses']:,} -> {r['end']['rss'] >> 20} MB at {r['end']['responses']:,}: "
                  f"{r['growth_mb_per_1e5']:.1f} MB per 10^5 pages")
        runs[mode] = r

    try:
        if args.parallel:
            # the crawls side by side under the same load, each in its own process
            with ThreadPoolExecutor(len(modes)) as pool:
                for future in [pool.submit(one, mode) for mode in modes]:
                    future.result()
        else:
            for mode in modes:
                one(mode)
    finally:
        site.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.trace:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "soak_trace.txt").write_text(
            "\n".join(line for r in runs.values() for line in [f"### {r['mode']}", *r.get("trace", [])]) + "\n",
            encoding="utf-8")
    rows = []
    d, s = runs.get("dedup"), runs.get("scrapy")
    st = runs.get("store")
    if st is not None:
        rows.append(row(NAME, f"{pages:,} distinct documents, the store alone (index_near + lookups): RSS growth "
                              "after 20%, MB per 10^5; private memory at 20% -> peak after -> end",
                        f"{st['growth_mb_per_1e5']:.1f} MB; {st['warm']['anon'] / 2**20:.0f} -> "
                        f"{st['peak_anon_after_warm'] / 2**20:.0f} -> {st['end']['anon'] / 2**20:.0f} MB",
                        "", "", "report", None))
    for label, r in (("scrapy-dedup", d), ("plain Scrapy", s)):
        if r is None:
            continue
        rows.append(row(NAME, f"{pages:,} distinct pages: RSS growth after 20%, MB per 10^5 pages, {label}",
                        f"{r['growth_mb_per_1e5']:.1f} MB ({r['warm']['rss'] / 2**20:.0f} -> "
                        f"{r['end']['rss'] / 2**20:.0f} MB; private {r['growth_anon_bytes'] / 2**20:+.0f} MB)",
                        f"plain Scrapy {s['growth_mb_per_1e5']:.1f} MB" if (s and r is d) else "",
                        "", (f"<= {TARGET_MB_PER_1E5:.0f} MB" if pages >= JUDGED_FROM else
                             f"<= {TARGET_MB_PER_1E5:.0f} MB (judged from {JUDGED_FROM:,} pages: --size large)")
                        if r is d else "report",
                        (r["growth_mb_per_1e5"] <= TARGET_MB_PER_1E5) if (r is d and pages >= JUDGED_FROM) else None))
    notes = [f"example project's site spider, CONCURRENT_REQUESTS 16 (16 per domain), {pages:,} generated "
             f"distinct pages of ~250 words, {FANOUT} links each; RSS of the crawl process sampled every "
             f"{max(1, pages // 50):,} responses; growth = RSS at the end minus RSS at {WARM:.0%} of the pages."]
    write_result(NAME, {"size": args.size, "pages": pages, "runs": runs, "rows": rows, "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
