"""The chunk layer on real crawls of the demo site: shared preambles and per-host boilerplate."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from crawl_helpers import dedup
from local_site import LocalSite
from testing import DemoServer, load_manifest, run_crawl

from scrapy_dedup.core.urls import url_key
from scrapy_dedup.decide.chunk_layer import OWED, ChunkLayer
from scrapy_dedup.store.base import CHUNKS
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import get_meta, get_text, put_meta

MANIFEST = load_manifest()
PLANTED = MANIFEST["chunks"]
HOST_RULES = MANIFEST["host_rules"]
SETTINGS = {"DEDUP_HOST_RULES": HOST_RULES, "DEDUP_WORKERS": 2, "DEDUP_CHUNKS": True}
STATUSES = {"new", "exact_duplicate", "near_duplicate", "boilerplate"}




def stored(path: Path) -> dict[str, dict]:
    """url key -> its stored chunk record, with each chunk's text."""
    with LevelDBStore.open_existing(str(path)) as store:
        out = {}
        for key, raw in store.scan(CHUNKS):
            record = json.loads(raw)
            text = get_text(store, key)
            record["texts"] = [text[row[2] : row[3]] for row in record["chunks"]]
            out[key] = record
        assert not get_meta(store, OWED)
        return out


def planted_chunk(record: dict) -> list:
    rows = [row for row, text in zip(record["chunks"], record["texts"]) if PLANTED["marker"] in text]
    assert len(rows) == 1, record["texts"]
    return rows[0]


@pytest.fixture(scope="module")
def crawls(tmp_path_factory):
    """The demo site crawled at CONCURRENT_REQUESTS 1 and 16, each into its own store."""
    out = {}
    with DemoServer() as server:
        for concurrency in (1, 16):
            path = tmp_path_factory.mktemp(f"chunks-c{concurrency}")
            result = run_crawl(server.url + "/", path, {**SETTINGS, "CONCURRENT_REQUESTS": concurrency})
            out[concurrency] = (result, path / "store")
        yield server, out


def key(server, href: str) -> str:
    return url_key(server.url_for(href), HOST_RULES)


def test_items_carry_their_chunks(crawls):
    _, runs = crawls
    result, _ = runs[16]
    html_items = [i for i in result.items if "content_type" not in i]
    assert html_items
    for item in html_items:
        chunks = item["dedup"]["chunks"]
        assert chunks, item["url"]
        for c in chunks:
            assert set(c) == {"chunk_id", "text", "start", "end", "heading", "content_hash", "status", "duplicate_of"}
            assert item["text"][c["start"] : c["end"]] == c["text"]
            assert c["status"] in STATUSES
            assert (c["duplicate_of"] is not None) == (c["status"] in ("exact_duplicate", "near_duplicate"))
    assert result.stat("dedup/chunks/chunks") == sum(len(i["dedup"]["chunks"]) for i in html_items)
    # heading paths come from the page's h1..h6
    (deploy,) = [i for i in html_items if i["url"].endswith("/docs/deploy.html")]
    assert {tuple(c["heading"]) for c in deploy["dedup"]["chunks"]} == {("Deploying to production",)}
    assert not any(c["text"].startswith("Deploying to production") for c in deploy["dedup"]["chunks"])


def test_each_planted_shared_chunk_names_its_first_source(crawls):
    server, runs = crawls
    for concurrency in (1, 16):
        records = stored(runs[concurrency][1])
        for planted in PLANTED["shared"]:
            row = planted_chunk(records[key(server, planted["page"])])
            status, duplicate_of, source = row[7], row[8], row[9]
            assert status == planted["status"], (concurrency, planted)
            if "of" in planted:
                source_row = planted_chunk(records[key(server, planted["of"])])
                assert (source, duplicate_of) == (key(server, planted["of"]), source_row[0])
            else:
                assert duplicate_of is None


