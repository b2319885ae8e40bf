"""``scrapy dedup export``: the settled corpus of a real crawl of the demo site, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from crawl_helpers import StoreView
from testing import DemoServer, run_crawl

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def dedup(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "COLUMNS", "LINES")}
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def ok(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = dedup(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    work = tmp_path_factory.mktemp("export-crawl")
    with DemoServer() as server:
        result = run_crawl(server.url + "/", work / "with-text", {"DEDUP_HOST_RULES": server.manifest["host_rules"]})
        run_crawl(
            server.url + "/",
            work / "no-text",
            {"DEDUP_HOST_RULES": server.manifest["host_rules"], "DEDUP_KEEP_TEXT": False},
        )
        yield server, work, result


@pytest.fixture(scope="module")
def exported(crawled):
    server, work, _ = crawled
    proc = ok("export", "--store", str(work / "with-text" / "store"), cwd=work)
    return jsonl(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def provenance(crawled):
    _, work, _ = crawled
    store = str(work / "with-text" / "store")
    rows = jsonl(ok("provenance", "--store", store, "--format", "jsonl", cwd=work).stdout)
    aliases = jsonl(ok("aliases", "--store", store, "--format", "jsonl", cwd=work).stdout)
    return rows, aliases


def test_one_record_per_document_with_its_fields(exported, provenance):
    records, stderr = exported
    rows, _ = provenance
    documents = {r["canonical_url"] for r in rows if r["canonical_url"] and r["reason"] is None and r["text_length"]}
    assert sorted(r["url"] for r in records) == sorted(documents)
    assert len({r["document_id"] for r in records}) == len(records) == 36  # 37 documents, one a PDF
    for record in records:
        assert list(record) == ["document_id", "url", "title", "text", "sources", "first_seen", "last_seen", "merged_passages"]
        assert record["text"].strip() and re.fullmatch(r"[0-9a-f]{16}", record["document_id"])
        assert ISO.match(record["first_seen"]) and ISO.match(record["last_seen"])
        assert record["first_seen"] <= record["last_seen"]
        assert record["title"]  # the item's title (every demo page has one)
    titles = {r["url"].rsplit("/", 1)[-1]: r["title"] for r in records}
    assert titles["llm-evals.html"] == "How we evaluate retrieval quality | Harbor"
    # the PDF has no text: left out, and said so
    assert "1 document(s) have no text in the store" in stderr and ".pdf" in stderr


def test_every_source_url_is_listed_once_with_its_reason(exported, provenance):
    records, _ = exported
    rows, aliases = provenance
    by_url = {r["url"]: r for r in records}
    expected: dict[str, dict[str, str | None]] = {}
    for row in rows:
        if row["canonical_url"] in by_url and row["status"] != "redirect":
            expected.setdefault(row["canonical_url"], {})[row["url"]] = row["reason"]
    for alias in aliases:
        if alias["canonical_url"] in by_url:
            expected.setdefault(alias["canonical_url"], {})[alias["url"]] = alias["reason"]
    for url, record in by_url.items():
        got = {s["url"]: s["reason"] for s in record["sources"]}
        assert len(got) == len(record["sources"]), url
        assert got == expected[url], url
        assert got[url] is None  # the canonical URL is a source with no alias reason


def test_each_planted_duplicate_group_is_one_record(crawled, exported):
    server, _, _ = crawled
    records, _ = exported
    owner = {s["url"]: r["document_id"] for r in records for s in r["sources"]}
    checked = 0
    for group in server.manifest["groups"]:
        if group["expect"] != "one_document" or group["kind"] == "binary_exact":
            continue
        urls = [server.url_for(group["canonical"])] + [server.url_for(v) for v in group["variants"]]
        ids = {owner.get(u) for u in urls if u in owner}
        assert len(ids) == 1 and None not in ids, group["name"]
        checked += 1
    assert checked >= 8


def test_export_to_a_file_and_the_same_records_twice(crawled, exported, tmp_path):
    _, work, _ = crawled
    out = tmp_path / "corpus.jsonl"
    proc = ok("export", "--store", str(work / "with-text" / "store"), "--format", "jsonl", "-o", str(out), cwd=work)
    assert f"exported 36 documents to {out}" in proc.stderr
    assert jsonl(out.read_text("utf-8")) == exported[0]


def test_export_to_dash_writes_stdout(crawled, exported, tmp_path):
    # as `scrapy crawl -o -`: the records on stdout, no file named "-"
    _, work, _ = crawled
    proc = ok("export", "--store", str(work / "with-text" / "store"), "-o", "-", cwd=tmp_path)
    assert jsonl(proc.stdout) == exported[0]
    assert "exported 36 documents\n" in proc.stderr
    assert not (tmp_path / "-").exists()


def test_chunks_one_record_per_distinct_chunk_with_every_document(crawled, exported):
    _, work, _ = crawled
    records, _ = exported
    by_id = {r["document_id"]: r for r in records}
    proc = ok("export", "--store", str(work / "with-text" / "store"), "--chunks", cwd=work)
    chunks = jsonl(proc.stdout)
    assert len({c["content_hash"] for c in chunks}) == len(chunks) > len(records)
    occurrences = 0
    for chunk in chunks:
        assert list(chunk) == ["content_hash", "text", "tokens", "documents", "urls"]
        for occ in chunk["documents"]:
            doc = by_id[occ["document_id"]]
            assert _text_at(doc, occ["source_url"], occ["start"], occ["end"]) == chunk["text"]
            assert doc["url"] in chunk["urls"]
            occurrences += 1
        assert set(chunk["urls"]) >= {by_id[o["document_id"]]["url"] for o in chunk["documents"]}
    # every document's chunks are all there
    assert occurrences == sum(1 for c in chunks for _ in c["documents"])
    assert {o["document_id"] for c in chunks for o in c["documents"]} == set(by_id)
    assert re.search(r"exported \d+ unique chunks of 36 documents", proc.stderr)


def _text_at(doc: dict, url: str, start: int, end: int) -> str | None:
    """The text at ``start:end`` of the page at ``url``, as the export carries it: the
    representative's whole text, or a merged passage of another member of the document."""
    if url == doc["url"]:
        return doc["text"][start:end]
    for p in doc["merged_passages"]:
        if p["source_url"] == url and p["start"] <= start < end <= p["end"]:
            return p["text"][start - p["start"] : end - p["start"]]
    return None


