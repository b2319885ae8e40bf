"""Crawl benchmarks: what scrapy-dedup costs per page, and the fetches it avoids.

    .venv/bin/python benchmarks/bench_crawl.py [--size tiny|default|large] [--part cost|fetches|all]

Every crawl is a real ``scrapy runspider`` of this file (it also holds the spider, the item
pipeline of the alternative and a stats extension) in a subprocess, against a server on 127.0.0.1
(port 0) run by this script, with ``CONCURRENT_REQUESTS`` and ``CONCURRENT_REQUESTS_PER_DOMAIN``
16. CPU seconds are ``getrusage(RUSAGE_CHILDREN)`` deltas around each crawl (user + system): the
crawl process and its extraction worker processes, which it joins before it exits. Arms:

- ``pool_full``: what a RAG team writes without deduplication: Scrapy and an item pipeline that
  calls ``trafilatura.extract(html)`` with its defaults (the full mode) in a pool of 2 spawned
  processes (``response.text`` crosses to the worker);
- ``pool_project``: the same pipeline calling this project's ``extract_text`` (the fast mode, the
  full mode on pages of DocBook-style paragraphs): the extension minus it is the extension's own work;
- ``dedup``: ``ADDONS = {"scrapy_dedup.Addon": 500}`` with its defaults (``DEDUP_WORKERS = 2``,
  the CPU count here, set so that both sides have 2 workers on any machine), a fresh store;
- ``dedup_chunks``: the same with ``DEDUP_CHUNKS = True`` (settled at the spider's close,
  included).

1. Cost (``--part cost``): on three real sites of different kinds (``_corpus.COST_SITES``: a
   Publican book whose pages the fast mode cuts, two releases of one manual, a large javadoc
   reference), the first ``--pages`` pages a crawl reaches breadth-first. Every round crawls each
   site with every arm back to back, the arms' order rotated from round to round, so that the
   machine's load falls on all of them alike. CPU per fetched page is the crawl's CPU minus that of
   a crawl of the start page alone with the same arm (start-up, the workers' spawn and warm-up),
   over the pages fetched beyond it. Medians over ``--rounds`` rounds; the ratios are medians of
   each round's ratios. ``--baseline DIR`` adds ``dedup_baseline`` and ``dedup_chunks_baseline``:
   another version's ``dedup`` and ``dedup_chunks``. ``--sites`` runs some of the sites only.

2. Fetches avoided (``--articles``, default 200): a generated site with the demo site's
   duplicate patterns at scale. Per article: the article, 3 links with tracking parameters,
   2 with session ids (query and ;jsessionid), a printer version, a byte-identical mirror and a
   syndicated copy with rel=canonical; listing pages of 20 articles, each linked with 3 colour
   facets x 2 sort orders and 2 sort-only variants (``DEDUP_HOST_RULES`` allows ``page``).
   Each response names its document in an ``X-Doc`` header (server-side ground truth):
   the distinct documents a crawl ends with are the distinct X-Doc values of its items, and
   also the distinct extracted-text hashes. Fetches and bytes are counted by the server.

Writes results/crawl.json and results/crawl_cost.md (the cost tables).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import multiprocessing
import os
import posixpath
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import scrapy
from scrapy import signals

HERE = Path(__file__).resolve().parent

NAME = "crawl"
PAGES = {"tiny": 15, "default": 300, "large": 1000}
ARTICLES = {"tiny": 12, "default": 200, "large": 1000}
ROUNDS = {"tiny": 1, "default": 5, "large": 7}
WORKERS = 2
CONCURRENCY = 16  # CONCURRENT_REQUESTS and CONCURRENT_REQUESTS_PER_DOMAIN (one host here)
PER_LISTING = 20
TRACKING = ("utm_source=newsletter&utm_medium=email", "utm_source=social&utm_campaign=launch", "gclid=EAIaIQob{i}")
SESSIONS = ("?jsessionid=0A1B{i}C3D", ";jsessionid=ABC{i}")
COLOURS, SORTS = ("red", "blue", "green"), ("price", "newest")
TARGET_FETCHES = 0.5  # at least 50 % fewer fetches
#: CPU per page against the pool with trafilatura's defaults (defaults, chunks), and the
#: extension against the pool with its own extraction (its own work)
TARGET_DEFAULTS, TARGET_CHUNKS, TARGET_OWN = 1.00, 1.10, 1.05

#: the arms of the cost comparison, in their order in the tables
ARMS = {
    "pool_full": "Scrapy + trafilatura.extract(html), defaults (full mode), 2-process pool",
    "pool_project": "the same pool with this project's extract_text",
    "dedup": "scrapy-dedup's defaults",
    "dedup_chunks": "scrapy-dedup, DEDUP_CHUNKS = True",
}
DEDUP_ARMS = ("dedup", "dedup_chunks", "dedup_baseline", "dedup_chunks_baseline")


# == what runs inside `scrapy runspider` ========================================================


class BenchSpider(scrapy.Spider):
    """Follows in-scope links (same host and port; within ``allow`` when given; none when
    ``follow`` is "0") and yields one item per response: ``url``, the server's ``doc`` id, and
    the raw ``html`` unless the scrapy-dedup pipeline is to read the response itself."""

    name = "bench"

    def __init__(self, start_url: str = "", mode: str = "raw", allow: str = "", follow: str = "1", **kwargs):
        super().__init__(**kwargs)
        self.start_url, self.mode, self.follow = start_url, mode, follow != "0"
        self.origin = urlsplit(start_url).netloc
        self.allow = set(Path(allow).read_text(encoding="utf-8").split()) if allow else None

    async def start(self):
        yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response):
        item = {"url": response.url}
        doc = response.headers.get(b"X-Doc")
        if doc:
            item["doc"] = doc.decode("ascii")
        if self.mode != "dedup" and hasattr(response, "text"):
            item["html"] = response.text
        yield item
        if not self.follow or not hasattr(response, "text"):
            return
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href.strip())
            parts = urlsplit(url)
            if parts.netloc != self.origin:
                continue
            if self.allow is not None and parts.path.lstrip("/") not in self.allow:
                continue
            yield scrapy.Request(url, callback=self.parse)


class PoolPipeline:
    """The alternative without deduplication: ``BENCH_EXTRACT`` ("full": ``trafilatura.extract``
    with its defaults, "project": this project's ``extract_text``) on every page, in a pool of
    spawned processes, each warmed on one page first as scrapy-dedup's are."""

    def __init__(self, crawler):
        if crawler.settings.get("BENCH_EXTRACT") == "full":
            from trafilatura import extract
        else:
            from scrapy_dedup.extraction.main_text import extract_text as extract
        self.extract = extract
        self.pool = ProcessPoolExecutor(crawler.settings.getint("BENCH_WORKERS", WORKERS),
                                        mp_context=multiprocessing.get_context("spawn"),
                                        initializer=extract, initargs=("<html><body><p>warm up</p></body></html>",))

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    async def process_item(self, item, spider=None):
        markup = item.pop("html", "")
        item["text"] = (await asyncio.wrap_future(self.pool.submit(self.extract, markup)) or "") if markup else ""
        return item

    def close_spider(self, spider=None):
        self.pool.shutdown(wait=True)  # joined: their CPU counts in RUSAGE_CHILDREN


class StatsDump:
    """Write the final stats to the BENCH_STATS file (JSON)."""

    def __init__(self, crawler, path: str):
        self.crawler, self.path = crawler, path

    @classmethod
    def from_crawler(cls, crawler):
        ext = cls(crawler, crawler.settings.get("BENCH_STATS"))
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def engine_stopped(self):
        stats = {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in self.crawler.stats.get_stats().items()}
        # the crawl process's own CPU (all its threads) and its reaped children's (the workers)
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        stats["bench/cpu_self_s"] = me.ru_utime + me.ru_stime
        stats["bench/cpu_children_s"] = children.ru_utime + children.ru_stime
        Path(self.path).write_text(json.dumps(stats), encoding="utf-8")


# == the server ================================================================================


class Site:
    """Answers GETs from a dict {path (with query): (body, {header: value})}; counts fetches
    and bytes. ``latency`` seconds are added to each response (default 0)."""

    def __init__(self, pages: dict[str, tuple[bytes, dict[str, str]]], latency: float = 0.0, ignore_query: bool = False):
        self.pages, self.latency, self.ignore_query = pages, latency, ignore_query
        self.fetches = self.bytes = 0
        self.lock = threading.Lock()

    def respond(self, target: str) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(target)
        path = parts.path
        if ";" in path:  # ;jsessionid=... path parameters: the server ignores them
            path = "/".join(seg.split(";", 1)[0] for seg in path.split("/"))
        keys = [path + ("?" + parts.query if parts.query else ""), path]
        if not self.ignore_query:
            keys = keys[:1]
        for key in keys:
            if key in self.pages:
                body, headers = self.pages[key]
                return 200, headers, body
        return 404, {"Content-Type": "text/html"}, b"<html><body>not found</body></html>"

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                status, headers, body = site.respond(self.path)
                if site.latency:
                    time.sleep(site.latency)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with site.lock:
                    site.fetches += 1
                    site.bytes += len(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}"

    def reset(self) -> None:
        with self.lock:
            self.fetches = self.bytes = 0



# == running one crawl ==========================================================================


def arm_settings(arm: str, run: Path) -> dict[str, str]:
    """Settings of one arm (``raw``: plain Scrapy keeping the HTML; see the module's docstring)."""
    if arm in ("pool_full", "pool_project"):
        return {"ITEM_PIPELINES": json.dumps({"bench_crawl.PoolPipeline": 300}),
                "BENCH_EXTRACT": arm.removeprefix("pool_"), "BENCH_WORKERS": str(WORKERS)}
    if arm in DEDUP_ARMS:
        settings = {
            "ADDONS": json.dumps({"scrapy_dedup.Addon": 500}),
            "DEDUP_STORE": str(run / "store"),
            "DEDUP_WORKERS": str(WORKERS),
            "DEDUP_LOGSTATS_INTERVAL": "0",
        }
        if arm in ("dedup_chunks", "dedup_chunks_baseline"):
            settings["DEDUP_CHUNKS"] = "True"
        return settings
    return {}


def crawl(arm: str, start_url: str, workdir: Path, *, allow: Path | None = None, follow: bool = True,
          host_rules: dict | None = None, baseline: Path | None = None) -> dict:
    """One ``scrapy runspider`` of this file; returns stats, items, wall and CPU seconds.

    ``follow=False``: the start page alone. ``baseline``: a directory holding another version's
    ``scrapy_dedup`` package, imported instead of this checkout's."""
    run = Path(tempfile.mkdtemp(prefix=f"{arm}-", dir=workdir))
    items, stats_file = run / "items.jsonl", run / "stats.json"
    settings = {
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": "False",
        "ROBOTSTXT_OBEY": "False",
        "CONCURRENT_REQUESTS": str(CONCURRENCY),
        "CONCURRENT_REQUESTS_PER_DOMAIN": str(CONCURRENCY),
        "EXTENSIONS": json.dumps({"bench_crawl.StatsDump": 0}),
        "BENCH_STATS": str(stats_file),
        "ADDONS": "{}",
        **arm_settings(arm, run),
    }
    if host_rules and arm in DEDUP_ARMS:
        settings["DEDUP_HOST_RULES"] = json.dumps(host_rules)
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "bench_crawl.py"), "-O", str(items),
           "-a", f"start_url={start_url}", "-a", f"mode={'dedup' if arm in DEDUP_ARMS else 'raw'}",
           "-a", f"follow={int(follow)}"]
    if allow is not None:
        cmd += ["-a", f"allow={allow}"]
    for k, v in settings.items():
        cmd += ["-s", f"{k}={v}"]
    env = None
    if baseline is not None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(baseline), os.environ.get("PYTHONPATH")])))
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=run, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or not stats_file.exists():
        raise RuntimeError(f"crawl {arm} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    stats = json.loads(stats_file.read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in items.read_text(encoding="utf-8").splitlines() if line.strip()] if items.exists() else []
    errors = [line for line in proc.stderr.splitlines() if " ERROR" in line or "Traceback" in line]
    shutil.rmtree(run, ignore_errors=True)
    return {
        "arm": arm,
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "elapsed_s": float(stats.get("elapsed_time_seconds", 0.0)),
        "cpu_crawl_process_s": float(stats.get("bench/cpu_self_s", 0.0)),
        "responses": int(stats.get("downloader/response_count", 0)),
        "response_bytes": int(stats.get("downloader/response_bytes", 0)),
        "load_average": load,
        "items": rows,
        "errors": errors[:5],
        "stats": {k: v for k, v in stats.items() if k.startswith(("dedup/", "item_", "dupefilter/", "downloader/response_status"))},
    }


# == 1. cost per page against Scrapy + trafilatura in a process pool ===========================

_HREF = re.compile(rb'href="([^"#?:]+\.html)')
HTML_HEADERS = {"Content-Type": "text/html; charset=utf-8"}


def tree_site(trees: list[tuple[str, Path]], pages: int) -> tuple[Site, str, list[str]]:
    """A site of the directories ``trees`` ([(URL prefix, directory)]) under their prefixes,
    with a start page linking each tree's index.html: (the site, the start path, the paths of
    the first ``pages`` pages a crawl reaches breadth-first from it, which alone it serves)."""
    import _corpus

    files = {prefix + p: root / p for prefix, root in trees for p in _corpus.html_pages(root)}
    links = "".join(f'<li><a href="{prefix}index.html">{prefix.strip("/")}</a></li>' for prefix, _ in trees)
    start = "/" if len(trees) > 1 else trees[0][0] + "index.html"
    bodies = {"/": f"<!DOCTYPE html><html><head><title>Sites</title></head><body><ul>{links}</ul></body></html>".encode()}
    order, seen = [start], {start}
    for page in order:
        if len(order) >= pages:
            break
        body = bodies.get(page)
        if body is None:
            body = bodies[page] = files[page].read_bytes()
        for href in _HREF.findall(body):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(page), href.decode()))
            if target in files and target not in seen:
                seen.add(target)
                order.append(target)
    chosen = order[:pages]
    served = {p: (bodies[p] if p in bodies else files[p].read_bytes(), HTML_HEADERS) for p in chosen}
    # a session id in the query names the same page, as on a real server
    return Site(served, ignore_query=True), start, chosen


