"""Crawl benchmarks: scrapy-dedup's overhead, and the fetches it avoids.

    .venv/bin/python benchmarks/bench_crawl.py [--size tiny|default|large] [--part overhead|fetches|all]

Every crawl is a real ``scrapy runspider`` of this file (it also holds the spider, an
extraction pipeline and a stats extension) in a subprocess, against a server on 127.0.0.1
(port 0) run by this script. CPU seconds are ``getrusage(RUSAGE_CHILDREN)`` deltas around each
crawl: they include the extraction worker processes, which the crawl joins before it exits.
Configurations:

- ``raw``: plain Scrapy (``ADDONS = {}``) saving each page's raw HTML to a JSON Lines feed;
- ``extract``: plain Scrapy + an item pipeline calling ``trafilatura.extract`` with the options
  scrapy-dedup uses on these pages (``fast=True``, tables, no comments), in the crawl process: what a RAG
  user writes without deduplication;
- ``dedup``: ``ADDONS = {"scrapy_dedup.Addon": 500}``, ``DEDUP_WORKERS = 0`` (extraction in a
  thread of the crawl process, like ``extract``) and ``dedup_workers``: ``DEDUP_WORKERS = 2``
  (extraction in 2 worker processes). ``DEDUP_STORE`` is a fresh temporary directory.
- ``dedup_chunks``: ``dedup_workers`` with ``DEDUP_CHUNKS = True`` (chunking in the workers, chunk
  statuses in the store, settled when the spider closes: included in the crawl's elapsed time).

1. Overhead (``--pages``, default 400): the PostgreSQL 15 documentation (Debian's
   postgresql-doc-15, see _corpus.py), the pages first reached breadth-first from index.html;
   the spider follows links within that set. Pages per second over the crawl's own elapsed
   time (start-up excluded); CPU seconds per page above an empty crawl of the same
   configuration (start-up excluded). Best of ``--rounds`` rounds, configurations interleaved.

2. Fetches avoided (``--articles``, default 200): a generated site with the demo site's
   duplicate patterns at scale. Per article: the article, 3 links with tracking parameters,
   2 with session ids (query and ;jsessionid), a printer version, a byte-identical mirror and a
   syndicated copy with rel=canonical; listing pages of 20 articles, each linked with 3 colour
   facets x 2 sort orders and 2 sort-only variants (``DEDUP_HOST_RULES`` allows ``page``).
   Each response names its document in an ``X-Doc`` header (server-side ground truth):
   the distinct documents a crawl ends with are the distinct X-Doc values of its items, and
   also the distinct extracted-text hashes. Fetches and bytes are counted by the server.

Writes results/crawl.json.
"""

from __future__ import annotations

import argparse
import html
import json
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import scrapy
from scrapy import signals

HERE = Path(__file__).resolve().parent

NAME = "crawl"
PAGES = {"tiny": 15, "default": 400, "large": 1169}
ARTICLES = {"tiny": 12, "default": 200, "large": 1000}
ROUNDS = {"tiny": 1, "default": 2, "large": 3}
PER_LISTING = 20
TRACKING = ("utm_source=newsletter&utm_medium=email", "utm_source=social&utm_campaign=launch", "gclid=EAIaIQob{i}")
SESSIONS = ("?jsessionid=0A1B{i}C3D", ";jsessionid=ABC{i}")
COLOURS, SORTS = ("red", "blue", "green"), ("price", "newest")
TARGET_OVERHEAD = 0.9  # dedup pages/s >= 0.9 x extraction-only
TARGET_FETCHES = 0.5  # at least 50 % fewer fetches

#: options of the extraction pipeline: those of scrapy_dedup.extraction.main_text.extract_text on
#: pages without paragraphs written as <div> (no PostgreSQL page has them), which take the fast mode
TRAFILATURA_OPTIONS = dict(fast=True, include_tables=True, include_comments=False, deduplicate=False,
                           output_format="txt", with_metadata=False, include_images=False, include_links=False,
                           include_formatting=False)


# == what runs inside `scrapy runspider` ========================================================


