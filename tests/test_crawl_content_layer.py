"""The content layer on real crawls of the demo site (issue: content layer)."""

from __future__ import annotations

import pytest
from crawl_helpers import StoreView, final_documents, tutorial_crawl
from testing import DemoServer, load_manifest, run_crawl

# also run against the oldest supported Scrapy and dependencies (make test-oldest)
pytestmark = pytest.mark.smoke

MANIFEST = load_manifest()
GROUPS = {g["name"]: g for g in MANIFEST["groups"]}
HOST_RULES = MANIFEST["host_rules"]
SETTINGS = {"DEDUP_HOST_RULES": HOST_RULES, "DEDUP_WORKERS": 2}
MERGED = [g["name"] for g in MANIFEST["groups"] if g["kind"] in ("exact_content", "near_duplicate", "binary_exact")]
SEPARATE = [g["name"] for g in MANIFEST["groups"] if g["expect"] == "separate_documents"]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    out = tmp_path_factory.mktemp("content-layer")
    with DemoServer() as server:
        result = run_crawl(server.url + "/", out, SETTINGS)
        yield server, result, StoreView(out / "store", HOST_RULES)


@pytest.mark.parametrize("name", MERGED)
def test_planted_duplicates_are_caught(crawl, name):
    server, result, store = crawl
    group = GROUPS[name]
    canonical = server.url_for(group["canonical"])
    cluster = store.record(canonical).cluster_id
    # a near copy whose only difference was boilerplate is exact once the text is extracted
    expected = {"near_duplicate", "exact_content"} if group.get("match") == "near" else {"exact_content"}
    for variant in group["variants"]:
        record = store.record(server.url_for(variant))
        assert record.cluster_id == cluster, variant
        if record.reason is not None:  # the representative has no reason
            assert record.reason in expected, variant
    urls = {server.url_for(u) for u in [group["canonical"], *group["variants"]]}
    standing = [item for item in final_documents(result.items) if item["url"] in urls]
    assert len(standing) == 1, [i["url"] for i in standing]


def test_near_duplicates_report_their_distance(crawl):
    server, _, store = crawl
    group = GROUPS["near_duplicates"]
    records = [store.record(server.url_for(u)) for u in [group["canonical"], *group["variants"]]]
    assert {r.status for r in records} <= {"new", "near_duplicate", "exact_duplicate"}
    assert any(r.reason == "near_duplicate" for r in records)
    for record in records:
        if record.reason == "near_duplicate":
            assert record.distance is not None


@pytest.mark.parametrize("name", SEPARATE)
def test_distinct_pages_are_kept_apart(crawl, name):
    server, result, store = crawl
    pages = [server.url_for(p) for p in GROUPS[name]["pages"]]
    clusters = {store.record(p).cluster_id for p in pages}
    assert len(clusters) == len(pages), name
    standing = {item["url"] for item in final_documents(result.items)}
    for page in pages:
        assert store.representative_url(page) in standing


def test_items_carry_text_and_the_dedup_field(crawl):
    _, result, _ = crawl
    html_items = [i for i in result.items if "content_type" not in i]
    assert html_items
    for item in html_items:
        assert item["text"].strip()
        field = item["dedup"]
        assert set(field) == {
            "status", "document_id", "content_hash", "simhash", "cluster_id", "canonical_url", "duplicate_of",
            "distance", "supersedes",
        }
        assert field["document_id"] == field["cluster_id"]
        assert len(field["simhash"]) == 16 and len(field["content_hash"]) == 32
        assert field["canonical_url"] == item["url"]  # only representatives are emitted by default


def test_every_fetched_url_is_kept_in_the_store(crawl):
    server, result, store = crawl
    assert result.stat("dedup/doc/exact_duplicate") > 0
    assert result.stat("dedup/doc/near_duplicate") > 0
    dropped = result.stat("dedup/doc/dropped")
    assert dropped == result.stat("item_dropped_count")
    members = sum(len(m) for m in store.members.values())
    assert members == len([r for r in store.records.values() if r.cluster_id])


def test_flagged_instead_of_dropped(tmp_path):
    with DemoServer() as server:
        result = run_crawl(server.url + "/", tmp_path, {**SETTINGS, "DEDUP_DROP_DUPLICATES": False})
    statuses = {item["dedup"]["status"] for item in result.items}
    assert {"exact_duplicate", "near_duplicate"} <= statuses
    assert result.stat("item_dropped_count") == 0