def test_a_store_without_texts_says_so(crawled):
    _, work, _ = crawled
    proc = dedup("export", "--store", str(work / "no-text" / "store"), cwd=work)
    assert proc.returncode == 1
    assert "nothing to export: " in proc.stderr and "DEDUP_KEEP_TEXT" in proc.stderr and proc.stdout == ""


def test_usage_errors(crawled):
    _, work, _ = crawled
    store = str(work / "with-text" / "store")
    assert dedup("export", "--store", store, "--format", "csv", cwd=work).returncode == 2
    assert dedup("aliases", "--store", store, "--chunks", cwd=work).returncode == 2


def test_upserting_the_emitted_items_by_document_id_leaves_one_record_per_document(crawled, exported):
    _, work, result = crawled
    index: dict[str, dict] = {}
    for item in result.items:  # in the order the crawl emitted them, later copies included
        index[item["dedup"]["document_id"]] = item
    store = StoreView(work / "with-text" / "store")
    # the feed holds more items than documents (copies that were superseded later) ...
    assert sum(len(i["dedup"]["supersedes"]) for i in result.items) >= 1
    assert len(result.items) > len(index)
    # ... and the upserted index ends with the store's documents, each at its canonical URL (the
    # feed's ids are provisional: a cluster whose representative changed during the crawl kept the
    # id it was founded under, and settling names it after its representative)
    assert sorted(item["url"] for item in index.values()) == sorted(c.rep_url for c in store.clusters.values())
    records, _ = exported
    assert sorted(r["url"] for r in records) == sorted(v["url"] for v in index.values() if v.get("text"))


RAG_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "rag.md"


def _guide_blocks(containing: str) -> list[str]:
    guide = RAG_GUIDE.read_text(encoding="utf-8")
    return [b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if containing in b]