class BenchSpider(scrapy.Spider):
    """Follows in-scope links (same host and port; within ``allow`` when given) and yields
    one item per response: ``url``, the server's ``doc`` id, and the raw ``html`` unless the
    scrapy-dedup pipeline is to read the response itself."""

    name = "bench"

    def __init__(self, start_url: str = "", mode: str = "raw", allow: str = "", **kwargs):
        super().__init__(**kwargs)
        self.start_url, self.mode = start_url, mode
        self.origin = urlsplit(start_url).netloc
        self.allow = set(Path(allow).read_text(encoding="utf-8").split()) if allow else None

    async def start(self):
        if self.mode != "empty":
            yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response):
        item = {"url": response.url}
        doc = response.headers.get(b"X-Doc")
        if doc:
            item["doc"] = doc.decode("ascii")
        if self.mode != "dedup" and hasattr(response, "text"):
            item["html"] = response.text
        yield item
        if not hasattr(response, "text"):
            return
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href.strip())
            parts = urlsplit(url)
            if parts.netloc != self.origin:
                continue
            if self.allow is not None and parts.path.lstrip("/") not in self.allow:
                continue
            yield scrapy.Request(url, callback=self.parse)


class ExtractPipeline:
    """The no-dedup alternative: trafilatura on every page, in the crawl process."""

    def process_item(self, item, spider=None):
        import trafilatura

        markup = item.pop("html", "")
        item["text"] = (trafilatura.extract(markup, url=item["url"], **TRAFILATURA_OPTIONS) or "") if markup else ""
        return item


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
        import resource

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


def crawl(mode: str, start_url: str, workdir: Path, *, workers: int = 0, allow: Path | None = None,
          host_rules: dict | None = None, baseline: Path | None = None) -> dict:
    """One ``scrapy runspider`` of this file; returns stats, items, wall and CPU seconds.

    ``baseline``: a directory holding another version's ``scrapy_dedup`` package, imported
    instead of this checkout's."""
    run = Path(tempfile.mkdtemp(prefix=f"{mode.replace(':', '-')}-", dir=workdir))
    items, stats_file = run / "items.jsonl", run / "stats.json"
    spider_mode = {"dedup_workers": "dedup", "dedup_baseline": "dedup", "dedup_chunks": "dedup"}.get(mode, mode)
    settings = {
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": "False",
        "ROBOTSTXT_OBEY": "False",
        "EXTENSIONS": json.dumps({"bench_crawl.StatsDump": 0}),
        "BENCH_STATS": str(stats_file),
        "ADDONS": "{}",
    }
    if mode == "extract":
        settings["ITEM_PIPELINES"] = json.dumps({"bench_crawl.ExtractPipeline": 300})
    if spider_mode == "dedup":
        settings.update({
            "ADDONS": json.dumps({"scrapy_dedup.Addon": 500}),
            "DEDUP_STORE": str(run / "store"),
            "DEDUP_WORKERS": str(workers),
            "DEDUP_LOGSTATS_INTERVAL": "0",
        })
        if host_rules:
            settings["DEDUP_HOST_RULES"] = json.dumps(host_rules)
        if mode.startswith("dedup_chunks"):
            settings["DEDUP_CHUNKS"] = "True"
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "bench_crawl.py"), "-O", str(items),
           "-a", f"start_url={start_url}", "-a", f"mode={'empty' if mode.endswith(':empty') else spider_mode}"]
    if allow is not None:
        cmd += ["-a", f"allow={allow}"]
    for k, v in settings.items():
        cmd += ["-s", f"{k}={v}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = None
    if baseline is not None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(baseline), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, cwd=run, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or not stats_file.exists():
        raise RuntimeError(f"crawl {mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    stats = json.loads(stats_file.read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in items.read_text(encoding="utf-8").splitlines() if line.strip()] if items.exists() else []
    errors = [line for line in proc.stderr.splitlines() if " ERROR" in line or "Traceback" in line]
    shutil.rmtree(run, ignore_errors=True)
    return {
        "mode": mode,
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "elapsed_s": float(stats.get("elapsed_time_seconds", 0.0)),
        "cpu_crawl_process_s": float(stats.get("bench/cpu_self_s", 0.0)),
        "responses": int(stats.get("downloader/response_count", 0)),
        "response_bytes": int(stats.get("downloader/response_bytes", 0)),
        "items": rows,
        "errors": errors[:5],
        "stats": {k: v for k, v in stats.items() if k.startswith(("dedup/", "item_", "dupefilter/", "downloader/response_status"))},
    }


# == 1. overhead on the PostgreSQL docs ==========================================================

_HREF = re.compile(rb'href="([^"#?:]+\.html)')


def postgres_site(pages: int, root: Path | None = None) -> tuple[Site, list[str]]:
    """The first ``pages`` pages reached from ``root``/index.html (default: the docs root)."""
    import _corpus

    root = root or _corpus.docs_root()
    files = {p: (root / p).read_bytes() for p in _corpus.html_pages(root)}
    # breadth-first from index.html: the first `pages` pages a crawl reaches
    order, seen = ["index.html"], {"index.html"}
    for page in order:
        if len(order) >= pages:
            break
        for href in _HREF.findall(files[page]):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(page), href.decode()))
            if target in files and target not in seen:
                seen.add(target)
                order.append(target)
    chosen = order[:pages]
    headers = {"Content-Type": "text/html; charset=utf-8"}
    return Site({"/" + p: (files[p], headers) for p in chosen}), chosen