def test_same_representatives_at_any_concurrency(tmp_path):
    partitions = []
    with DemoServer() as server:
        for concurrency in (1, 16):
            out = tmp_path / f"c{concurrency}"
            run_crawl(server.url + "/", out, {**SETTINGS, "CONCURRENT_REQUESTS": concurrency})
            partitions.append(StoreView(out / "store", HOST_RULES).partition())
    assert partitions[0] == partitions[1]


def test_recrawl_gives_unchanged_updated_and_deleted(tmp_path):
    recrawl = MANIFEST["recrawl"]
    with DemoServer() as server:
        run_crawl(server.url + "/", tmp_path, SETTINGS)
        server.variant = recrawl["variant"]
        result = run_crawl(server.url + "/", tmp_path, {**SETTINGS, "DEDUP_REVISIT_AFTER": 0})
        store = StoreView(tmp_path / "store", HOST_RULES)
        url = server.url_for
    by_url = {item["url"]: item for item in result.items}
    for page in recrawl["changed"]:
        assert by_url[url(page)]["dedup"]["status"] == "updated"
    for page in recrawl["unchanged"]:
        assert url(page) not in by_url
        assert store.record(url(page)).status == "unchanged"
    for page in recrawl["deleted_404"] + recrawl["gone_410"]:
        record = store.record(url(page))
        assert record.status == "deleted" and record.cluster_id is None
    assert result.stat("dedup/doc/deleted") == 2
    assert result.stat("dedup/doc/updated") == len(recrawl["changed"])
    assert result.stat("dedup/doc/unchanged") > 0


#: a text/plain page, as a Sphinx manual's ``_sources/*.rst.txt``
PLAIN_NOTES = "\n\n".join(f"Plain note {i}: the routing daemon reloads peer{i} and keeps route{i % 7}." for i in range(40))


def plain_text_site(path: str):
    """A home page linking to ``/notes.rst.txt`` (text/plain, ``PLAIN_NOTES``)."""
    if path == "/notes.rst.txt":
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, PLAIN_NOTES.encode()
    body = "<p>" + " ".join(f"word{i}" for i in range(80)) + '</p><a href="/notes.rst.txt">source</a>'
    return 200, {}, f"<html><head><title>home</title></head><body>{body}</body></html>".encode()


def test_a_plain_text_page_in_the_item_s_html_field_is_its_text(tmp_path, monkeypatch):
    """The tutorial's spider puts ``response.text`` in ``html`` for every page, a text/plain
    file too (a Sphinx manual's ``_sources/*.rst.txt``): that is the page's text, not markup to
    extract from. Before, it was read as HTML and came out empty: the 41 reST sources of frr-doc
    8.4.4 were all ``skipped_empty``."""
    site, result = tutorial_crawl(plain_text_site, tmp_path, monkeypatch)
    (item,) = [i for i in result.items if i["url"].endswith("/notes.rst.txt")]
    assert item["dedup"]["status"] == "new"
    assert "Plain note 39: the routing daemon reloads peer39" in item["text"]
    assert StoreView(tmp_path / "store").record(site + "/notes.rst.txt").status == "new"


def test_a_text_file_served_as_octet_stream_is_its_text(tmp_path, monkeypatch):
    """A file without an extension (AUTHORS, README, COPYING) is served as
    ``application/octet-stream`` by Python's http.server and many others: the server does not
    know its type, Scrapy sniffs the body as text, and the tutorial's spider yields it with
    ``response.text`` in ``html``. It was read as HTML, came out empty and the item was dropped
    ("no text to deduplicate"): gnucash-docs 4.13-1's AUTHORS and copyright."""
    authors = "Contributors:\n\n" + "\n".join(f"Contributor{i} Surname{i} wrote chapter {i}" for i in range(60))

    def reply(path: str):
        if path == "/AUTHORS":
            return 200, {"Content-Type": "application/octet-stream"}, authors.encode()
        return 200, {}, b'<html><head><title>home</title></head><body><a href="/AUTHORS">authors</a></body></html>'

    site, result = tutorial_crawl(reply, tmp_path, monkeypatch)
    (item,) = [i for i in result.items if i["url"].endswith("/AUTHORS")]
    assert item["dedup"]["status"] == "new"
    assert "Contributor59 Surname59 wrote chapter 59" in item["text"]
    assert StoreView(tmp_path / "store").record(site + "/AUTHORS").status == "new"
