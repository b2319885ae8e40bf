"""Re-crawls see what changed behind unchanged pages: the tutorial's CrawlSpider on a book served
with conditional GETs (tests/local_site.FileSite), crawled, edited on disk, crawled again.

The book: ``/`` is a directory listing, ``/book/`` its table of contents, ``part1.html`` a part
that lists three sections; ``s1`` and ``s2`` are sections without links, ``s3`` links back up.
Between the crawls ``s1`` changes, ``s2`` is deleted and ``s3`` gains a link to a new ``s4``:
all below ``/book/`` and ``part1.html``, which do not change (and answer 304 when asked so).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from crawl_helpers import StoreView, dedup
from local_site import FileSite
from testing import run_crawl

from scrapy_dedup.core.urls import url_key

SPIDERS_DIR = Path(__file__).parent / "spiders"
YEAR = 365 * 24 * 3600
CACHE = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy"}


def text(name: str, version: int = 1) -> str:
    return " ".join(f"{name}v{version}word{i % 67} {name}topic{i % 13} clause{i % 29}." for i in range(240))


def page(title: str, body: str, links: tuple[str, ...] = ()) -> str:
    nav = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return f"<html><head><title>{title}</title></head><body><ul>{nav}</ul><article><p>{body}</p></article></body></html>"


def write_book(root: Path) -> None:
    book = root / "book"
    book.mkdir(parents=True)
    (book / "index.html").write_text(page("Contents", text("contents"), ("part1.html",)))
    (book / "part1.html").write_text(page("Part 1", text("part"), ("s1.html", "s2.html", "s3.html", "./")))
    (book / "s1.html").write_text(page("Section 1", text("one")))
    (book / "s2.html").write_text(page("Section 2", text("two")))
    (book / "s3.html").write_text(page("Section 3", text("three"), ("part1.html",)))
    # published a year ago: an HTTP cache's heuristic would call the copies fresh for a month
    old = time.time() - YEAR
    for path in (root, book, *book.iterdir()):
        os.utime(path, (old, old))


def edit_book(root: Path) -> None:
    book = root / "book"
    (book / "s1.html").write_text(page("Section 1", text("one", version=2)))
    (book / "s2.html").unlink()
    (book / "s3.html").write_text(page("Section 3", text("three"), ("part1.html", "s4.html")))
    (book / "s4.html").write_text(page("Section 4", text("four")))


def crawl(site: FileSite, out: Path, settings: dict):
    settings = {"SPIDER_MODULES": "tutorial_spiders", "DEDUP_WORKERS": 1, **settings}
    if settings.get("HTTPCACHE_ENABLED"):
        settings["HTTPCACHE_DIR"] = str(out / "httpcache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(SPIDERS_DIR))
        return run_crawl(site.url + "/", out, settings, spider="tutorial")


def statuses(result) -> dict[str, str]:
    return {item["url"].rsplit("/", 1)[-1]: item["dedup"]["status"] for item in result.items}


def recrawled(tmp_path: Path, settings: dict):
    """The book crawled, edited and crawled again: (site URL, first crawl, the re-crawl, the
    paths the re-crawl requested with their answers)."""
    write_book(tmp_path / "site")
    with FileSite(tmp_path / "site") as site:
        first = crawl(site, tmp_path, settings)
        edit_book(tmp_path / "site")
        site.log.clear()
        second = crawl(site, tmp_path, settings)
        return site.url, first, second, dict(site.log)


def test_a_default_recrawl_finds_the_pages_added_below_the_pages_that_link(tmp_path):
    url, first, second, answered = recrawled(tmp_path, {})
    assert statuses(first) == dict.fromkeys(["", "part1.html", "s1.html", "s2.html", "s3.html"], "new")
    # every page that links is fetched again in full; a section without links is not due
    assert answered == {"/": 200, "/book/": 200, "/book/part1.html": 200, "/book/s3.html": 200, "/book/s4.html": 200}
    assert statuses(second) == {"s4.html": "new"}  # s3 gained a link, its text is as it was
    assert second.stat("dedup/url/dropped/fresh") == 2  # s1 and s2


@pytest.mark.parametrize("settings", [{}, CACHE], ids=["fetched-in-full", "http-cache"])
def test_a_recrawl_with_revisit_after_0_finds_changed_added_and_deleted_pages(tmp_path, settings):
    url, first, second, answered = recrawled(tmp_path, {"DEDUP_REVISIT_AFTER": 0, **settings})
    assert statuses(second) == {"s1.html": "updated", "s4.html": "new"}
    assert second.stat("dedup/doc/deleted") == 1
    assert answered["/book/s2.html"] == 404
    store = StoreView(tmp_path / "store")
    assert store.record(url + "/book/s2.html").status == "deleted"
    assert store.record(url + "/book/s2.html").cluster_id is None
    # the pages above the changes did not change: with the HTTP cache they answer 304, and the
    # cache's copy leads on to their links; without it they are asked for in full
    unchanged = 304 if settings else 200
    assert answered["/book/"] == answered["/book/part1.html"] == unchanged
    if settings:
        assert second.stat("httpcache/revalidate") >= 2


@pytest.fixture(scope="module")
def deleted(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("deleted")
    url, *_ = recrawled(tmp_path, {"DEDUP_REVISIT_AFTER": 0})
    return url + "/book/s2.html", tmp_path / "store"


def test_lookup_reads_a_deleted_page_as_deleted(deleted):
    gone, store = deleted
    answer = json.loads(dedup(store, "lookup", gone, "--format", "jsonl").stdout)
    assert answer["status"] == "deleted" and answer["http_status"] == 404
    assert answer["canonical_url"] is None
    assert answer["same_document"] == []
    shown = dedup(store, "lookup", gone).stdout
    assert "canonical_url  - (deleted: gone at its last fetch" in shown
    assert "status         deleted, HTTP 404" in shown
    assert "hub" not in shown and "canonical URL of its document" not in shown
    assert "Every URL of this document" not in shown


def test_provenance_summary_export_and_report_read_a_deleted_page_as_deleted(deleted, tmp_path):
    gone, store = deleted
    rows = [json.loads(line) for line in dedup(store, "provenance", "--format", "jsonl").stdout.splitlines()]
    row = next(r for r in rows if r["url"] == gone)
    assert (row["status"], row["canonical_url"], row["http_status"]) == ("deleted", None, 404)
    changed = next(r for r in rows if r["url"] == gone.replace("s2.html", "s1.html"))
    assert changed["status"] == "updated"
    summary = dedup(store, "summary").stdout
    assert re.search(r"Not documents\s+2\s+hub 1, deleted 1", summary)
    assert re.search(r"Documents\s+5\s", summary)
    exported = [json.loads(line) for line in dedup(store, "export").stdout.splitlines()]
    assert len(exported) == 5 and gone not in {record["url"] for record in exported}
    report = tmp_path / "report.html"
    dedup(store, "report", "--html", str(report))
    assert '<tr><td>deleted</td><td class="n">1</td></tr>' in report.read_text()


@pytest.mark.parametrize(
    "settings, expected",
    [({}, {"s4.html": "new"}), ({"DEDUP_REVISIT_AFTER": 0}, {"s1.html": "updated", "s4.html": "new"})],
    ids=["default", "revisit-after-0"],
)
def test_a_recrawl_on_a_redis_store_sees_the_same_changes(tmp_path, redis_single, redis_prefix, settings, expected):
    store = {"DEDUP_STORE": redis_single.url, "DEDUP_REDIS_PREFIX": redis_prefix}
    url, first, second, answered = recrawled(tmp_path, {**store, **settings})
    assert len(first.items) == 5
    assert statuses(second) == expected
    assert second.stat("dedup/doc/deleted") == (1 if settings else 0)
    assert answered["/book/part1.html"] == 200  # the unchanged page that links, asked for in full


def mark_links_calls(store: Path) -> list[tuple[list[str], int]]:
    """Per crawl run of a CountingLevelDBStore: the URL keys whose record ``mark_links`` read,
    and how many batches it wrote."""
    runs = [json.loads(line) for line in Path(f"{store}.calls.jsonl").read_text().splitlines()]
    return [(sorted(run["get_url"].get("mark_links", [])), run["batch"].get("mark_links", 0)) for run in runs]


def test_the_links_flag_costs_no_store_read_or_write_on_a_page_that_did_not_change_it(tmp_path):
    settings = {"DEDUP_STORE_BACKEND": "counting_store.CountingLevelDBStore", "DEDUP_REVISIT_AFTER": 0}
    write_book(tmp_path / "site")
    with FileSite(tmp_path / "site") as site:
        book = site.url + "/book/"
        crawl(site, tmp_path, settings)
        site.log.clear()
        crawl(site, tmp_path, settings)  # nothing changed
        unchanged = dict(site.log)
        # s1 gains a link, s3 loses its own
        (tmp_path / "site/book/s1.html").write_text(page("Section 1", text("one"), ("s2.html",)))
        (tmp_path / "site/book/s3.html").write_text(page("Section 3", text("three")))
        crawl(site, tmp_path, settings)
    first, second, third = mark_links_calls(tmp_path / "store")
    # the pages that link, new in the first run, are recorded so: one read and one write each
    assert first == ([url_key(book), url_key(book + "part1.html"), url_key(book + "s3.html")], 3)
    # fetched again in full, the pages that link still link: their flag is neither read nor written
    assert unchanged["/book/part1.html"] == unchanged["/book/s3.html"] == 200
    assert second == ([], 0)
    # what changed is written
    assert third == ([url_key(book + "s1.html"), url_key(book + "s3.html")], 2)
    store = StoreView(tmp_path / "store")
    assert store.record(book + "s1.html").links and not store.record(book + "s3.html").links
    assert store.record(book + "part1.html").links


def test_a_page_whose_only_links_are_its_own_anchors_is_not_a_page_that_links(tmp_path):
    write_book(tmp_path / "site")
    # a table of contents of the page itself, as LinkExtractor yields it: http://h/book/s1.html#top
    toc = page("Section 1", text("one"), ("#top", "#part-2", "s1.html#part-3", "./s1.html"))
    (tmp_path / "site/book/s1.html").write_text(toc)
    with FileSite(tmp_path / "site") as site:
        first = crawl(site, tmp_path, {})
        site.log.clear()
        crawl(site, tmp_path, {})
        answered = dict(site.log)
    store = StoreView(tmp_path / "store")
    assert not store.record(site.url + "/book/s1.html").links
    assert store.record(site.url + "/book/s3.html").links  # its link leads up to part1.html
    assert statuses(first)["s1.html"] == "new"
    # not due, and no links to follow: s1 is not fetched again; s3, which links, is
    assert "/book/s1.html" not in answered and answered["/book/s3.html"] == 200



class MovingSite(FileSite):
    """A :class:`FileSite` that answers a 301 to ``moved[path]`` for each path of ``moved``."""

    def __init__(self, root: Path) -> None:
        self.moved: dict[str, str] = {}
        super().__init__(root)

    def _answer(self, path: str, request_headers):
        if path in self.moved:
            return 301, {"Location": self.moved[path]}, b""
        return super()._answer(path, request_headers)


def test_a_gone_page_is_asked_again_and_comes_back_a_redirect_is_not_asked_again(tmp_path):
    write_book(tmp_path / "site")
    book = tmp_path / "site/book"
    (book / "part1.html").write_text(page("Part 1", text("part"), ("s1.html", "s2.html", "s3.html", "s5.html", "./")))
    (book / "s5.html").write_text(page("Section 5", text("five"), ("part1.html",)))
    with MovingSite(tmp_path / "site") as site:
        crawl(site, tmp_path, {})
        # s3 and s5 linked at their last fetch: s3 is deleted, s5 moves to s6.html (a 301)
        removed = (book / "s3.html").read_text()
        (book / "s3.html").unlink()
        (book / "s5.html").rename(book / "s6.html")
        site.moved["/book/s5.html"] = "/book/s6.html"
        site.log.clear()
        second = crawl(site, tmp_path, {})
        assert dict(site.log)["/book/s3.html"] == 404 and dict(site.log)["/book/s5.html"] == 301
        assert second.stat("dedup/doc/deleted") == 1 and second.stat("dedup/doc/redirected") == 1
        site.log.clear()
        third = crawl(site, tmp_path, {})  # nothing changed
        answered = dict(site.log)
        # a page gone may come back: asked again; a redirect is an alias of its target
        assert answered["/book/s3.html"] == 404 and "/book/s5.html" not in answered
        assert third.stat("dedup/url/dropped/alias") == 1
        assert third.stat("dedup/url/dropped/fresh") == 2  # s1 and s2
        store = StoreView(tmp_path / "store")
        assert not store.record(site.url + "/book/s3.html").links
        assert not store.record(site.url + "/book/s5.html").links
        (book / "s3.html").write_text(removed)  # the page is back
        site.log.clear()
        fourth = crawl(site, tmp_path, {})
        assert dict(site.log)["/book/s3.html"] == 200
        assert fourth.stat("dedup/doc/new") == 1
    assert StoreView(tmp_path / "store").record(site.url + "/book/s3.html").status == "new"