def postgres_site(pages: int, root: Path | None = None) -> tuple[Site, list[str]]:
    """The first ``pages`` pages of ``root`` (default: the PostgreSQL 15.20 docs, or
    $SCRAPY_DEDUP_BENCH_PAGES) from index.html, served at the root; (the site, their paths
    without the leading /)."""
    import _corpus

    site, _, chosen = tree_site([("/", root or _corpus.docs_root())], pages)
    return site, [p.lstrip("/") for p in chosen]


def cost_sites(pages: int, only: str | None = None) -> dict[str, list[tuple[str, Path]]]:
    """{site name: trees}: ``_corpus.COST_SITES`` (those whose names contain one of the
    comma-separated words of ``only``, when given), or $SCRAPY_DEDUP_BENCH_PAGES alone when set."""
    import _corpus

    if os.environ.get(_corpus.PAGES_ENV):
        root = _corpus.docs_root()
        return {f"{root.name} (${_corpus.PAGES_ENV})": [("/", root)]}
    words = [w.strip() for w in only.split(",") if w.strip()] if only else []
    names = [n for n in _corpus.COST_SITES if not words or any(w in n for w in words)]
    if not names:
        raise SystemExit(f"--sites {only!r} names none of: {', '.join(_corpus.COST_SITES)}")
    return {name: _corpus.cost_site_trees(name) for name in names}


