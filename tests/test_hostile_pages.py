"""Hostile text renders inert, and odd item fields never stop a crawl.

A real crawl of a small site whose URLs, titles and text carry ``<script>``, ``" onload=`` and
terminal escape sequences, plus a page whose spider yields items with a non-string URL, bytes or
None text and 100 MB values.  Then every ``scrapy dedup`` subcommand reads the store: the tables
carry no control character and the HTML report escapes the markup.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from crawl_helpers import dedup
from local_site import LocalSite
from testing import run_crawl

SPIDERS_DIR = Path(__file__).parent / "spiders"
ESC = "\x1b"
HOSTILE = '<script>alert("x")</script>" onload="alert(1)" \x1b[2J\x1b[31mRED\x1b[0m \x1b]0;owned\x07 \u202eevil'
ARTICLE = " ".join(f"word{i % 97} topic{i % 13}." for i in range(300))


def _escape_markup(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _page(title: str, paragraphs: list[str]) -> bytes:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<html><head><title>{title}</title></head><body><article><h1>{title}</h1>{body}</article></body></html>"
    ).encode()


HOSTILE_TITLE = _escape_markup(HOSTILE)
PAGES = {
    # the same hostile text three times: an exact and a near duplicate, so clusters and diffs show it
    "/hostile-a.html": _page(HOSTILE_TITLE, [ARTICLE, _escape_markup(HOSTILE) + " first copy", ARTICLE[:900]]),
    "/hostile-b.html": _page(HOSTILE_TITLE, [ARTICLE, _escape_markup(HOSTILE) + " second copy, edited", ARTICLE[:900]]),
    "/hostile-c.html": _page(HOSTILE_TITLE, [ARTICLE, _escape_markup(HOSTILE) + " first copy", ARTICLE[:900]]),
    # raw markup characters and an ESC in the path: Scrapy and normalize_url percent-encode them
    '/<script>alert(4)</script>"onload=alert(5)\x1b[31m.html': _page("raw", [ARTICLE[:1500] + " raw path"]),
    "/odd-items.html": _page("odd items", ["odd items " + ARTICLE[:1200]]),
}
LINKS = [
    "/hostile-a.html",
    "/hostile-b.html",
    "/hostile-c.html",
    "/%3Cscript%3Ealert(4)%3C/script%3E%22onload=alert(5)%1B[31m.html",
    "/odd-items.html",
]


def reply(raw_path: str) -> tuple[int, dict[str, str], bytes]:
    from urllib.parse import unquote

    path = unquote(raw_path)
    if path == "/":
        return 200, {}, _page("index", ["".join(f"<a href='{href}'>x</a>" for href in LINKS)])
    if path in PAGES:
        return 200, {}, PAGES[path]
    return 404, {}, b"not found"


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    with LocalSite(reply) as site:
        settings = {
            "DEDUP_WORKERS": 1,
            "SPIDER_MODULES": "hostile_spiders",
            # the 100 MB values are not written out again
            "FEED_EXPORT_FIELDS": "url,title,dedup",
        }
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTHONPATH", str(SPIDERS_DIR))
            result = run_crawl(site.url + "/", out, settings, spider="hostile")
        yield site.url, result, out / "store"




# every control character but tab and newline, and the bidirectional overrides
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_crawl_of_hostile_pages_and_odd_items_finishes(crawl):
    url, result, _ = crawl
    assert result.stat("finish_reason") == "finished"
    assert not result.stats_with_prefix("dedup/error/")
    # the one error is Scrapy's JSON exporter refusing the bytes URL the spider yielded
    errors = [line for line in result.log.splitlines() if "] ERROR:" in line]
    assert len(errors) == 1 and "FeedExporter" in errors[0], errors
    assert "Object of type bytes is not JSON serializable" in result.log
    urls = {item["url"] for item in result.items}
    assert urls & {url + "/hostile-a.html", url + "/hostile-b.html", url + "/hostile-c.html"}
    assert url + "/huge-text" in urls and url + "/huge-html" in urls
    # a bytes text is not a text: the item is decided from its page, not dropped undecided
    decided = {item["url"]: item.get("dedup", {}).get("status") for item in result.items}
    assert decided[url + "/huge-text"] == "new"


@pytest.mark.parametrize(
    "args",
    [
        ("summary",),
        ("aliases",),
        ("provenance",),
        ("clusters",),
        ("calibrate", "--sample", "3"),
        ("lookup", "HOSTILE"),
    ],
    ids=lambda a: a[0],
)
def test_tables_carry_no_control_characters(crawl, args):
    url, _, store = crawl
    args = tuple(url + "/hostile-b.html" if a == "HOSTILE" else a for a in args)
    proc = dedup(store, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert not CONTROL.findall(proc.stdout), CONTROL.findall(proc.stdout)[:5]


def test_tables_show_the_hostile_text_as_text(crawl):
    url, _, store = crawl
    out = dedup(store, "calibrate", "--sample", "3").stdout + dedup(store, "clusters").stdout
    assert "[2J[31mRED[0m" in out  # the sequences lost their ESC: shown, not obeyed
    provenance = dedup(store, "provenance").stdout
    assert "onload=alert(3)<script>x</script>[31m" in provenance


def test_jsonl_escapes_control_characters(crawl):
    _, _, store = crawl
    for sub in ("provenance", "aliases", "clusters"):
        proc = dedup(store, sub, "--format", "jsonl")
        assert proc.returncode == 0, proc.stderr
        assert ESC not in proc.stdout
    assert "\\u001b[31m" in dedup(store, "provenance", "--format", "jsonl").stdout


def test_html_report_is_inert(crawl, tmp_path):
    _, _, store = crawl
    page_file = tmp_path / "report.html"
    proc = dedup(store, "report", "--html", str(page_file))
    assert proc.returncode == 0, proc.stderr
    page = page_file.read_text("utf-8")
    assert "&lt;script&gt;" in page  # the hostile text is there, escaped
    assert "<script" not in page.lower()
    assert '" onload=' not in page and "onload=alert(3)<" not in page
    assert 'href="javascript:' not in page.lower()
    assert not CONTROL.findall(page)
