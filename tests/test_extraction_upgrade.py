"""A store crawled with an earlier extraction version, or other ``DEDUP_EXTRACT_*`` settings, gets
the running extraction's text of a page it fetches again, even when the page's bytes did not change.

A byte-identical body skips extraction (the raw index maps its hash to the record that has its
fingerprints). Before the raw index was kept per extraction version, a store crawled before an
extraction fix kept the old text of every unchanged page for good: on the GIMP manual re-crawled
after extraction version 4, all 1,370 pages were skipped and the menu paths version 4 keeps never
reached the store. Crawled through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

import pytest
from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS
from scrapy_dedup.store.base import RAW
from scrapy_dedup.store.leveldb import LevelDBStore

# every page is fetched again at each crawl (a page that links is anyway, as every page of a manual)
SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0, "DEDUP_REVISIT_AFTER": 0}
PAGES = {name: " ".join(f"{name}word{i % 53} topic{i % 11} clause{i % 31}." for i in range(120)) for name in ("a", "b")}


def reply(path: str):
    if path == "/":
        links = "".join(f'<li><a href="/{name}.html">{name}</a></li>' for name in PAGES)
        return 200, {}, f"<html><body><ul>{links}</ul></body></html>".encode()
    name = path.strip("/").removesuffix(".html")
    if name in PAGES:
        return 200, {}, f"<html><head><title>{name}</title></head><body><article><p>{PAGES[name]}</p></article></body></html>".encode()
    return 404, {}, b"not found"


def as_an_earlier_version_left_it(store_path, prefix: str = "") -> int:
    """Key the raw index as an earlier extraction left it: ``prefix`` then the body's hash (the
    hash alone: the version before the index was kept per extraction). Returns how many entries
    there are."""
    with LevelDBStore.open_existing(str(store_path)) as store:
        entries = list(store.scan(RAW))
        with store.batch() as batch:
            for key, value in entries:
                batch.delete(RAW, key)
                batch.put(RAW, prefix + key.split(":", 1)[-1], value)
    return len(entries)


def test_a_page_fetched_again_is_extracted_again_after_an_extraction_change(tmp_path):
    with LocalSite(reply) as site:
        first = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert first.stats["dedup/doc/extracted"] == 3  # the start page and the two pages
        # fetched again with the same bytes and the same extraction: not extracted again
        same = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert same.stats["dedup/doc/extraction_skipped"] == 3
        assert "dedup/doc/extracted" not in same.stats

        assert as_an_earlier_version_left_it(tmp_path / "store") == 3
        upgraded = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert upgraded.stats["dedup/doc/extracted"] == 3
        assert "dedup/doc/extraction_skipped" not in upgraded.stats
        # the same text: the pages are unchanged, and the next crawl skips them again
        assert upgraded.stats["dedup/doc/unchanged"] == 3
        again = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert again.stats["dedup/doc/extraction_skipped"] == 3
    texts = {r["url"].rsplit("/", 1)[-1]: r["text"] for r in exported(tmp_path / "store")}
    assert texts["a.html"] == PAGES["a"] and texts["b.html"] == PAGES["b"]


def test_a_page_fetched_again_is_extracted_again_under_another_trafilatura(tmp_path):
    """Another trafilatura may cut a page otherwise: the text a body's entry points to came from
    the trafilatura the entry names."""
    with LocalSite(reply) as site:
        run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        same_version = f"x{EXTRACT_PARAMS['version']}-0.0.1:"  # this extraction, an older trafilatura
        assert as_an_earlier_version_left_it(tmp_path / "store", same_version) == 3
        upgraded = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert upgraded.stats["dedup/doc/extracted"] == 3
        assert "dedup/doc/extraction_skipped" not in upgraded.stats
        again = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert again.stats["dedup/doc/extraction_skipped"] == 3


def with_a_table(path: str):
    status, headers, body = reply(path)
    table = b"<table><tr><td>tabled cell words stay</td><td>only with tables</td></tr></table>"
    return status, headers, body.replace(b"</p></article>", b"</p>" + table + b"</article>")


def test_a_page_fetched_again_is_extracted_again_after_an_extraction_setting_changed(tmp_path):
    """``DEDUP_EXTRACT_TABLES = False`` leaves a page's tables out: a store crawled with tables
    gets the text without them, not the text its bodies were first extracted to. Before the
    setting was part of the raw index's key, the second crawl skipped all three pages and kept
    the tables' words."""
    without_tables = {**SETTINGS, "DEDUP_EXTRACT_TABLES": False}
    with LocalSite(with_a_table) as site:
        run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert all("tabled cell words" in r["text"] for r in exported(tmp_path / "store") if r["url"].endswith(".html"))
        changed = run_crawl(f"{site.url}/", tmp_path, without_tables)
        assert changed.stats["dedup/doc/extracted"] == 3
        assert "dedup/doc/extraction_skipped" not in changed.stats
        again = run_crawl(f"{site.url}/", tmp_path, without_tables)
        assert again.stats["dedup/doc/extraction_skipped"] == 3
    texts = {r["url"].rsplit("/", 1)[-1]: r["text"] for r in exported(tmp_path / "store")}
    assert texts["a.html"] == PAGES["a"] and texts["b.html"] == PAGES["b"]


@pytest.mark.parametrize("chunks", [False, True], ids=["text", "chunks"])
def test_a_page_whose_text_changed_in_spaces_only_keeps_the_text_a_new_crawl_keeps(tmp_path, chunks):
    """A page extracted again to the same words with other line breaks (its markup changed, or
    the extraction did) is ``unchanged``, and its kept text is the new one: the store's export
    is then the export of a new crawl of the same pages. Before, the old line breaks stayed
    (one GIMP manual document after extraction version 4)."""
    words = [f"word{i} topic{i % 7}." for i in range(300)]  # several chunks: their spans move
    joiner = {"now": " "}

    def lines(path: str):
        if path == "/":
            return 200, {}, b'<html><body><a href="/page.html">page</a></body></html>'
        if path == "/page.html":
            para = joiner["now"].join(words)
            return 200, {}, f'<html><body><article><div class="para">{para}</div></article></body></html>'.encode()
        return 404, {}, b"not found"

    def export(store):
        args = ("--chunks",) if chunks else ()
        return [{k: v for k, v in r.items() if k not in ("first_seen", "last_seen")} for r in exported(store, *args)]

    settings = {**SETTINGS, "DEDUP_CHUNKS": chunks}
    with LocalSite(lines) as site:
        run_crawl(f"{site.url}/", tmp_path / "old", settings)
        joiner["now"] = "  \n"
        again = run_crawl(f"{site.url}/", tmp_path / "old", settings)
        assert again.stats["dedup/doc/unchanged"] == 2
        run_crawl(f"{site.url}/", tmp_path / "new", settings)
    [page] = [r for r in exported(tmp_path / "new" / "store") if r["url"].endswith("/page.html")]
    assert "word0 topic0.  \nword1" in page["text"]
    assert export(tmp_path / "old" / "store") == export(tmp_path / "new" / "store")