def _median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def cost(args, workdir: Path) -> dict:
    from run_all import log

    arms = [a for a in ARMS if not args.arms or a in args.arms.split(",")]
    if args.baseline is not None:
        arms += [f"{a}_baseline" for a in ("dedup", "dedup_chunks") if a in arms]
    sites = {}
    for name, trees in cost_sites(args.pages, args.sites).items():
        site, start, chosen = tree_site(trees, args.pages)
        allow = workdir / f"allow-{len(sites)}.txt"
        allow.write_text("\n".join(p.lstrip("/") for p in chosen), encoding="utf-8")
        server, origin = site.serve()
        sites[name] = {"server": server, "start": origin + start, "allow": allow, "pages": len(chosen)}
    runs: dict[str, dict[str, list[dict]]] = {name: {arm: [] for arm in arms} for name in sites}
    try:
        for rnd in range(args.rounds):
            for name, site in sites.items():
                # rotated, so that no arm always runs first (or right after another)
                for arm in arms[rnd % len(arms):] + arms[: rnd % len(arms)]:
                    baseline = args.baseline if arm.endswith("_baseline") else None
                    one = crawl(arm, site["start"], workdir, follow=False, baseline=baseline)
                    r = crawl(arm, site["start"], workdir, allow=site["allow"], baseline=baseline)
                    pages = max(r["responses"] - one["responses"], 1)
                    texts = [i.get("text") for i in r.pop("items")]
                    one.pop("items")
                    r.update(
                        round=rnd + 1,
                        item_count=len(texts),
                        text_chars=sum(len(t) for t in texts if isinstance(t, str)),
                        cpu_one_page_s=one["cpu_s"],
                        cpu_per_page_ms=1000 * (r["cpu_s"] - one["cpu_s"]) / pages,
                        crawl_process_cpu_per_page_ms=1000 * (r["cpu_crawl_process_s"] - one["cpu_crawl_process_s"]) / pages,
                        pages_per_s=r["responses"] / r["elapsed_s"] if r["elapsed_s"] else 0.0,
                        url_dropped=sum(v for k, v in r["stats"].items() if k.startswith("dedup/url/dropped/")),
                        extraction_skipped=int(r["stats"].get("dedup/doc/extraction_skipped", 0)),
                    )
                    runs[name][arm].append(r)
                    log(NAME, f"cost round {rnd + 1} {name} {arm}: {r['responses']} pages, {r['pages_per_s']:.1f} pages/s, "
                              f"{r['cpu_per_page_ms']:.1f} ms CPU/page, {r['item_count']} items, load {r['load_average']:.1f}"
                              + (f", errors: {r['errors']}" if r["errors"] else ""))
    finally:
        for site in sites.values():
            site["server"].shutdown()
    summary = {}
    for name, by_arm in runs.items():
        s = {
            arm: {
                "cpu_per_page_ms": _median(r["cpu_per_page_ms"] for r in rs),
                "cpu_per_page_ms_rounds": [round(r["cpu_per_page_ms"], 2) for r in rs],
                "crawl_process_cpu_per_page_ms": _median(r["crawl_process_cpu_per_page_ms"] for r in rs),
                "pages_per_s": _median(r["pages_per_s"] for r in rs),
                "pages": _median(r["responses"] for r in rs),
                "items": _median(r["item_count"] for r in rs),
                "text_chars": _median(r["text_chars"] for r in rs),
                "url_dropped": _median(r["url_dropped"] for r in rs),
                "extraction_skipped": _median(r["extraction_skipped"] for r in rs),
                "doc_statuses": {k.removeprefix("dedup/doc/"): v for k, v in rs[-1]["stats"].items()
                                 if k.startswith("dedup/doc/")} if rs else {},
            }
            for arm, rs in by_arm.items()
        }
        ratios = {}
        for label, a, b in (("defaults_vs_pool_full", "dedup", "pool_full"),
                            ("chunks_vs_pool_full", "dedup_chunks", "pool_full"),
                            ("defaults_vs_pool_project", "dedup", "pool_project"),
                            ("pool_project_vs_pool_full", "pool_project", "pool_full"),
                            ("defaults_vs_baseline", "dedup", "dedup_baseline"),
                            ("chunks_vs_baseline", "dedup_chunks", "dedup_chunks_baseline")):
            if by_arm.get(a) and by_arm.get(b):
                rounds = [x["cpu_per_page_ms"] / y["cpu_per_page_ms"] for x, y in zip(by_arm[a], by_arm[b])
                          if y["cpu_per_page_ms"] > 0]
                ratios[label] = {"median": _median(rounds), "rounds": [round(x, 3) for x in rounds]}
        loads = [r["load_average"] for rs in by_arm.values() for r in rs]
        summary[name] = {"arms": s, "ratios": ratios, "served_pages": sites[name]["pages"],
                         "load_average": {"min": min(loads, default=0), "median": _median(loads), "max": max(loads, default=0)}}
    return {"pages": args.pages, "rounds": args.rounds, "workers": WORKERS, "concurrency": CONCURRENCY,
            "arms": {a: ARMS.get(a, f"another version's {ARMS[a.removesuffix('_baseline')]}") for a in arms},
            "summary": summary, "runs": runs}


