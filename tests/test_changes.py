"""``scrapy dedup export --changes-since TOKEN``: an index that applies the changes since an export
holds what a full export of the store holds now.

The book of tests/test_recrawl.py is crawled and exported in full (the export prints its token),
then edited on disk: ``s1`` changes, ``s2`` is deleted, ``s4`` is added and ``s5`` (a longer copy
of ``s3``, linked from ``s4``) takes ``s3``'s document over. The re-crawl (every page due again)
and the changes since the token follow, through the real CLI, on LevelDB, on Redis and on
LevelDB with ``DEDUP_CHUNKS``; the history's rules on the memory backend, and after a repair.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from crawl_helpers import dedup
from local_site import FileSite
from test_recrawl import MovingSite, crawl, edit_book, page, text, write_book

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.core.urls import url_key
from scrapy_dedup.decide import changes
from scrapy_dedup.decide.clusters import cluster_id_for
from scrapy_dedup.store.memory import MemoryStore

TOKEN = re.compile(r"^change token: ([0-9a-f]{8}-[0-9]+) ", re.M)
#: what an index holds of a document: every field of the export but the fetch times
HELD = ("document_id", "url", "title", "text", "sources")


def take_over(root: Path) -> None:
    """Between the crawls: the edits of the recrawl tests, and ``s5``, a longer copy of ``s3``."""
    edit_book(root)
    book = root / "book"
    (book / "s4.html").write_text(page("Section 4", text("four"), ("s5.html",)))
    (book / "s5.html").write_text(page("Section 5", text("three") + " A closing note on section three."))


def run(store: Path, *args: str, redis: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    """``scrapy dedup ARGS`` on the crawl's store: ``store``, or the Redis one (URL, prefix)."""
    if redis is None:
        return dedup(store, *args)
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args, "--store", redis[0], "--redis-prefix", redis[1]],
        capture_output=True, text=True, timeout=120, cwd=store,
    )  # fmt: skip