def best(runs: list[dict], key: str, lowest: bool = True) -> float:
    values = [r[key] for r in runs]
    return min(values) if lowest else max(values)


def overhead(args, workdir: Path) -> dict:
    from run_all import log

    site, chosen = postgres_site(args.pages)
    allow = workdir / "allow.txt"
    allow.write_text("\n".join(chosen), encoding="utf-8")
    server, origin = site.serve()
    start = origin + "/index.html"
    modes = [("raw", 0), ("extract", 0), ("dedup", 0), ("dedup_workers", 2), ("dedup_chunks", 2)]
    if args.baseline is not None:
        modes.append(("dedup_baseline", 2))  # another version, DEDUP_WORKERS=2, interleaved
    if args.modes:
        modes = [(m, w) for m, w in modes if m in args.modes.split(",")]
    runs: dict[str, list[dict]] = {m: [] for m, _ in modes}
    empty: dict[str, list[dict]] = {m: [] for m, _ in modes}
    try:
        for rnd in range(args.rounds):
            for mode, workers in modes:
                if args.empty:
                    e = crawl(mode + ":empty", start, workdir, workers=workers, allow=allow,
                              baseline=args.baseline if mode == "dedup_baseline" else None)
                    e.pop("items")
                else:  # tiny runs: start-up CPU stays in the per-page figure
                    e = {"cpu_s": 0.0, "wall_s": 0.0, "cpu_crawl_process_s": 0.0}
                empty[mode].append(e)
                r = crawl(mode, start, workdir, workers=workers, allow=allow,
                          baseline=args.baseline if mode == "dedup_baseline" else None)
                r["cpu_above_empty_s"] = r["cpu_s"] - e["cpu_s"]
                r["pages_per_s"] = r["responses"] / r["elapsed_s"] if r["elapsed_s"] else 0.0
                r["cpu_per_page_s"] = r["cpu_above_empty_s"] / max(r["responses"], 1)
                r["crawl_process_cpu_per_page_s"] = (r["cpu_crawl_process_s"] - e["cpu_crawl_process_s"]) / max(r["responses"], 1)
                r["item_count"] = len(r.pop("items"))
                runs[mode].append(r)
                log(NAME, f"overhead round {rnd + 1} {mode}: {r['responses']} pages, {r['pages_per_s']:.1f} pages/s, "
                          f"{1000 * r['cpu_per_page_s']:.1f} ms CPU/page, {r['item_count']} items"
                          + (f", errors: {r['errors']}" if r["errors"] else ""))
    finally:
        server.shutdown()
    summary = {
        mode: {
            "pages": runs[mode][0]["responses"],
            "pages_per_s": best(runs[mode], "pages_per_s", lowest=False),
            "cpu_per_page_ms": 1000 * best(runs[mode], "cpu_per_page_s"),
            "crawl_process_cpu_per_page_ms": 1000 * best(runs[mode], "crawl_process_cpu_per_page_s"),
            "items": runs[mode][0]["item_count"],
        }
        for mode, _ in modes
    }
    out = {"pages": len(chosen), "rounds": args.rounds, "summary": summary, "runs": runs, "empty": empty}
    if args.baseline is not None:
        out["baseline_name"] = args.baseline_name or str(args.baseline)
    if "dedup_workers" in runs and "dedup_baseline" in runs:
        # The two versions run back to back in every round, so a round's ratio compares them under
        # the same load; on a shared machine the median of those ratios is steadier than best-of.
        ratios = sorted(a["pages_per_s"] / b["pages_per_s"] for a, b in zip(runs["dedup_workers"], runs["dedup_baseline"]))
        out["round_ratios"] = ratios
        out["median_round_ratio"] = statistics.median(ratios)
    return out


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
        for mode, workers in (("raw", 0), ("extract", 0), ("dedup_workers", 2)):
            site.reset()
            r = crawl(mode, origin + "/", workdir, workers=workers, host_rules=rules)
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
    lost = sorted(plain_docs - set(out["dedup_workers"]["distinct_docs"]))
    return {"layout": info["layout"], "latency_ms": args.latency_ms, "runs": out, "lost_documents": lost}


