"""What a re-crawl fetches and finds, against a fresh crawl, on a real book whose index pages are items.

The site: the Live Systems Manual as Debian ships it (``live-manual-html``), served by
``tests/local_site.FileSite`` (ETag, Last-Modified, 304s, directory listings). The spider: the
tutorial's ``CrawlSpider`` (``tests/spiders/tutorial_spiders.py``), every page an item.

After a fresh crawl, one section changes, one is added (linked from another section) and one is
deleted; the store (and the HTTP cache) of the fresh crawl is copied, and each copy is crawled
again: with the default settings, and with ``DEDUP_REVISIT_AFTER=0``. All of it twice: the pages
that link asked for in full, and through Scrapy's HTTP cache (RFC2616Policy), which asks
conditionally and gives its copy to the spider on a 304.

Also the bytes each way of keeping a page's links costs: the store, the HTTP cache directory,
and the links a store would record per page (the URLs the spider's rules extract, counted here).

    .venv/bin/python benchmarks/bench_recrawl.py            # writes results/recrawl.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "example_project"))

from _corpus import package_dir  # noqa: E402
from local_site import FileSite  # noqa: E402
from testing import run_crawl  # noqa: E402

PACKAGE = "live-manual-html=2:20151217.2"
BOOK = Path("usr/share/doc/live-manual/html")
CHANGED, ADDED, DELETED, LINKS_TO_ADDED = (
    "live-manual/the-basics.en.html",
    "live-manual/recrawl-added.en.html",
    "live-manual/coding-style.en.html",
    "live-manual/examples.en.html",
)
CACHE = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy"}
CONCURRENCY = {"CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}
ADDED_TEXT = " ".join(f"Added section sentence {i}: persistence{i % 7} overlay{i % 11} squashfs{i % 5}." for i in range(80))
CHANGE_TEXT = " ".join(f"Changed paragraph {i}: netboot{i % 7} preseed{i % 11} chroot{i % 5}." for i in range(40))


def edit(site: Path) -> None:
    """Change one section, add one (linked from another section), delete one."""
    changed = site / CHANGED
    html = changed.read_text("utf-8")
    changed.write_text(html.replace("</p>", f" {CHANGE_TEXT}</p>", 1), "utf-8")
    linking = site / LINKS_TO_ADDED
    html = linking.read_text("utf-8")
    linking.write_text(html.replace("</body>", '<p><a href="recrawl-added.en.html">An added section</a></p></body>', 1), "utf-8")
    (site / ADDED).write_text(
        f"<html><head><title>An added section</title></head><body><h1>An added section</h1><p>{ADDED_TEXT}</p>"
        '<p><a href="toc.en.html">Contents</a></p></body></html>',
        "utf-8",
    )
    (site / DELETED).unlink()


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def recorded_links_bytes(site: FileSite, root: Path) -> dict:
    """The bytes a store would keep to re-issue each page's links on a 304: the URLs that
    ``LinkExtractor()`` of the allowed domain extracts from every HTML page, one list a page."""
    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    extractor = LinkExtractor()
    pages = links = size = 0
    for path in sorted(root.rglob("*.html")):
        url = f"{site.url}/{path.relative_to(root)}"
        response = HtmlResponse(url, body=path.read_bytes(), encoding="utf-8")
        # the allowed domain (LinkExtractor's allow_domains does not match a host with a port)
        found = [link.url for link in extractor.extract_links(response) if link.url.startswith(site.url + "/")]
        pages += 1
        links += len(found)
        size += sum(len(u) + 1 for u in found)
    return {"pages": pages, "links": links, "bytes": size}


def summarize(result, site: FileSite) -> dict:
    stats = result.stats
    statuses: dict[str, int] = {}
    for item in result.items:
        status = item["dedup"]["status"]
        statuses[status] = statuses.get(status, 0) + 1
    by_url = {item["url"].split("/", 3)[-1]: item["dedup"]["status"] for item in result.items}
    answered: dict[str, int] = {}
    for _, status in site.log:
        answered[str(status)] = answered.get(str(status), 0) + 1
    return {
        "requests": len(site.log),
        "answered": answered,
        "bytes_sent": site.bytes_sent,
        "items": len(result.items),
        "item_statuses": statuses,
        # an unchanged page gives no item: the changed section's item (its status says how it
        # now stands among its translations) and the added one's mean that they were seen
        "changed_section": by_url.get(CHANGED, "not seen"),
        "added_section": by_url.get(ADDED, "not seen"),
        "deleted_section": "deleted" if stats.get("dedup/doc/deleted", 0) >= 1 else "not seen",
        "dropped_fresh": stats.get("dedup/url/dropped/fresh", 0),
        "httpcache_revalidate": stats.get("httpcache/revalidate", 0),
        "seconds": round(stats.get("elapsed_time_seconds", 0.0), 1),
    }


def crawl(site: FileSite, out: Path, settings: dict):
    site.log.clear()
    site.bytes_sent = 0
    settings = {"SPIDER_MODULES": "tutorial_spiders", **CONCURRENCY, **settings}
    if settings.get("HTTPCACHE_ENABLED"):
        settings["HTTPCACHE_DIR"] = str(out / "httpcache")
    return run_crawl(site.url + "/", out, settings, spider="tutorial", timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "results" / "recrawl.json"))
    parser.add_argument("--modes", default="fetched-in-full,http-cache", help="comma-separated")
    parser.add_argument("--code", help="a checkout whose scrapy_dedup the crawls import instead (to compare versions)")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [args.code, str(ROOT / "tests" / "spiders")]))
    source = package_dir(PACKAGE) / BOOK
    results: dict = {
        "site": f"{PACKAGE} ({BOOK})",
        "spider": "tutorial CrawlSpider: Rule(LinkExtractor(), callback='parse_item', follow=True), items {url, title, html}",
        "concurrency": CONCURRENCY,
        "code": args.code or str(ROOT),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other work, load {os.getloadavg()[0]:.1f} at start",
        "edit": {"changed": CHANGED, "added": ADDED + " (linked from " + LINKS_TO_ADDED + ")", "deleted": DELETED},
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-recrawl-") as tmp:
        tmp_path = Path(tmp)
        for mode, extra in (("fetched-in-full", {}), ("http-cache", CACHE)):
            if mode not in args.modes.split(","):
                continue
            site_dir = tmp_path / mode / "site"
            shutil.copytree(source, site_dir, symlinks=True)
            with FileSite(site_dir) as site:
                fresh_dir = tmp_path / mode / "fresh"
                fresh = crawl(site, fresh_dir, extra)
                row = {"fresh": summarize(fresh, site)}
                row["store_bytes"] = tree_bytes(fresh_dir / "store")
                row["httpcache_bytes"] = tree_bytes(fresh_dir / "httpcache")
                if mode == "fetched-in-full":
                    results["site_bytes"] = tree_bytes(source)
                    results["recorded_links"] = recorded_links_bytes(site, site_dir)
                copies = {}
                for name in ("default", "revisit_after_0"):
                    copies[name] = tmp_path / mode / name
                    shutil.copytree(fresh_dir, copies[name], ignore=shutil.ignore_patterns("items.jsonl", "crawl.log"))
                edit(site_dir)
                time.sleep(1)  # a Last-Modified of the edit later than the fresh crawl's
                row["default"] = summarize(crawl(site, copies["default"], extra), site)
                row["revisit_after_0"] = summarize(crawl(site, copies["revisit_after_0"], {"DEDUP_REVISIT_AFTER": 0, **extra}), site)
            results["modes"][mode] = row
            print(json.dumps({mode: row}, indent=1), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", "utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
