"""A resumed crawl goes on where the interrupted one stopped: it does not fetch again the pages
the run it resumes already fetched.

On a book every page links (navigation to the next and previous pages, the contents). Pages that
link are fetched again on every *new* run, since that is where a re-crawl finds new pages; a run
that resumes an interrupted one is not a new run but the rest of it, so what that run fetched is
seen. The site here is such a book: a contents page and a chain of chapters, each linking to the
next one and back to the contents, crawled by the tutorial's ``CrawlSpider`` one request at a
time and stopped by ``CLOSESPIDER_PAGECOUNT`` part way.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

SPIDERS_DIR = Path(__file__).parent / "spiders"
CHAPTERS = 24


def chapter(i: int) -> bytes:
    links = '<a href="/">Contents</a>' + (f' <a href="/ch{i + 1}.html">Next</a>' if i + 1 < CHAPTERS else "")
    words = " ".join(f"chapter{i} word{i}x{j}" for j in range(40))
    return f"<html><head><title>Chapter {i}</title></head><body><h1>Chapter {i}</h1><p>{words}</p>{links}</body></html>".encode()


class Book:
    """``/`` links to the first chapter; each chapter to the next one and back to ``/``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fetched: Counter[str] = Counter()
        self.served = LocalSite(self.reply)
        self.url = self.served.url

    def reply(self, raw_path: str) -> tuple[int, dict[str, str], bytes]:
        path = raw_path.split("?")[0]
        with self.lock:
            self.fetched[path] += 1
        if path == "/":
            return 200, {}, b'<html><head><title>Contents</title></head><body><a href="/ch0.html">Start</a></body></html>'
        if path.startswith("/ch") and path.endswith(".html") and path[3:-5].isdigit() and int(path[3:-5]) < CHAPTERS:
            return 200, {}, chapter(int(path[3:-5]))
        return 404, {}, b"<html><body>not found</body></html>"

    def taken(self) -> Counter[str]:
        """The chapters fetched since the last call, and how often."""
        with self.lock:
            counts = Counter({p: n for p, n in self.fetched.items() if p.startswith("/ch")})
            self.fetched.clear()
        return counts


@pytest.fixture(autouse=True)
def tutorial_spiders(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SPIDERS_DIR))


def test_a_resumed_run_does_not_fetch_again_what_the_interrupted_run_fetched(tmp_path):
    book = Book()
    try:
        settings = {
            "SPIDER_MODULES": "tutorial_spiders",
            "DEDUP_STORE": str(tmp_path / "store"),
            "DEDUP_WORKERS": 0,
            "DEDUP_LOGSTATS_INTERVAL": 0,
            "CONCURRENT_REQUESTS": 1,
            "LOG_LEVEL": "INFO",
        }
        first = run_crawl(book.url + "/", tmp_path / "run1", {**settings, "CLOSESPIDER_PAGECOUNT": 10},
                          spider="tutorial")
        assert first.stat("finish_reason") == "closespider_pagecount"
        assert "pending (run the crawl again to resume)" in first.log
        before = book.taken()
        assert 5 <= len(before) < CHAPTERS and max(before.values()) == 1, before

        second = run_crawl(book.url + "/", tmp_path / "run2", settings, spider="tutorial")
        assert "pending requests from an interrupted run" in second.log
        assert ": complete" in second.log
        after = book.taken()
        # what the first run left owed is asked again (it may have been answered already when
        # the run stopped); nothing else it fetched is
        again = sorted(set(before) & set(after))
        assert len(again) <= second.stat("dedup/frontier/resumed"), (again, second.stats_with_prefix("dedup/frontier/"))
        assert set(before) | set(after) == {f"/ch{i}.html" for i in range(CHAPTERS)}
        assert second.stat("dedup/doc/unchanged") <= second.stat("dedup/frontier/resumed")
        # and the contents page, an item through the chapters' links back to it (its rule)
        assert len(exported(tmp_path / "store")) == CHAPTERS + 1
    finally:
        book.served.close()