# == the report ==================================================================================


def make_rows(result: dict) -> list[dict]:
    from run_all import fmt, row

    rows = []
    if "overhead" in result and {"raw", "extract", "dedup", "dedup_workers"} <= set(result["overhead"]["summary"]):
        s = result["overhead"]["summary"]
        n = result["overhead"]["pages"]
        ex, d0, d2, raw = s["extract"], s["dedup"], s["dedup_workers"], s["raw"]
        r0, r2 = d0["pages_per_s"] / ex["pages_per_s"], d2["pages_per_s"] / ex["pages_per_s"]
        rows += [
            row(NAME, f"{n} PostgreSQL doc pages: pages/s, dedup (extraction in-process) vs extraction-only",
                fmt(d0["pages_per_s"]), f"extract {fmt(ex['pages_per_s'])}; raw HTML {fmt(raw['pages_per_s'])}",
                f"{r0:.2f}x", f">= {TARGET_OVERHEAD}x", r0 >= TARGET_OVERHEAD),
            row(NAME, f"{n} PostgreSQL doc pages: pages/s, dedup (DEDUP_WORKERS=2) vs extraction-only",
                fmt(d2["pages_per_s"]), f"extract {fmt(ex['pages_per_s'])}", f"{r2:.2f}x", "> 1x", r2 > 1.0),
            row(NAME, f"{n} PostgreSQL doc pages: CPU ms per page, all processes (in-process / 2 workers)",
                f"{d0['cpu_per_page_ms']:.1f} / {d2['cpu_per_page_ms']:.1f}",
                f"extract {ex['cpu_per_page_ms']:.1f}; raw HTML {raw['cpu_per_page_ms']:.1f}",
                f"{d0['cpu_per_page_ms'] / ex['cpu_per_page_ms']:.2f}x", "report", None),
            row(NAME, f"{n} PostgreSQL doc pages: CPU ms per page of the crawl process alone, 2 workers",
                f"{d2['crawl_process_cpu_per_page_ms']:.1f}",
                f"raw HTML {raw['crawl_process_cpu_per_page_ms']:.1f} (no extraction)", "", "report", None),
        ]
    if "overhead" in result and {"dedup_workers", "dedup_chunks"} <= set(result["overhead"]["summary"]):
        s = result["overhead"]["summary"]
        d2, dc = s["dedup_workers"], s["dedup_chunks"]
        rows.append(row(NAME, f"{result['overhead']['pages']} PostgreSQL doc pages: pages/s, DEDUP_WORKERS=2, "
                              "DEDUP_CHUNKS on vs off (settling at the spider's close included)",
                        fmt(dc["pages_per_s"]), f"off {fmt(d2['pages_per_s'])}",
                        f"{dc['pages_per_s'] / d2['pages_per_s']:.2f}x", "report", None))
    if "overhead" in result and "dedup_baseline" in result["overhead"]["summary"]:
        s = result["overhead"]["summary"]
        d2, base = s["dedup_workers"], s["dedup_baseline"]
        best_ratio = d2["pages_per_s"] / base["pages_per_s"]
        ratio = result["overhead"]["median_round_ratio"]
        rows.append(row(NAME, f"{result['overhead']['pages']} PostgreSQL doc pages: pages/s, DEDUP_WORKERS=2, "
                              f"this version vs {result['overhead'].get('baseline_name', 'baseline')}, "
                              "median of the rounds' ratios (best of rounds: "
                              f"{fmt(d2['pages_per_s'])} vs {fmt(base['pages_per_s'])}, {best_ratio:.2f}x)",
                        f"median {fmt(statistics.median(r['pages_per_s'] for r in result['overhead']['runs']['dedup_workers']))}",
                        f"baseline median {fmt(statistics.median(r['pages_per_s'] for r in result['overhead']['runs']['dedup_baseline']))}"
                        f"; rounds' ratios {', '.join(f'{r:.2f}' for r in result['overhead']['round_ratios'])}",
                        f"{ratio:.2f}x", ">= 0.95x", ratio >= 0.95))
    if "fetches" in result:
        f = result["fetches"]
        raw, ex, dd = f["runs"]["raw"], f["runs"]["extract"], f["runs"]["dedup_workers"]
        fewer = 1 - dd["fetches"] / raw["fetches"]
        lay = f["layout"]
        label = f"duplicate-heavy site ({lay['articles']} articles)"
        rows += [
            row(NAME, f"{label}: fetches", fmt(dd["fetches"]), f"plain Scrapy {fmt(raw['fetches'])}",
                f"{100 * fewer:.0f}% fewer", ">= 50% fewer", fewer >= TARGET_FETCHES),
            row(NAME, f"{label}: MB downloaded", f"{dd['bytes'] / 1e6:.1f}", f"plain Scrapy {raw['bytes'] / 1e6:.1f}",
                f"{100 * (1 - dd['bytes'] / raw['bytes']):.0f}% less", "report", None),
            row(NAME, f"{label}: wall s (crawl + extraction), dedup vs Scrapy + trafilatura pipeline",
                f"{dd['wall_s']:.1f}", f"extract {ex['wall_s']:.1f}; raw HTML only {raw['wall_s']:.1f}",
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
    parser.add_argument("--part", choices=("all", "overhead", "fetches"), default="all")
    parser.add_argument("--pages", type=int, help="PostgreSQL doc pages in the overhead crawl (default by size)")
    parser.add_argument("--articles", type=int, help="articles of the duplicate-heavy site (default by size)")
    parser.add_argument("--rounds", type=int, help="overhead rounds, best kept (default by size)")
    parser.add_argument("--empty", action=argparse.BooleanOptionalAction, default=None,
                        help="measure an empty crawl per configuration to subtract start-up CPU (default: not at tiny)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="server delay per response (default 0)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--baseline", type=Path, help="directory holding another version's scrapy_dedup package: "
                        "its DEDUP_WORKERS=2 crawl runs interleaved with this one's (e.g. git archive of a commit)")
    parser.add_argument("--modes", help="overhead configurations to run, comma-separated (default: all)")
    parser.add_argument("--baseline-name", help="how the results name the baseline (default: its path)")
    args = parser.parse_args(argv)
    args.pages = args.pages or PAGES[args.size]
    args.articles = args.articles or ARTICLES[args.size]
    args.rounds = args.rounds or ROUNDS[args.size]
    if args.empty is None:
        args.empty = args.size != "tiny"
    workdir = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    result: dict = {}
    try:
        if args.part in ("all", "overhead"):
            result["overhead"] = overhead(args, workdir)
        if args.part in ("all", "fetches"):
            result["fetches"] = fetches(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    notes = [
        "crawls are `scrapy runspider benchmarks/bench_crawl.py` subprocesses against a server on 127.0.0.1 "
        f"(latency {args.latency_ms:g} ms); Scrapy's default concurrency; CPU = getrusage(RUSAGE_CHILDREN), "
        "extraction workers included.",
    ]
    if "overhead" in result:
        notes.append(f"overhead: best of {args.rounds} rounds; pages/s over the crawl's elapsed time, CPU per page "
                     "above an empty crawl of the same configuration.")
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