def lines(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def token_of(proc) -> str:
    found = TOKEN.search(proc.stderr)
    assert found, proc.stderr
    return found.group(1)


def doc_id(site_url: str, name: str) -> str:
    return cluster_id_for("", url_key(f"{site_url}/book/{name}"))


def apply(index: dict[str, dict], feed: list[dict]) -> dict[str, dict]:
    """An index keyed by document_id following the changes."""
    index = dict(index)
    for change in feed:
        if change["op"] == "delete":
            del index[change["document_id"]]
        else:
            index[change["document_id"]] = {f: change[f] for f in HELD}
    return index


class Export(list):
    """The records of the first export (``chunks``: of the first ``export --chunks``)."""

    chunks: list[dict]


def held(records: list[dict]) -> dict[str, dict]:
    return {r["document_id"]: {f: r[f] for f in HELD} for r in records}


@pytest.fixture(scope="module", params=["leveldb", "redis", "leveldb-chunks"])
def recrawl(request, tmp_path_factory):
    """(the site's URL, a function running ``scrapy dedup`` on the crawl's store, the first
    export's records and token)"""
    settings = {"DEDUP_REVISIT_AFTER": 0, "DEDUP_CHUNKS": request.param.endswith("chunks")}
    redis = None
    if request.param == "redis":
        server = request.getfixturevalue("redis_single")
        prefix = f"test:{uuid.uuid4().hex[:12]}"
        settings.update(DEDUP_STORE=server.url, DEDUP_REDIS_PREFIX=prefix)
        redis = (server.url, prefix)
    tmp_path = tmp_path_factory.mktemp(f"changes-{request.param}")
    store = tmp_path / "store"

    def cli(*args: str):
        return run(store if not redis else tmp_path, *args, redis=redis)

    def crawled(site) -> None:
        crawl(site, tmp_path, settings)
        if redis:  # a Redis store is one several processes may share: settled on demand
            assert cli("settle").returncode == 0

    write_book(tmp_path / "site")
    with FileSite(tmp_path / "site") as site:
        crawled(site)
        first = cli("export")
        first_chunks = cli("export", "--chunks")
        take_over(tmp_path / "site")
        crawled(site)
    before = Export(lines(first))
    before.chunks = lines(first_chunks)
    return site.url, cli, before, token_of(first)


def test_the_changes_since_an_export_are_the_pages_changed_added_deleted_and_taken_over(recrawl):
    url, cli, before, token = recrawl
    changes = lines(cli("export", "--changes-since", token))
    assert [(c["op"], c["reason"], c["document_id"], c.get("into")) for c in changes] == [
        *sorted(
            [
                ("delete", "gone", doc_id(url, "s2.html"), None),
                ("delete", "merged", doc_id(url, "s3.html"), doc_id(url, "s5.html")),
            ],
            key=lambda c: c[2],
        ),
        *sorted(
            [
                ("upsert", "updated", doc_id(url, "s1.html"), None),
                ("upsert", "new", doc_id(url, "s4.html"), None),
                ("upsert", "re-represented", doc_id(url, "s5.html"), None),
            ],
            key=lambda c: c[2],
        ),
    ]
    after = lines(cli("export"))
    # an index of the first export that applies the changes holds the second export
    assert apply(held(before), changes) == held(after)
    assert len(after) == 5  # the table of contents, the part, s1, s4, and s5 with s3


def test_a_token_stays_good_across_full_settles_and_the_latest_one_has_no_changes(recrawl):
    url, cli, before, token = recrawl
    expected = lines(cli("export", "--changes-since", token))
    latest = cli("export")
    full = cli("settle", "--full")
    assert full.returncode == 0 and "(6 settled again)" in full.stdout
    assert lines(cli("export", "--changes-since", token)) == expected
    now = cli("export", "--changes-since", token_of(latest))
    assert lines(now) == [] and token_of(now) == token_of(latest)


def test_a_token_the_store_never_gave_is_a_one_line_error_and_writes_nothing(recrawl, tmp_path):
    url, cli, before, token = recrawl
    out = tmp_path / "out.jsonl"
    for bad in ("nonsense", "00000000-1", token.rsplit("-", 1)[0] + "-99"):
        proc = cli("export", "--changes-since", bad, "-o", str(out))
        assert proc.returncode == 1 and not out.exists()
        said = (f"scrapy dedup: unknown change token {bad!r}: this store's tokens look like {token.split('-')[0]}-2; "
                "an index made from another store, or from this one before a `scrapy dedup repair`, needs a full export\n")
        assert proc.stderr == said


def chunks_held(records: list[dict]) -> dict[tuple[str, str], str]:
    """What an index of chunks holds of a full ``export --chunks``: each chunk of each document."""
    return {(d["document_id"], d["chunk_id"]): r["text"] for r in records for d in r["documents"]}


def apply_chunks(index: dict[tuple[str, str], str], feed: list[dict]) -> dict[tuple[str, str], str]:
    """An index of chunks keyed by (document_id, chunk_id) following the changes: a document's
    chunks are replaced by those of its upsert line."""
    index = dict(index)
    for change in feed:
        for key in [k for k in index if k[0] == change["document_id"]]:
            del index[key]
        for chunk in change.get("chunks") or ():
            index[(change["document_id"], chunk["chunk_id"])] = chunk["text"]
    return index


def test_an_index_of_chunks_that_applies_the_changes_holds_the_chunks_of_a_full_export(recrawl):
    url, cli, before, token = recrawl
    changes = lines(cli("export", "--changes-since", token, "--chunks"))
    documents = lines(cli("export", "--changes-since", token))
    # the same documents change, whole or in chunks
    assert [(c["op"], c["reason"], c["document_id"]) for c in changes] == [
        (c["op"], c["reason"], c["document_id"]) for c in documents
    ]
    for change in changes:
        if change["op"] == "upsert":
            assert "text" not in change and change["chunks"]
            assert all(c["text"] and c["content_hash"] for c in change["chunks"])
    first = chunks_held(before.chunks)
    after = chunks_held(lines(cli("export", "--chunks")))
    assert apply_chunks(first, changes) == after
    # the chunks of the documents that did not change are the index's already
    unchanged = {k for k in after if k[0] not in {c["document_id"] for c in changes}}
    assert unchanged and all(first[k] == after[k] for k in unchanged)


# -- the history itself, on the memory backend ------------------------------------------


def page_record(key: str, represented_by: str | None = None, content: str = "c") -> UrlRecord:
    """A settled page: in the document its representative (``represented_by``, else itself) names."""
    return UrlRecord(key, key, cluster_id=cluster_id_for("", represented_by or key), content_hash=content)


@pytest.fixture
def memory():
    store = MemoryStore("mem-changes", {"test": 1})
    try:
        yield store
    finally:
        store.close()
        MemoryStore.discard("mem-changes")


def put(store: MemoryStore, *records: UrlRecord) -> None:
    with store.batch() as batch:
        for r in records:
            batch.put_url(r)


def test_the_history_says_what_changed_since_each_token_on_the_memory_backend(memory):
    a, b, c, d = (f"http://h/{n}" for n in "abcd")
    put(memory, page_record(a), page_record(b), page_record(c), page_record(d, c, "c2"))
    assert changes.record(memory) == 1
    first = changes.token(memory)
    assert changes.since(memory, first).upserts == []
    # a changes, b goes, e comes, and f takes c's document (with d) over
    gone = UrlRecord(b, b, status="deleted")
    e, f = "http://h/e", "http://h/f"
    put(memory, page_record(a, content="a2"), gone, page_record(e), page_record(f), page_record(c, f), page_record(d, f))
    # not settled since: no token, and no partial feed
    assert changes.token(memory) is None
    with pytest.raises(changes.ChangeTokenError, match=r"changed since the store was last settled"):
        changes.since(memory, first)
    assert changes.record(memory) == 2
    second = changes.token(memory)
    since = changes.since(memory, first)
    doc = lambda key: cluster_id_for("", key)  # noqa: E731
    assert since.deletes == sorted([(doc(b), "gone", None), (doc(c), "merged", doc(f))])
    assert since.upserts == sorted([(doc(a), "updated"), (doc(e), "new"), (doc(f), "re-represented")])
    assert since.token == second
    # nothing changed: no new generation, and nothing since the latest token
    assert changes.record(memory) == 2
    assert changes.since(memory, second).upserts == changes.since(memory, second).deletes == []
    # b comes back: new to an index that followed the deletion, an upsert for one that did not
    put(memory, page_record(b))
    assert changes.record(memory) == 3
    assert changes.since(memory, second).upserts == [(doc(b), "new")]
    assert (doc(b), "new") in changes.since(memory, first).upserts
    assert doc(b) not in {d for d, _, _ in changes.since(memory, first).deletes}


def test_a_store_without_history_or_another_stores_token_is_refused(memory):
    with pytest.raises(changes.ChangeTokenError, match="no change history yet"):
        changes.since(memory, "0123abcd-1")
    put(memory, page_record("http://h/a"))
    changes.record(memory)
    token = changes.token(memory)
    for bad in ("0123abcd-1", token + "0", token.replace("-", "-x"), "", "-1"):
        with pytest.raises(changes.ChangeTokenError, match="unknown change token"):
            changes.since(memory, bad)


def test_a_document_that_gains_a_url_variant_or_a_redirect_is_updated(memory):
    a, b = "http://h/a", "http://h/b"
    put(memory, page_record(a), page_record(b))
    changes.record(memory)
    first = changes.token(memory)
    doc = lambda key: cluster_id_for("", key)  # noqa: E731
    # a's document gains a URL variant (an export lists it among its sources)
    with memory.batch() as batch:
        batch.count_variant("http://h/a?utm=x", a, 1.0)
    changes.record(memory)
    assert changes.since(memory, first).upserts == [(doc(a), "updated")]
    second = changes.token(memory)
    # seen again: the same source, no change
    with memory.batch() as batch:
        batch.count_variant("http://h/a?utm=x", a, 2.0)
    changes.record(memory)
    assert changes.since(memory, second).upserts == []
    # b's document gains a redirect to it
    put(memory, UrlRecord("http://h/old", "http://h/old", status="redirect", duplicate_of=b))
    changes.record(memory)
    assert changes.since(memory, second).upserts == [(doc(b), "updated")]


def test_a_repaired_store_refuses_the_tokens_of_before_and_starts_its_history_again(tmp_path):
    from scrapy_dedup.store.leveldb import LevelDBStore
    from scrapy_dedup.store.leveldb.repair import repair_store

    path = str(tmp_path / "store")
    store = LevelDBStore(path, {"test": 1})
    put(store, page_record("http://h/a"), page_record("http://h/b"))
    changes.record(store)
    before = changes.token(store)
    store.close()
    repair_store(path)
    with LevelDBStore.open_existing(path) as store:
        with pytest.raises(changes.ChangeTokenError, match=r"no change history yet \(a `scrapy dedup repair` starts"):
            changes.since(store, before)
        changes.record(store)
        again = changes.token(store)
        assert again != before and changes.since(store, again).upserts == []
        # the token of before the repair: what to do is said
        with pytest.raises(changes.ChangeTokenError, match="before a `scrapy dedup repair`, needs a full export"):
            changes.since(store, before)


@pytest.mark.parametrize("backend", ["leveldb", "redis_single", "redis_cluster"])
def test_a_document_that_gains_a_redirect_is_upserted_with_it_in_its_sources(backend, request, tmp_path):
    settings: dict = {"DEDUP_REVISIT_AFTER": 0}
    redis = None
    if backend != "leveldb":
        server = request.getfixturevalue(backend)
        prefix = f"test:{uuid.uuid4().hex[:12]}"
        settings.update(DEDUP_STORE=server.url, DEDUP_REDIS_PREFIX=prefix)
        redis = (server.url, prefix)

    def cli(*args: str):
        return run(tmp_path / "store" if not redis else tmp_path, *args, redis=redis)

    def crawled(site) -> None:
        crawl(site, tmp_path, settings)
        if redis:
            assert cli("settle").returncode == 0

    write_book(tmp_path / "site")
    with MovingSite(tmp_path / "site") as site:
        crawled(site)
        first = cli("export")
        # s2 moves into s1: its URL redirects there, and s1's document gains it
        (tmp_path / "site/book/s2.html").unlink()
        site.moved["/book/s2.html"] = "/book/s1.html"
        crawled(site)
    feed = lines(cli("export", "--changes-since", token_of(first)))
    after = lines(cli("export"))
    s1 = next(d for d in after if d["document_id"] == doc_id(site.url, "s1.html"))
    assert {"url": f"{site.url}/book/s2.html", "reason": "redirect"} in s1["sources"]
    assert [(c["op"], c["reason"], c["document_id"]) for c in feed] == [
        ("delete", "gone", doc_id(site.url, "s2.html")),
        ("upsert", "updated", doc_id(site.url, "s1.html")),
    ]
    assert apply(held(lines(first)), feed) == held(after)
