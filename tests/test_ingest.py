"""``scrapy dedup ingest``: the demo site's pages from a JSON Lines file end in the clusters a crawl finds."""

from __future__ import annotations

import json

import pytest
from crawl_helpers import StoreView, crawled_page
from test_demo_site import html_pages
from test_export import dedup, jsonl, ok
from testing import DemoServer, run_crawl


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("ingest")
    with DemoServer() as server:
        rules = server.manifest["host_rules"]
        run_crawl(server.url + "/", work / "crawl", {"DEDUP_HOST_RULES": rules})
        pages = html_pages(server)
    lines = [json.dumps({"url": url, "html": html}) for url, html in sorted(pages.items())]
    # malformed lines among the good ones: broken JSON, no URL, no text, not an object
    lines[3:3] = ['{"url": "http://x/broken', '{"html": "<p>no url</p>"}', '{"url": "http://x/a"}', "[1, 2]"]
    corpus = work / "pages.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = work / "ingested"
    proc = ok("ingest", str(corpus), "--store", str(store), "-s", "DEDUP_HOST_RULES=" + json.dumps(rules), cwd=work)
    return server, work, pages, proc


def test_malformed_lines_are_reported_with_their_numbers_and_the_rest_ingested(both):
    _, _, pages, proc = both
    for number in (4, 5, 6, 7):
        assert f"pages.jsonl:{number}: skipped:" in proc.stderr
    assert f"ingested {len(pages)} records of {len(pages) + 4} lines" in proc.stderr
    assert "4 malformed line(s) skipped" in proc.stderr


def test_ingested_pages_end_in_the_clusters_of_a_crawl(both):
    _, work, pages, _ = both
    crawl, ingested = StoreView(work / "crawl" / "store"), StoreView(work / "ingested")
    keys = {ingested.key(url) for url in pages}
    # the file has no link graph: a rel=canonical the crawl honoured is not known to the ingest
    aside = {k for k, r in crawl.records.items() if r.canonical_alias or r.reason == "rel_canonical"}

    def groups(view: StoreView) -> set[frozenset]:
        found = {frozenset(m for m in members if m in keys and m not in aside) for members in view.members.values()}
        return found - {frozenset()}

    assert groups(ingested) == groups(crawl)
    assert sum(len(g) > 1 for g in groups(crawl)) >= 3  # duplicate groups are compared, not only singletons
    for key in keys - aside:
        if key in crawl.records and crawl.records[key].cluster_id in crawl.clusters:
            assert ingested.clusters[ingested.records[key].cluster_id].representative == (
                crawl.clusters[crawl.records[key].cluster_id].representative
            ), key


def test_the_ingested_store_exports_like_a_crawled_one(both):
    _, work, pages, _ = both
    records = jsonl(ok("export", "--store", str(work / "ingested"), cwd=work).stdout)
    assert records and len({r["document_id"] for r in records}) == len(records) < len(pages)
    # the lines carry HTML only: each document's title is its <title>, as the crawl's items have it
    crawled = {r["url"]: r["title"] for r in jsonl(ok("export", "--store", str(work / "crawl" / "store"), cwd=work).stdout)}
    titled = [r for r in records if r["url"] in crawled]
    assert titled and all(r["title"] and r["title"] == crawled[r["url"]] for r in titled)


def test_a_missing_file_is_a_one_line_error(both):
    _, work, _, _ = both
    proc = dedup("ingest", str(work / "absent.jsonl"), "--store", str(work / "other"), cwd=work)
    assert proc.returncode == 1 and "cannot read" in proc.stderr
    # the file named after the options, as `lookup --store PATH URL` takes its URL
    proc = dedup("ingest", "--store", str(work / "other"), str(work / "absent.jsonl"), cwd=work)
    assert proc.returncode == 1 and "cannot read" in proc.stderr, proc.stderr