def test_guide_langchain_examples_end_with_one_copy_per_document(crawled, exported, tmp_path):
    """The RAG guide's two LangChain recipes, run as written on a real crawl: the export through the
    indexing API, and the crawl's own feed upserted by ``dedup.document_id``."""
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    _, work, result = crawled
    records, _ = exported
    expected = {r["document_id"]: r["url"] for r in records}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    fed_ids = [i["dedup"]["document_id"] for i in result.items if i.get("text")]
    assert len(set(fed_ids)) < len(fed_ids), "the feed has later copies of some documents: upserts replace them"

    (index_block,) = _guide_blocks("index(documents(")
    (items_block,) = _guide_blocks("def upsert_items(")
    exported_store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    namespace = {"vector_store": exported_store}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(index_block, str(RAG_GUIDE), "exec"), namespace)
    finally:
        os.chdir(cwd)
    assert {d["metadata"]["document_id"]: d["metadata"]["url"] for d in exported_store.store.values()} == expected

    fed_store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    exec(compile(items_block, str(RAG_GUIDE), "exec"), namespace)
    namespace["upsert_items"](str(work / "with-text" / "items.jsonl"), fed_store)
    assert sorted(d["metadata"]["url"] for d in fed_store.store.values()) == sorted(expected.values())


def test_the_title_is_the_item_s_field_else_the_html_s():
    from itemadapter import ItemAdapter
    from scrapy.http import HtmlResponse, Request

    from scrapy_dedup.crawl.pipeline import _title

    url = "http://h/a"
    page = b"<html><head><title>\n From &amp; the HTML </title></head><body><p>text</p></body></html>"
    response = HtmlResponse(url, body=page, encoding="utf-8", request=Request(url))
    assert _title(ItemAdapter({"title": "  Given\n title "}), "title", "html", response) == "Given title"
    assert _title(ItemAdapter({"url": url, "title": ""}), "title", "html", response) == "From & the HTML"
    assert _title(ItemAdapter({"headline": "Named"}), "headline", "html", response) == "Named"
    assert _title(ItemAdapter({"html": "<title>In the item</title>"}), "title", "html", None) == "In the item"
    assert _title(ItemAdapter({"url": url}), "title", "html", None) is None


SPHINX_SENTENCES = [f"Clause {i} of the guide says that the compiler flag{i} enables feature{i % 9} everywhere." for i in range(40)]
#: the reST source of a Sphinx page: its words, and its markup
SPHINX_SOURCE = ".. _feature-guide:\n\n.. index::\n   single: feature guide\n\n" + "\n\n".join(SPHINX_SENTENCES) + "\n"


def sphinx_site(path: str):
    """A Sphinx page, ``/guide.html``, that links its reST source (``_sources/guide.rst.txt``,
    text/plain, longer by its markup), as "View page source" does."""
    if path == "/_sources/guide.rst.txt":
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, SPHINX_SOURCE.encode()
    if path == "/":
        return 200, {}, b'<html><body><a href="/guide.html">The feature guide</a></body></html>'
    html = "".join(f"<p>{s}</p>" for s in SPHINX_SENTENCES)
    body = f'<h1>The feature guide</h1>{html}<a href="/_sources/guide.rst.txt">View page source</a>'
    return 200, {}, f"<html><head><title>6.1. The feature guide</title></head><body>{body}</body></html>".encode()


@pytest.mark.parametrize("authority", [None, "*/_sources/*"])
def test_a_sphinx_page_represents_its_rest_source(tmp_path, monkeypatch, authority):
    """A Sphinx page and its reST source (``_sources/*.rst.txt``, text/plain, linked by "View page
    source") are one document. The source is longer by its markup, and represented it: on the
    Astropy 5.2.1 manual (python-astropy-doc 5.2.1-2+deb12u1) crawled with the tutorial's spider,
    60 of the 61 documents that held a page and its source. The page extracted from HTML
    represents it now (0 of 61).

    A source a user ranks first (``DEDUP_AUTHORITY``) represents it, and the export's ``title`` is
    then its page's: the source has none, and the title was null for 70 documents of the GHC 9.0.2
    User's Guide (ghc-doc 9.0.2-4)."""
    from crawl_helpers import tutorial_crawl

    settings = {"DEDUP_AUTHORITY": [authority]} if authority else {}
    site, _ = tutorial_crawl(sphinx_site, tmp_path, monkeypatch, settings)
    records = jsonl(ok("export", "--store", str(tmp_path / "store"), cwd=tmp_path).stdout)
    (record,) = [r for r in records if len(r["sources"]) == 2]
    if authority:
        assert record["url"] == site + "/_sources/guide.rst.txt" and record["text"].startswith(".. _feature-guide:")
    else:  # the shorter text represents
        assert record["url"] == site + "/guide.html" and len(record["text"]) < len(SPHINX_SOURCE)
    assert record["title"] == "6.1. The feature guide"
