"""A body the extraction finds no text in is not extracted again when it comes back.

A page without text (a frameset, a page its scripts fill) is no document: it is recorded
``skipped_empty`` and, like a hub, fetched again on every run. javadoc links every page again as
``index.html?<page>``, a frameset of the same bytes each: on the Commons Math 3.6.1 API
(libcommons-math3-java-doc 3.6.1-3), 2,087 of a crawl's 4,179 fetches, each extracted on every
crawl. The raw index now keeps such a body too, under the extraction that found it empty, so a
body met again (under another URL, or on the next run) skips extraction, and another extraction
reads it anew. Crawled through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import exported
from local_site import LocalSite
from test_extraction_upgrade import as_an_earlier_version_left_it
from testing import run_crawl

# every page is fetched again at each crawl (a page that links is anyway, as every page of a manual)
SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0, "DEDUP_REVISIT_AFTER": 0}
FRAMES = ("a", "b", "c")
TEXT = " ".join(f"word{i % 53} topic{i % 11} clause{i % 31}." for i in range(120))
FRAMESET = (
    b"<html><head><title>API</title><script>var target = window.location.search;</script></head>"
    b'<frameset cols="20%,80%"><frame src="list.html"><frame src="page.html"></frameset></html>'
)


def reply(path: str):
    if path == "/":
        links = "".join(f'<li><a href="/index.html?{name}">{name}</a></li>' for name in FRAMES)
        return 200, {}, f'<html><body><ul>{links}<li><a href="/page.html">page</a></li></ul></body></html>'.encode()
    if path.startswith("/index.html"):
        return 200, {}, FRAMESET
    if path == "/page.html":
        return 200, {}, f"<html><head><title>page</title></head><body><article><p>{TEXT}</p></article></body></html>".encode()
    return 404, {}, b"not found"


def test_a_body_without_text_is_extracted_again_under_another_extraction_only(tmp_path):
    pages = len(FRAMES) + 2  # and the start page and the page
    with LocalSite(reply) as site:
        first = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert first.stats["dedup/doc/skipped_empty"] == len(FRAMES)
        # (a frameset met while the first was being decided is extracted too)
        assert first.stats["dedup/doc/extracted"] + first.stats.get("dedup/doc/extraction_skipped", 0) == pages
        again = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert again.stats["dedup/doc/skipped_empty"] == len(FRAMES)
        assert "dedup/doc/extracted" not in again.stats
        assert again.stats["dedup/doc/extraction_skipped"] == pages
        # another extraction may find text in the same bytes: it reads them anew
        as_an_earlier_version_left_it(tmp_path / "store", "x0-0.0.1:")
        upgraded = run_crawl(f"{site.url}/", tmp_path, SETTINGS)
        assert upgraded.stats["dedup/doc/extracted"] >= 3  # the start page, the page, a frameset
        assert upgraded.stats["dedup/doc/skipped_empty"] == len(FRAMES)
        assert "dedup/doc/extracted" not in run_crawl(f"{site.url}/", tmp_path, SETTINGS).stats
    docs = {r["url"].rsplit("/", 1)[-1]: r for r in exported(tmp_path / "store")}
    assert docs["page.html"]["text"] == TEXT and not any("?" in name for name in docs)
