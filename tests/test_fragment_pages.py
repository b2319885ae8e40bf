"""A page that is a bare HTML fragment (no <html>, no <body>) is a document, not skipped_empty.

bash-doc 5.2.15-2 ships examples/INDEX.html as a lone ``<table>`` of 103 rows (each example
script and what it does): trafilatura's fast mode finds no text in it, its full mode finds all of
it. Crawled through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

EXAMPLES = [
    ("./functions/basename", "A replacement for basename(1).", "basename"),
    ("./functions/dirname", "A replacement for dirname(1).", "dirname"),
    ("./functions/csh-compat", "A C-shell compatibility package.", "csh"),
    ("./scripts/bcalc", "Example of a calculator written in the shell, with its own prompt.", ""),
    ("./misc/aliasconv.sh", "Convert csh aliases to bash aliases and functions.", "csh"),
] * 4

INDEX = (
    "<table border=1>\n  <tr>\n    <th>Path</th>\n    <th>Description</th>\n    <th>X-Ref</th>\n  </tr>\n"
    + "".join(f"  <tr>\n    <td>{p}</td>\n    <td>{d}</td>\n    <td>{x}</td>\n  </tr>\n" for p, d, x in EXAMPLES)
    + "</table>\n"
)


def reply(path: str):
    if path == "/":
        return (
            200,
            {},
            b'<html><head><title>Examples</title></head><body><a href="/examples.html">Index</a></body></html>',
        )
    if path == "/examples.html":
        return 200, {}, INDEX.encode()
    return 404, {}, b"not found"


def test_a_bare_table_is_extracted():
    text = extract_text(INDEX)
    assert "A C-shell compatibility package." in text and "./functions/dirname" in text
    # plain text is still no document
    assert extract_text("just some plain text, not html at all " * 20) == ""


def test_a_bare_table_is_a_document_in_the_export(tmp_path):
    with LocalSite(reply) as site:
        run_crawl(f"{site.url}/", tmp_path, SETTINGS)
    records = exported(tmp_path / "store")
    [doc] = [r for r in records if r["url"] == f"{site.url}/examples.html"]
    assert "Convert csh aliases to bash aliases and functions." in doc["text"]