def cost_markdown(cost_result: dict) -> str:
    """The cost tables (docs/benchmarks.md takes them from results/crawl_cost.md)."""
    arms = [a for a in ARMS if a in cost_result["arms"]]
    head = ["site", "pages fetched per run; fetches saved against the pool; extractions skipped",
            *[f"{a} CPU ms/page" for a in arms], "defaults / full pool", "chunks / full pool",
            "defaults / same-extraction pool (own work)", "load average"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in cost_result["summary"].items():
        a, r = s["arms"], s["ratios"]

        def ratio(label: str, target: float, r: dict = r) -> str:
            if label not in r:
                return "n/a"
            value = r[label]["median"]
            return f"{value:.2f}x" + ("" if value <= target else " **not met**")

        dedup = a.get("dedup", {})
        saved = a["pool_full"]["pages"] - dedup["pages"] if dedup and "pool_full" in a else 0
        lines.append("| " + " | ".join([
            name,
            f"{dedup.get('pages', 0):.0f}; {saved:.0f}; {dedup.get('extraction_skipped', 0):.0f}",
            *[f"{a[x]['cpu_per_page_ms']:.1f}" for x in arms],
            ratio("defaults_vs_pool_full", TARGET_DEFAULTS),
            ratio("chunks_vs_pool_full", TARGET_CHUNKS),
            ratio("defaults_vs_pool_project", TARGET_OWN),
            f"{s['load_average']['min']:.1f}-{s['load_average']['max']:.1f}",
        ]) + " |")
    lines += ["", "Wall-clock pages/s (the crawl's elapsed time, medians):", "",
              "| site | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for name, s in cost_result["summary"].items():
        lines.append(f"| {name} | " + " | ".join(f"{s['arms'][x]['pages_per_s']:.1f}" for x in arms) + " |")
    return "\n".join(lines) + "\n"


# == 2. fetches avoided on a duplicate-heavy site ==============================================


def _page(title: str, body: str, head: str = "", nav: str = "") -> bytes:
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>" + head
        + "</head><body><header><a href='/'>Harbor</a> <nav>" + nav + "</nav></header>" + body
        + "<footer><p>Copyright Harbor Docs. <a href='/'>Home</a></p></footer></body></html>"
    ).encode("utf-8")


def _article_body(title: str, text: str) -> str:
    paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n") if p.strip())
    return f"<article><h1>{html.escape(title)}</h1>{paragraphs}</article>"


def duplicate_site(articles: int) -> tuple[Site, dict]:
    import _corpus

    root = _corpus.docs_root()
    pages = _corpus.html_pages(root)
    # real texts of a few hundred words: an even spread over the docs
    candidates = pages[:: max(1, len(pages) // (3 * articles))]
    texts = _corpus.extracted_texts(root, candidates)
    chosen = [p for p in candidates if 150 <= len(texts[p].split()) <= 3000][:articles]
    if len(chosen) < articles:
        chosen = sorted(candidates, key=lambda p: -len(texts[p]))[:articles]
    html_h = {"Content-Type": "text/html; charset=utf-8"}
    site: dict[str, tuple[bytes, dict[str, str]]] = {}
    slugs: list[str] = []
    titles: list[str] = []
    teasers: list[str] = []
    nav = "<a href='/list?page=1'>Articles</a>"
    for i, p in enumerate(chosen):
        slug = Path(p).stem
        slugs.append(slug)
        title = texts[p].split("\n", 1)[0][:80] or slug
        titles.append(title)
        teasers.append(" ".join(texts[p].split()[len(title.split()) : len(title.split()) + 30]))
        body = _article_body(title, texts[p])
        doc = {"X-Doc": f"article-{i}", **html_h}
        article = _page(title, body + f"<p><a href='/print/{slug}.html'>Print</a></p>", nav=nav)
        site[f"/articles/{slug}.html"] = (article, doc)
        site[f"/mirror/articles/{slug}.html"] = (article, doc)  # byte-identical
        site[f"/print/{slug}.html"] = (
            f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body>{body}</body></html>".encode(),
            doc,
        )
        site[f"/partners/{slug}.html"] = (
            _page(title, "<div class='partner'>Syndicated by Partner Weekly</div>" + body,
                  head=f"<link rel='canonical' href='/articles/{slug}.html'>",
                  nav="<a href='/partners/'>Partner Weekly</a>"),
            doc,
        )
    listings = (articles + PER_LISTING - 1) // PER_LISTING
    for n in range(1, listings + 1):
        links = []
        for i in range((n - 1) * PER_LISTING, min(n * PER_LISTING, articles)):
            slug = slugs[i]
            base = f"/articles/{slug}.html"
            links.append(f"<li><h2><a href='{base}'>{html.escape(titles[i])}</a></h2><p>{html.escape(teasers[i])}</p>"
                         f"<a href='{base}?{TRACKING[0]}'>newsletter</a> "
                         f"<a href='{base}?{TRACKING[1]}'>share</a> <a href='{base}?{TRACKING[2].format(i=i)}'>ad</a> "
                         f"<a href='{base}{SESSIONS[0].format(i=i)}'>s</a> "
                         f"<a href='/articles/{slug}.html{SESSIONS[1].format(i=i)}'>t</a> "
                         f"<a href='/mirror/articles/{slug}.html'>mirror</a> <a href='/partners/{slug}.html'>partner</a></li>")
        facets = [f"<a href='/list?page={n}&colour={c}&sort={s}'>{c} by {s}</a>" for c in COLOURS for s in SORTS]
        facets += [f"<a href='/list?page={n}&sort={s}'>by {s}</a>" for s in SORTS]
        pager = " ".join(f"<a href='/list?page={m}'>{m}</a>" for m in range(1, listings + 1))
        body = (f"<main><h1>Articles, page {n}</h1><ul>{''.join(links)}</ul>"
                f"<div class='facets'>{' '.join(facets)}</div><div class='pager'>{pager}</div></main>")
        site[f"/list?page={n}"] = (_page(f"Articles page {n}", body, nav=nav), {"X-Doc": f"listing-{n}", **html_h})
    home = "<main><h1>Harbor documentation</h1><p>" + " ".join(
        f"<a href='/list?page={m}'>Articles {m}</a>" for m in range(1, listings + 1)) + "</p></main>"
    site["/"] = (_page("Harbor", home, nav=nav), {"X-Doc": "home", **html_h})

    class DuplicateSite(Site):
        def respond(self, target: str):
            parts = urlsplit(target)
            if parts.path == "/list":  # the listing ignores every parameter but page
                page = dict(kv.split("=", 1) for kv in parts.query.split("&") if "=" in kv).get("page", "1")
                target = f"/list?page={page}"
            return super().respond(target)

    distinct = {"articles": articles, "listings": listings, "home": 1}
    per_article = 1 + len(TRACKING) + len(SESSIONS) + 3  # + print, mirror, partner
    layout = {
        "articles": articles,
        "listing_pages": listings,
        "urls_per_article": per_article,
        "url_variants_per_article": len(TRACKING) + len(SESSIONS),
        "content_copies_per_article": 3,
        "facet_links_per_listing": len(COLOURS) * len(SORTS) + len(SORTS),
        "distinct_documents": articles + listings + 1,
    }
    return DuplicateSite(site, ignore_query=True), {"distinct": distinct, "layout": layout}


def fetches(args, workdir: Path) -> dict:
    from run_all import log

    from scrapy_dedup.core.fingerprints import content_hash

    site, info = duplicate_site(args.articles)
    site.latency = args.latency_ms / 1000
    server, origin = site.serve()
    rules = {"127.0.0.1": {"allow_params": ["page"]}}
    out = {}
    try:
        for mode in ("raw", "pool_full", "dedup"):
            site.reset()
            r = crawl(mode, origin + "/", workdir, host_rules=rules)
            items = r.pop("items")
            docs = {i.get("doc") for i in items if i.get("doc")}
            texts = {content_hash(i["text"]) for i in items if i.get("text")}
            r.update(fetches=site.fetches, bytes=site.bytes, item_count=len(items), distinct_docs=sorted(docs),
                     distinct_text_hashes=len(texts))
            out[mode] = r
            log(NAME, f"fetches {mode}: {site.fetches} fetches, {site.bytes / 1e6:.1f} MB, {r['wall_s']:.1f} s wall "
                      f"({r['elapsed_s']:.1f} s crawl), {len(docs)} distinct documents, {len(texts)} distinct texts"
                      + (f", errors: {r['errors']}" if r["errors"] else ""))
    finally:
        server.shutdown()
    plain_docs = set(out["raw"]["distinct_docs"])
    lost = sorted(plain_docs - set(out["dedup"]["distinct_docs"]))
    return {"layout": info["layout"], "latency_ms": args.latency_ms, "runs": out, "lost_documents": lost}


# == the report ==================================================================================


def make_rows(result: dict) -> list[dict]:
    from run_all import fmt, row

    rows = []
    for name, s in result.get("cost", {}).get("summary", {}).items():
        a, r = s["arms"], s["ratios"]
        if not {"dedup", "pool_full"} <= set(a):
            continue
        alternatives = "; ".join(f"{x} {a[x]['cpu_per_page_ms']:.1f}" for x in ("pool_full", "pool_project") if x in a)
        checks = [("defaults_vs_pool_full", "dedup", "defaults vs trafilatura's defaults in a 2-process pool", TARGET_DEFAULTS),
                  ("chunks_vs_pool_full", "dedup_chunks", "DEDUP_CHUNKS vs trafilatura's defaults in a 2-process pool",
                   TARGET_CHUNKS),
                  ("defaults_vs_pool_project", "dedup", "defaults vs the same pool with extract_text (own work)", TARGET_OWN)]
        for label, arm, what, target in checks:
            if label in r:
                value = r[label]["median"]
                rows.append(row(NAME, f"{name}: CPU ms per fetched page, all processes, {what}",
                                f"{a[arm]['cpu_per_page_ms']:.1f}", alternatives, f"{value:.2f}x", f"<= {target:.2f}x",
                                value <= target))
        rows.append(row(NAME, f"{name}: wall-clock pages/s; pages fetched per run; repeats dropped before fetch "
                              "(Scrapy's own filter drops them too); extractions the raw hash skipped",
                        f"{fmt(a['dedup']['pages_per_s'])}; {a['dedup']['pages']:.0f}; {a['dedup']['url_dropped']:.0f}; "
                        f"{a['dedup']['extraction_skipped']:.0f}",
                        "; ".join(f"{x} {fmt(a[x]['pages_per_s'])}, {a[x]['pages']:.0f} pages" for x in a if x != "dedup"),
                        "", "report", None))
    if "fetches" in result:
        f = result["fetches"]
        raw, ex, dd = f["runs"]["raw"], f["runs"]["pool_full"], f["runs"]["dedup"]
        fewer = 1 - dd["fetches"] / raw["fetches"]
        lay = f["layout"]
        label = f"duplicate-heavy site ({lay['articles']} articles)"
        rows += [
            row(NAME, f"{label}: fetches", fmt(dd["fetches"]), f"plain Scrapy {fmt(raw['fetches'])}",
                f"{100 * fewer:.0f}% fewer", ">= 50% fewer", fewer >= TARGET_FETCHES),
            row(NAME, f"{label}: MB downloaded", f"{dd['bytes'] / 1e6:.1f}", f"plain Scrapy {raw['bytes'] / 1e6:.1f}",
                f"{100 * (1 - dd['bytes'] / raw['bytes']):.0f}% less", "report", None),
            row(NAME, f"{label}: wall s (crawl + extraction), dedup vs Scrapy + trafilatura in a 2-process pool",
                f"{dd['wall_s']:.1f}", f"pool {ex['wall_s']:.1f}; raw HTML only {raw['wall_s']:.1f}",
                f"{ex['wall_s'] / dd['wall_s']:.2f}x faster", "shorter", dd["wall_s"] < ex["wall_s"]),
            row(NAME, f"{label}: distinct documents at the end (X-Doc / text hashes)",
                f"{len(dd['distinct_docs'])} / {dd['distinct_text_hashes']} in {dd['item_count']} items",
                f"plain {len(raw['distinct_docs'])} / {ex['distinct_text_hashes']} in {raw['item_count']} items",
                f"{len(f['lost_documents'])} lost", "none lost", not f["lost_documents"]),
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from run_all import RESULTS, SIZES, write_result

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--part", choices=("all", "cost", "fetches"), default="all")
    parser.add_argument("--pages", type=int, help="pages of each site in the cost crawls (default by size)")
    parser.add_argument("--articles", type=int, help="articles of the duplicate-heavy site (default by size)")
    parser.add_argument("--rounds", type=int, help="cost rounds, medians kept (default by size)")
    parser.add_argument("--sites", help="cost sites to run: comma-separated words of their names (default: all)")
    parser.add_argument("--arms", help=f"cost arms to run, comma-separated (default: all of {', '.join(ARMS)})")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="server delay per response, fetches part (default 0)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--baseline", type=Path, help="directory holding another version's scrapy_dedup package: "
                        "its defaults (and DEDUP_CHUNKS) run as more cost arms, interleaved (e.g. git archive of a commit)")
    args = parser.parse_args(argv)
    args.pages = args.pages or PAGES[args.size]
    args.articles = args.articles or ARTICLES[args.size]
    args.rounds = args.rounds or ROUNDS[args.size]
    workdir = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    result: dict = {}
    try:
        if args.part in ("all", "cost"):
            result["cost"] = cost(args, workdir)
        if args.part in ("all", "fetches"):
            result["fetches"] = fetches(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    notes = [
        "crawls are `scrapy runspider benchmarks/bench_crawl.py` subprocesses against a server on 127.0.0.1 "
        f"(latency 0 ms in the cost crawls); CONCURRENT_REQUESTS = CONCURRENT_REQUESTS_PER_DOMAIN = {CONCURRENCY}; "
        f"{WORKERS} extraction processes on either side; CPU = getrusage(RUSAGE_CHILDREN) of the crawl and its "
        "workers (user + system).",
    ]
    if "cost" in result:
        notes.append(f"cost: {args.pages} pages a site at most, {args.rounds} interleaved rounds, medians; CPU per "
                     "fetched page above a crawl of the start page alone with the same arm; ratios are medians of "
                     "each round's ratios.")
        (args.out / "crawl_cost.md").parent.mkdir(parents=True, exist_ok=True)
        (args.out / "crawl_cost.md").write_text(cost_markdown(result["cost"]), encoding="utf-8")
    if "fetches" in result:
        lay = result["fetches"]["layout"]
        notes.append(f"fetches: per article {lay['urls_per_article']} URLs ({lay['url_variants_per_article']} URL "
                     f"variants, {lay['content_copies_per_article']} content copies), {lay['facet_links_per_listing']} "
                     f"facet/sort links per listing page; {lay['distinct_documents']} distinct documents; dedup with "
                     "DEDUP_HOST_RULES allowing only `page` on the listing.")
    write_result(NAME, {"size": args.size, "results": result, "rows": make_rows(result), "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