def test_an_ingest_with_dedup_chunks_settles_chunks_as_a_crawl_does(both):
    server, work, _, _ = both
    planted = server.manifest["chunks"]
    rules = server.manifest["host_rules"]
    store = work / "ingested-chunks"
    proc = ok(
        "ingest", str(work / "pages.jsonl"), "--store", str(store), "-s", "DEDUP_HOST_RULES=" + json.dumps(rules),
        "-s", "DEDUP_CHUNKS=True", cwd=work,
    )  # fmt: skip
    assert "boilerplate line(s) learned" in proc.stderr
    shared = [r for r in jsonl(ok("chunks", "--store", str(store), "--format", "jsonl", cwd=work).stdout)
              if planted["marker"] in r["text"]]  # fmt: skip
    by_source = {r["first_source"]: r for r in shared}
    first, deploy = server.url_for(planted["shared"][0]["page"]), server.url_for("/docs/deploy.html")
    assert set(by_source) == {first, deploy}
    assert [c["status"] for c in by_source[first]["copies"]] == ["near_duplicate"]
    assert {c["status"] for c in by_source[deploy]["copies"]} == {"exact_duplicate"}
    learned = jsonl(ok("boilerplate", "--store", str(store), "--format", "jsonl", cwd=work).stdout)
    assert [r["text"] for r in learned] == [planted["boilerplate"]["text"].lower()]


#: an index page longer than the body limit, as cmake-doc 3.25's genindex.html (2.6 MiB) is
LONG_PAGE = "<html><head><title>Index</title></head><body><article>" + "".join(
    f"<p>Entry {n}: the option{n} setting of the module{n} command, see section{n}.</p>" for n in range(400)
) + "</article></body></html>"


#: the same index in Russian: two bytes a letter, so a cut at N characters keeps nearly all of it
CYRILLIC_PAGE = "<html><head><title>Указатель</title></head><body><article>" + "".join(
    f"<p>Запись {n}: параметр{n} команды модуля{n}, смотрите раздел{n}.</p>" for n in range(400)
) + "</article></body></html>"


@pytest.mark.parametrize(
    ("page", "kept", "cut"),
    [(LONG_PAGE, "Entry 100:", "Entry 399:"), (CYRILLIC_PAGE, "Запись 100:", "Запись 250:")],
    ids=["ascii", "cyrillic"],
)
def test_a_page_over_the_body_limit_is_ingested_as_the_crawl_cut_it(tmp_path, page, kept, cut):
    """The crawl cuts a page's HTML at DEDUP_MAX_BODY_BYTES before extraction; the ingest of the
    same HTML cuts it there too, so the same page gives the same text and export, and says so.
    The cut is at N bytes, not N characters (a Cyrillic page was cut at 2N bytes, its 300th
    entry kept), and a letter it splits in two is left out."""
    body = page.encode()
    size = len(body) // 2
    size += (body[size] & 0xC0) != 0x80  # on the second byte of a letter, when the page has such
    limit = {"DEDUP_MAX_BODY_BYTES": size}
    crawled = crawled_page(page, tmp_path / "crawl", {"DEDUP_WORKERS": 0, **limit})
    url = crawled["url"]
    del crawled["first_seen"], crawled["last_seen"]
    assert kept in crawled["text"] and cut not in crawled["text"]  # cut by the crawl
    assert "\ufffd" not in crawled["text"]
    corpus = tmp_path / "pages.jsonl"
    corpus.write_text(json.dumps({"url": url, "html": page}) + "\n", encoding="utf-8")
    ingested = ok("ingest", str(corpus), "--store", str(tmp_path / "ingested"), "-s", f"DEDUP_MAX_BODY_BYTES={size}", cwd=tmp_path)
    # said, as the crawl says it (dedup/doc/body_cut)
    assert f"pages.jsonl:1: its html of {len(body):,} bytes is cut at DEDUP_MAX_BODY_BYTES" in ingested.stderr

    def exported(store):
        [record] = [r for r in jsonl(ok("export", "--store", str(store), cwd=tmp_path).stdout) if r["url"] == url]
        del record["first_seen"], record["last_seen"]
        return record

    assert exported(tmp_path / "ingested") == crawled


