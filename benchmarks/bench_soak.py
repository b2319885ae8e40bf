"""Memory soak: the crawl process's RSS over a long crawl of distinct pages, against plain Scrapy.

    .venv/bin/python benchmarks/bench_soak.py [--size tiny|default|large] [--pages 200000] [--parallel] [--trace]

A generated site on 127.0.0.1 (port 0) serves N distinct pages: page i has its own title and
about 250 words drawn from a fixed vocabulary by a generator seeded with i (so no two pages are
near duplicates), and links to its 16 children 16i+1 .. 16i+16. The example project's ``site``
spider crawls it (``scrapy crawl site``, CONCURRENT_REQUESTS 16, 16 per domain) twice, in
subprocesses: with the add-on (defaults; a fresh ``DEDUP_STORE``) and as plain Scrapy
(``ADDONS = {}``, Scrapy's own dupefilter and nothing else).

An extension of this module (``RssProbe``) samples the crawl process's own VmRSS, RssAnon and
RssFile every N/50 responses. Growth after warm-up is the end minus 35% of the pages (of those
fetched, in a crawl stopped early), scaled to 10^5 pages. The target (at most 10 MB per 10^5 pages) judges private memory, RssAnon, on a soak
of 2 x 10^5 pages (``--size large``; the smaller sizes only show the curve): RssFile is LevelDB's
table files mapped for reading, clean page cache the kernel takes back under pressure, which
grows with the part of the store a crawl has read; VmRSS is the two together. All three are
reported, beside plain Scrapy's. ``--parallel`` runs the crawls side by side (a long soak: the
same load for both); ``--rows-from FILE`` recomputes the table of a soak.json, such as one of a
crawl stopped early (its probe wrote the curve so far). ``--trace`` also runs
``tracemalloc`` in the crawl process and writes the top allocation sites that grew between 20%,
60% and 100% to results/soak_trace.txt (slow: use it on a smaller crawl to find what grows).
Writes results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
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
#: the target is judged on a soak of at least this many pages; shorter ones show the curve
JUDGED_FROM = 200_000
FANOUT = 16
TARGET_MB_PER_1E5 = 10.0
#: warm-up: growth is measured from this share of the pages on.  At 2 x 10^5 pages that is
#: 70,000, past the first fill of the largest level that fills in a crawl (the MinHash bands',
#: 65,536 + 2,048 documents; its arrays are allocated once and reused after that)
WARM = 0.35
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
            store.near_candidates("", rng.getrandbits(64), [rng.getrandbits(64) for _ in range(32)], 3)
            done = min(start + 16, n)
            if done % every < 16 or done == n:
                st = _status()
                samples.append({"responses": done, "rss": st["VmRSS"], "anon": st["RssAnon"],
                                "file": st["RssFile"], "seconds": time.monotonic() - t0})
        store.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"samples": samples, "responses": n, "cpu_s": usage.ru_utime + usage.ru_stime}


# -- the runs -----------------------------------------------------------------------------------


def _growth(result: dict, pages: int) -> dict:
    """Growth after warm-up of VmRSS (``rss``), private memory (``anon``, RssAnon) and mapped
    files (``file``, RssFile), each in MB per 10^5 pages.

    The target judges private memory: RssFile is clean pages of LevelDB's table files mapped
    for reading (page cache the kernel takes back under pressure without writing anything;
    it grows with the part of the store a crawl reads, up to the store's size), RssAnon is
    what the process holds. Both are reported, with VmRSS, beside plain Scrapy's.
    """
    samples = result["samples"]
    end = samples[-1]
    # a crawl stopped early is measured over the same share of what it fetched
    warm = min(samples, key=lambda s: abs(s["responses"] - WARM * min(pages, end["responses"])))
    span = end["responses"] - warm["responses"]
    out = {"warm": warm, "end": end, "growth_bytes": end["rss"] - warm["rss"],
           "growth_anon_bytes": end["anon"] - warm["anon"],
           "peak_anon_after_warm": max(s["anon"] for s in samples if s["responses"] >= warm["responses"])}
    for key, name in (("rss", "growth_mb_per_1e5"), ("anon", "growth_anon_mb_per_1e5"),
                      ("file", "growth_file_mb_per_1e5")):
        out[name] = (end[key] - warm[key]) / 2**20 / span * 1e5 if span and key in end else None
    return out


def _mb(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} MB"


def table(runs: dict, pages: int) -> list[dict]:
    """The rows of the results table from the runs (also from a crawl stopped early)."""
    from run_all import row

    rows = []
    d, s, st = runs.get("dedup"), runs.get("scrapy"), runs.get("store")
    if st is not None:
        rows.append(row(NAME, f"{st['end']['responses']:,} distinct documents, the store alone (index_near + "
                              f"lookups): private memory (RssAnon) growth after {WARM:.0%}, per 10^5; at "
                              f"{WARM:.0%} -> peak after -> end",
                        f"{_mb(st['growth_anon_mb_per_1e5'])}; {st['warm']['anon'] / 2**20:.0f} -> "
                        f"{st['peak_anon_after_warm'] / 2**20:.0f} -> {st['end']['anon'] / 2**20:.0f} MB "
                        f"(VmRSS {_mb(st['growth_mb_per_1e5'])})", "", "", "report", None))
    for label, r in (("scrapy-dedup", d), ("plain Scrapy", s)):
        if r is None:
            continue
        n = r["end"]["responses"]
        judged = r is d and n >= JUDGED_FROM
        rows.append(row(NAME, f"{n:,} distinct pages: private memory (RssAnon) growth after {WARM:.0%}, MB per "
                              f"10^5 pages, {label}",
                        f"{_mb(r['growth_anon_mb_per_1e5'])} ({r['warm']['anon'] / 2**20:.0f} -> "
                        f"{r['end']['anon'] / 2**20:.0f} MB, peak {r['peak_anon_after_warm'] / 2**20:.0f} MB)",
                        f"plain Scrapy {_mb(s['growth_anon_mb_per_1e5'])}" if (s and r is d) else "", "",
                        (f"<= {TARGET_MB_PER_1E5:.0f} MB" if judged else
                         f"<= {TARGET_MB_PER_1E5:.0f} MB (judged from {JUDGED_FROM:,} pages: --size large)")
                        if r is d else "report",
                        (r["growth_anon_mb_per_1e5"] <= TARGET_MB_PER_1E5) if judged else None))
        rows.append(row(NAME, f"{n:,} distinct pages: VmRSS growth after {WARM:.0%} (private + mapped store "
                              f"files, RssFile), MB per 10^5 pages, {label}",
                        f"{_mb(r['growth_mb_per_1e5'])} ({r['warm']['rss'] / 2**20:.0f} -> "
                        f"{r['end']['rss'] / 2**20:.0f} MB; RssFile {_mb(r['growth_file_mb_per_1e5'])})",
                        f"plain Scrapy {_mb(s['growth_mb_per_1e5'])}" if (s and r is d) else "",
                        "", "report", None))
    return rows


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
    from run_all import RESULTS, SIZES, log, write_result

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--pages", type=int, help="distinct pages (default by size)")
    parser.add_argument("--modes", default="dedup,scrapy,store",
                        help="dedup (the crawl with the add-on), scrapy (plain Scrapy), store (the store alone)")
    parser.add_argument("--parallel", action="store_true", help="run the modes at the same time (a long soak)")
    parser.add_argument("--trace", action="store_true", help="tracemalloc in the crawl process (slow)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rows-from", type=Path,
                        help="recompute the table of a soak.json (e.g. of a crawl stopped early) and write it back")
    parser.add_argument("--store-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows_from:
        data = json.loads(args.rows_from.read_text(encoding="utf-8"))
        data["runs"] = {mode: {**r, **_growth(r, data["pages"])} for mode, r in data["runs"].items()}
        data["rows"] = table(data["runs"], data["pages"])
        args.rows_from.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        return 0
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
    rows = table(runs, pages)
    notes = [f"example project's site spider, CONCURRENT_REQUESTS 16 (16 per domain), {pages:,} generated "
             f"distinct pages of ~250 words, {FANOUT} links each; RSS of the crawl process sampled every "
             f"{max(1, pages // 50):,} responses; growth = the end minus {WARM:.0%} of the pages, of VmRSS, "
             "RssAnon (private memory: what the target judges) and RssFile (LevelDB's table files mapped for "
             "reading: page cache the kernel takes back)."]
    write_result(NAME, {"size": args.size, "pages": pages, "runs": runs, "rows": rows, "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
