"""Hostile text renders inert, and odd item fields never stop a crawl.

A real crawl of a small site whose URLs, titles and text carry ``<script>``, ``" onload=`` and
terminal escape sequences, plus a page whose spider yields items with a non-string URL, bytes or
None text and 100 MB values.  Then every ``scrapy dedup`` subcommand reads the store: the tables
carry no control character and the HTML report escapes the markup.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
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
    ).encode("utf-8")


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


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        from urllib.parse import unquote

        path = unquote(self.path)
        if path == "/":
            body = _page("index", ["".join(f"<a href='{href}'>x</a>" for href in LINKS)])
        elif path in PAGES:
            body = PAGES[path]
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    out = tmp_path_factory.mktemp("hostile")
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        settings = {
            "DEDUP_WORKERS": 1,
            "SPIDER_MODULES": "hostile_spiders",
            # the 100 MB values are not written out again
            "FEED_EXPORT_FIELDS": "url,title,dedup",
        }
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTHONPATH", str(SPIDERS_DIR))
            result = run_crawl(url + "/", out, settings, spider="hostile")
        yield url, result, out / "store"
    finally:
        server.shutdown()


def dedup(store: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=store.parent,
        # full-width tables, whatever terminal runs the tests
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    )


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