def test_a_cut_body_keeps_whole_characters_in_any_encoding():
    from scrapy_dedup.core.body import cut_body

    assert cut_body("жж", 3) == (b"\xd0\xb6\xd0", 4) and cut_body("жж", 3).text() == "ж"
    assert cut_body("жж", None).text() == "жж" and not cut_body("жж", 4).cut
    assert cut_body("日本語".encode("shift_jis"), 5).text("shift_jis", "replace") == "日本"
    # a lone surrogate (JSON's "\ud800") goes through, whole or cut
    assert cut_body("a\ud800b", 4).text() == "a\ud800" and cut_body("a\ud800b", 3).text() == "a"


@pytest.mark.parametrize("site", ["plain text", "sphinx"])
def test_the_tutorial_spiders_items_ingest_as_they_crawled_a_plain_text_page_too(tmp_path, monkeypatch, site):
    """The tutorial's spider stores ``response.text`` in ``html`` for every page, a text/plain file
    too (a Sphinx manual's ``_sources/*.rst.txt``); the crawl takes that as the page's text, and
    an ingest of the spider's items does too. Before, the ingest extracted it as HTML: on cmake-doc
    3.25, 1,934 of 3,869 records ended ``skipped_empty``, and here the text page is missing from
    the ingested export. A page and its reST source: the page represents their document in both
(``UrlRecord.plain_text``)."""
    from crawl_helpers import tutorial_crawl
    from test_crawl_content_layer import plain_text_site
    from test_export import sphinx_site

    reply, words = {
        "plain text": (plain_text_site, "Plain note 39: the routing daemon reloads peer39"),
        "sphinx": (sphinx_site, "Clause 39 of the guide"),
    }[site]
    # every page an item, its duplicates too: the ingest gets the pages the crawl decided
    _, crawled = tutorial_crawl(reply, tmp_path / "crawl", monkeypatch, {"DEDUP_DROP_DUPLICATES": False})
    corpus = tmp_path / "items.jsonl"
    corpus.write_text("".join(json.dumps({k: i[k] for k in ("url", "title", "html")}) + "\n" for i in crawled.items))
    ok("ingest", str(corpus), "--store", str(tmp_path / "ingested"), cwd=tmp_path)

    def exported(store):
        records = jsonl(ok("export", "--store", str(store), cwd=tmp_path).stdout)
        return sorted(({k: v for k, v in r.items() if k not in ("first_seen", "last_seen")} for r in records), key=str)

    assert any(words in r["text"] for r in exported(tmp_path / "crawl" / "store"))
    assert exported(tmp_path / "ingested") == exported(tmp_path / "crawl" / "store")


def test_a_second_spelling_of_a_url_key_stays_a_source_of_its_document(tmp_path):
    """Plain Scrapy fetches a manual's start page ``/`` and its link ``/index.html``, one URL key:
    the items of the tutorial's spider hold both. The ingest kept the first spelling's record and
    lost the other URL: on python-cryptography-doc 38.0.4, 114 items exported 113 source URLs.
    It is a URL variant of its key, as in a crawl."""
    page = "<html><head><title>Welcome</title></head><body><main><h1>Welcome</h1><p>{}</p></main></body></html>"
    words = "The library includes both high level recipes and low level interfaces to common algorithms. "
    lines = [
        {"url": "http://docs.example/index.html", "html": page.format(words * 4)},
        {"url": "http://docs.example/faq.html", "html": page.format("Frequently asked questions and answers. " * 9)},
        {"url": "http://docs.example/", "html": page.format(words * 4)},
    ]
    corpus = tmp_path / "items.jsonl"
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    store = str(tmp_path / "ingested")
    ok("ingest", str(corpus), "--store", store, cwd=tmp_path)
    records = jsonl(ok("export", "--store", store, cwd=tmp_path).stdout)
    sources = {s["url"]: s["reason"] for r in records for s in r["sources"]}
    assert sources == {
        "http://docs.example/index.html": None,
        "http://docs.example/faq.html": None,
        "http://docs.example/": "url_variant",
    }
    found = json.loads(ok("lookup", "http://docs.example/", "--store", store, "--format", "jsonl", cwd=tmp_path).stdout)
    assert found["canonical_url"] == "http://docs.example/index.html"
