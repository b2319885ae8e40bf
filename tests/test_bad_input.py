"""Bad pages and URLs never stop a crawl: each gets a clear status and a stat."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from crawl_helpers import StoreView
from local_site import LocalSite
from testing import run_crawl

ARTICLE = " ".join(f"word{i % 97} topic{i % 13}." for i in range(400))
OTHER_ARTICLE = " ".join(f"other{i % 89} subject{i % 11}." for i in range(400))


def page(body: str, head: str = "") -> bytes:
    return f"<html><head><title>t</title>{head}</head><body><article>{body}</article></body></html>".encode()


PAGES: dict[str, tuple[int, dict[str, str], bytes]] = {
    "/empty.html": (200, {}, page("")),
    "/whitespace.html": (200, {}, page(" \u00a0 \u200b \n\t ")),
    "/repeated.html": (200, {}, page("<p>" + "buffalo " * 3000 + "</p>")),
    "/binary.html": (200, {}, bytes(random.Random(7).getrandbits(8) for _ in range(20000))),
    "/invalid-utf8.html": (200, {}, page("<p>" + ARTICLE + "</p>").replace(b"word1 ", b"word\xff\xfe1 ")),
    "/huge.html": (200, {}, page("<p>" + OTHER_ARTICLE + "</p>") + b"<p>" + b"filler text " * 5_000_000 + b"</p>"),
    "/loop-a.html": (200, {}, page("<p>loop " + ARTICLE + "</p>", '<link rel="canonical" href="/loop-b.html">')),
    "/loop-b.html": (200, {}, page("<p>loop " + ARTICLE + "</p>", '<link rel="canonical" href="/loop-a.html">')),
    "/links.html": (
        200,
        {"Link": ", ".join(f'</x{i}>; rel="alternate"' for i in range(12)) + ', <javascript:alert(1)>; rel="canonical"'},
        page("<p>links " + ARTICLE[:2000] + "</p>"),
    ),
}
JUNK_LINKS = [
    "mailto:someone@example.com",
    "ftp://ftp.example.invalid/pub/",
    # Scrapy takes it, and no host has "{" (w3lib 2.6 refuses "exa%mple" before we see it)
    "http://exa{mple}.invalid/",
    "http://exa%mple.invalid/",
    "javascript:void(0)",
    "data:text/html,hello",
    "http://[::1",
    "http://user:pass@127.0.0.1:1/",
    "http://127.0.0.1:99999/bad-port",
    "HTTP://EXAMPLE.invalid:80/%7Euser/./a/../b?utm_source=x&b=2&a=1#frag",
    "/q?" + "x=1&" * 2500,
    "/%zz%%41",
    "http://bücher.example/",
]


def reply(raw_path: str) -> tuple[int, dict[str, str], bytes]:
    path = raw_path.split("?")[0]
    if path == "/":
        links = "".join(f'<a href="{href}">x</a>' for href in [*PAGES, *JUNK_LINKS])
        return 200, {}, page(links)
    return PAGES.get(path, (404, {}, page("not found")))


SPIDERS_DIR = Path(__file__).parent / "spiders"


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad-input")
    with LocalSite(reply) as site:
        url = site.url
        # a short canonical wait: the loop must be detected, not waited out
        settings = {
            "DEDUP_CANONICAL_TIMEOUT": 20,
            "DEDUP_WORKERS": 1,
            "SPIDER_MODULES": "junk_spiders",
            # junk links lead to hosts that do not answer: fail fast
            "DOWNLOAD_TIMEOUT": 3,
            "RETRY_ENABLED": False,
        }
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTHONPATH", str(SPIDERS_DIR))
            result = run_crawl(url + "/", out, settings, spider="junk_links")
        yield url, result, StoreView(out / "store")


def test_crawl_finishes_without_errors(crawl):
    _, result, _ = crawl
    assert result.stat("finish_reason") == "finished"
    assert result.stat("log_count/ERROR") == 0
    assert not result.stats_with_prefix("dedup/error/")


@pytest.mark.parametrize("path", ["/empty.html", "/whitespace.html", "/binary.html"])
def test_pages_without_text_are_skipped_with_a_status(crawl, path):
    url, result, store = crawl
    assert store.record(url + path).status == "skipped_empty"
    assert result.stat("dedup/doc/skipped_empty") >= 3
    assert url + path not in {item["url"] for item in result.items}


@pytest.mark.parametrize("path", ["/repeated.html", "/invalid-utf8.html", "/huge.html", "/links.html"])
def test_odd_but_real_pages_are_documents(crawl, path):
    url, result, store = crawl
    record = store.record(url + path)
    assert record.cluster_id is not None
    assert record.status in ("new", "exact_duplicate", "near_duplicate")


def test_huge_page_is_capped(crawl):
    url, result, store = crawl
    item = next(i for i in result.items if i["url"] == url + "/huge.html")
    assert len(item["text"]) < 3 * 1024 * 1024  # DEDUP_MAX_BODY_BYTES cut the 60 MB body first
    # and the crawl says so: the page's text ends where its body was cut
    assert result.stat("dedup/doc/body_cut") == 1
    assert f"{url}/huge.html: its body of {len(PAGES['/huge.html'][2])} bytes" in result.log and "DEDUP_MAX_BODY_BYTES = 2097152" in result.log


def test_canonical_loop_is_detected_not_waited_out(crawl):
    url, result, store = crawl
    a, b = store.record(url + "/loop-a.html"), store.record(url + "/loop-b.html")
    assert a.cluster_id == b.cluster_id
    assert result.stat("dedup/canonical/ignored/loop") >= 1
    assert result.stat("dedup/canonical/timeout") == 0
    assert result.stat("elapsed_time_seconds") < 20


def test_junk_links_never_crash_and_are_counted(crawl):
    _, result, _ = crawl
    assert result.stat("dedup/url/invalid") >= 1
    # mailto:, javascript:, data: and ftp: are no faults: counted, not warned about
    assert result.stat("dedup/url/other_scheme") >= 2
    warned = [line for line in result.log.splitlines() if "URL left as it is" in line]
    assert len(warned) == 1 and "http://exa{mple}.invalid/" in warned[0]
    assert result.stat("dedup/canonical/ignored/scheme") >= 1  # the javascript: canonical in a Link header