def test_the_feedback_line_is_learned_as_boilerplate_and_taken_out(crawls):
    server, runs = crawls
    result, path = runs[16]
    records = stored(path)
    line = PLANTED["boilerplate"]["text"]
    for href in PLANTED["boilerplate"]["pages"]:
        record = records[key(server, href)]
        rows = [(row[7], text) for row, text in zip(record["chunks"], record["texts"])]
        assert ("boilerplate", line) in rows, href
        assert all(line not in text for status, text in rows if status != "boilerplate")
    # the first crawl learned it only at its end: the items said otherwise, the revision counts it
    assert result.stat("dedup/chunks/revised") > 0
    assert "status(es) revised" in result.log

    listed = dedup(path, "boilerplate", "--format", "jsonl")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["text"] for r in rows] == [line.lower()]
    (row,) = rows
    urls = sorted(server.url_for(h) for h in PLANTED["boilerplate"]["pages"])
    assert row["pages"] == len(urls) and row["example_url"] == min(urls)
    assert row["group"] == server.url.split("://")[1].rstrip("/")
    assert row["pages"] >= row["threshold"] == max(3, -(-row["group_pages"] // 2))
    table = dedup(path, "boilerplate", "--host", row["group"])
    assert table.returncode == 0 and table.stdout.startswith("group") and f" {row['pages']} " in table.stdout
    assert dedup(path, "boilerplate", "--host", "other.example", "--format", "jsonl").stdout == ""


def test_the_same_statuses_at_concurrency_1_and_16(crawls):
    _, runs = crawls
    one, sixteen = (stored(runs[c][1]) for c in (1, 16))
    strip = {k: [row[:10] for row in r["chunks"]] for k, r in one.items()}
    assert strip == {k: [row[:10] for row in r["chunks"]] for k, r in sixteen.items()}


def test_check_finds_the_chunk_tables_consistent(crawls):
    _, runs = crawls
    checked = dedup(runs[1][1], "check")
    assert checked.returncode == 0, checked.stdout
    assert "chunk exact index" in checked.stdout and "consistent" in checked.stdout


def test_chunks_lists_shared_chunks_with_every_url(crawls):
    server, runs = crawls
    _, path = runs[1]
    listed = dedup(path, "chunks", "--format", "jsonl")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    shared = [r for r in rows if PLANTED["marker"] in r["text"]]
    # the exact copies and the near copy: two sources (the near copy is new in its own right,
    # and the exact copies repeat the first chunk with their content)
    by_source = {r["first_source"]: r for r in shared}
    first = server.url_for(PLANTED["shared"][0]["page"])
    deploy = server.url_for("/docs/deploy.html")
    assert set(by_source) == {first, deploy}
    assert by_source[first]["urls"] == [first, deploy]
    assert [c["status"] for c in by_source[first]["copies"]] == ["near_duplicate"]
    assert by_source[deploy]["urls"] == [deploy, server.url_for("/docs/faq.html"), server.url_for("/docs/troubleshooting.html")]
    assert {c["status"] for c in by_source[deploy]["copies"]} == {"exact_duplicate"}
    table = dedup(path, "chunks")
    assert table.returncode == 0 and table.stdout.startswith("documents") and len(table.stdout.splitlines()) == len(rows) + 1


def test_export_chunks_reads_the_settled_statuses(crawls):
    server, runs = crawls
    _, path = runs[1]
    out = path.parent / "chunks.jsonl"
    exported = dedup(path, "export", "--chunks", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    records_by_id = {o["chunk_id"]: o for r in records for o in r["documents"]}
    records_stored = stored(path)
    for planted in PLANTED["shared"]:
        row = planted_chunk(records_stored[key(server, planted["page"])])
        assert records_by_id[row[0]]["status"] == planted["status"]
    helpful = [r for r in records if r["text"] == PLANTED["boilerplate"]["text"]]
    assert len(helpful) == 1 and {o["status"] for o in helpful[0]["documents"]} == {"boilerplate"}


def test_an_unsettled_store_is_settled_by_the_next_crawl(crawls, tmp_path):
    """A crawl cut short before its end leaves the settling owed; the next one does it, even
    with DEDUP_CHUNKS off."""
    server, runs = crawls
    _, path = runs[16]
    expected = stored(path)
    copy = tmp_path / "store"
    subprocess.run(["cp", "-r", str(path), str(copy)], check=True)
    with LevelDBStore.open_existing(str(copy)) as store:
        # what an interrupted crawl leaves: statuses as known when decided, the settling owed
        layer = ChunkLayer(store)
        k = key(server, "/docs/faq.html")
        record = json.loads(store.get(CHUNKS, k))
        for row in record["chunks"]:
            row[7], row[8], row[9] = "new", None, None
        with store.batch() as b:
            b.put(CHUNKS, k, json.dumps(record).encode())
        put_meta(store, OWED, True)
        assert layer.owed
    unsettled = dedup(copy, "chunks", "--format", "jsonl")
    assert "stopped before it settled" in unsettled.stderr
    result = run_crawl(server.url + "/", tmp_path, {"DEDUP_HOST_RULES": HOST_RULES, "DEDUP_WORKERS": 0})
    assert result.stat("dedup/chunks/revised") >= 1
    settled = stored(copy)
    assert {k: [row[:10] for row in r["chunks"]] for k, r in settled.items()} == {
        k: [row[:10] for row in r["chunks"]] for k, r in expected.items()
    }


def test_without_dedup_chunks_nothing_changes(crawls, tmp_path):
    server, _ = crawls
    result = run_crawl(server.url + "/", tmp_path, {"DEDUP_HOST_RULES": HOST_RULES, "DEDUP_WORKERS": 0})
    assert all("chunks" not in i["dedup"] for i in result.items)
    assert result.stat("dedup/chunks/revised") == 0
    with LevelDBStore.open_existing(str(tmp_path / "store")) as store:
        assert list(store.scan(CHUNKS)) == []
    refused = dedup(tmp_path / "store", "chunks")
    assert refused.returncode == 1 and "DEDUP_CHUNKS" in refused.stderr


def test_a_root_prompt_in_a_page_s_code_is_no_heading(tmp_path):
    # A manual's commands run as root read "# apt-get update"; the page's headings come from its
    # HTML (here none the extractor kept), never from Markdown '#' lines of its plain text,
    # which would take those commands out of every chunk and head the rest of the page with them.
    prose = " ".join(f"The package manager keeps lists{i} of packages, updated from the archive." for i in range(12))
    body = (
        f"<div class='section'><div class='titlepage'><h2 class='title'>2.1. Basics</h2></div><p>{prose}</p>"
        "<pre class='screen'># apt-get update\n# apt-get install debian-reference-en</pre>"
        f"<p>{prose.replace('lists', 'indexes')}</p></div>"
    )
    html = f"<html><head><title>Basics</title></head><body><div class='chapter'>{body}</div></body></html>".encode()
    with LocalSite(lambda path: (200, {}, html) if path == "/" else (404, {}, b"")) as site:
        result = run_crawl(site.url + "/", tmp_path, {"DEDUP_CHUNKS": True, "DEDUP_WORKERS": 1})
    (item,) = result.items
    assert "# apt-get update" in item["text"]
    chunks = item["dedup"]["chunks"]
    assert any("# apt-get update" in c["text"] for c in chunks), chunks
    assert not any("apt-get" in " ".join(c["heading"]) for c in chunks), chunks


@pytest.mark.parametrize("first", [{}, {"DEDUP_CHUNKS": True, "DEDUP_CHUNK_WORDS": 40}])
def test_turning_chunks_on_or_changing_them_chunks_an_unchanged_site(tmp_path, first):
    # A store crawled without DEDUP_CHUNKS (or with other chunk settings), crawled again with
    # DEDUP_CHUNKS on: no page changed, so none is decided again, and the chunks must still be
    # made for every document at the end of the crawl.
    def page(n: int) -> bytes:
        words = " ".join(f"topic{n} detail{i} of page {n}." for i in range(60))
        links = "".join(f'<a href="/p{i}.html">p{i}</a> ' for i in range(3))
        return f"<html><body><article><h1>Page {n}</h1><p>{words}</p></article>{links}</body></html>".encode()

    def reply(path: str):
        for n in range(3):
            if path in (f"/p{n}.html", "/" if n == 0 else None):
                return 200, {}, page(n)
        return 404, {}, b""

    with LocalSite(reply) as site:
        run_crawl(site.url + "/p0.html", tmp_path, {"DEDUP_WORKERS": 1, **first})
        again = run_crawl(site.url + "/p0.html", tmp_path, {"DEDUP_WORKERS": 1, "DEDUP_CHUNKS": True})
    assert again.stat("dedup/doc/unchanged") == 3
    chunked = stored(tmp_path / "store")
    assert len(chunked) == 3
    for record in chunked.values():
        # made with this crawl's settings: the default cap (200 tokens) holds more than 40 words
        assert record["texts"] and all(len(text.split()) > 40 for text in record["texts"][:1]), record["texts"]
    listed = dedup(tmp_path / "store", "chunks")
    assert listed.returncode == 0, listed.stderr
