"""``scrapy dedup summary`` of a store a crawl holds: pages answered whose item is not decided yet.

While a crawl runs, a page is ``fetched`` from its answer until the pipeline decides its item. Read
mid-crawl, a Sphinx manual (python-sqlalchemy-doc 1.4.46) showed ``Documents 39`` and ``Not
documents 55  hub 1, fetched 54 (HTTP 404: 1)``: 53 of its documents on their way counted as pages
without one. The line now says so while the store is held. A page whose callback raised stays
``fetched`` for good, which makes the state here without any timing.
"""

from __future__ import annotations

from pathlib import Path

from crawl_helpers import dedup
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.store.leveldb import LevelDBStore

PAGES = {
    "/": b'<html><head><title>Index</title></head><body><a href="/a.html">a</a> <a href="/bug/b.html">b</a>'
    b' <a href="/missing.html">gone</a></body></html>',
    "/a.html": b"<html><head><title>A</title></head><body><main><p>" + b"A page of its own words. " * 40
    + b"</p></main></body></html>",
    "/bug/b.html": b"<html><head><title>B</title></head><body><main><p>" + b"Another page with text. " * 40
    + b"</p></main></body></html>",
}


def _not_documents(summary: str) -> str:
    [line] = [line for line in summary.splitlines() if line.startswith("Not documents")]
    return line


def test_a_held_store_says_its_answered_pages_may_still_become_documents(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent / "spiders"))

    def reply(path: str):
        return (200, {}, PAGES[path]) if path in PAGES else (404, {}, b"not found")

    with LocalSite(reply) as site:
        settings = {"DEDUP_WORKERS": 1, "SPIDER_MODULES": "tutorial_spiders"}
        run_crawl(site.url + "/", tmp_path, settings, spider="tutorial", spider_args={"raise_on": "/bug/"})
    store = tmp_path / "store"

    closed = dedup(store, "summary")
    assert closed.returncode == 0, closed.stderr
    # the crawl is over: the page whose callback raised is a page without a document
    assert _not_documents(closed.stdout).split()[2:] == ["3", "hub", "1,", "fetched", "2", "(HTTP", "404:", "1)"]

    with LevelDBStore.open_existing(str(store)):  # holds LevelDB's lock, as a running crawl does
        held = dedup(store, "summary")
    assert held.returncode == 0 and "a running crawl holds" in held.stderr, held.stderr
    assert "last run running" in held.stdout
    line = _not_documents(held.stdout)
    assert line.endswith(
        "fetched 2 (HTTP 404: 1; 1 answered without a document so far: the crawl runs, their items may come)"
    ), line
