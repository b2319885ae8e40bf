"""Merge without loss: what a merged page has that its representative lacks stays in the export.

Three near-duplicate pages share 15 paragraphs. ``/p/a`` adds a long paragraph of its own (so it is
the longest, and represents the three); ``/p/b`` adds ``ONLY_B``; ``/p/c`` adds ``ONLY_B`` too and
``ONLY_C``. The settled export carries ``ONLY_B`` once, with b's URL (the first member in URL-key
order), ``ONLY_C`` with c's, and no line a has. Crawled through the real CLI, in two orders, with and
without DEDUP_CHUNKS.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.core.merged import merged_passages

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}


def _paragraph(rng: random.Random, words: int) -> str:
    return " ".join(f"w{rng.randrange(5000)}" for _ in range(words))


_rng = random.Random(34)
SHARED = [_paragraph(_rng, 40) for _ in range(15)]
ONLY_A = _paragraph(_rng, 60)
ONLY_B = _paragraph(_rng, 20)
ONLY_C = _paragraph(_rng, 12)
PAGES = {
    "a": SHARED[:7] + [ONLY_A] + SHARED[7:],
    "b": SHARED + [ONLY_B],
    "c": SHARED[:3] + [ONLY_C] + SHARED[3:] + [ONLY_B],
}


def reply(path: str):
    if path.startswith("/start/"):
        links = "".join(f'<li><a href="/p/{name}">{name}</a></li>' for name in path[len("/start/"):].split(","))
        return 200, {}, f"<html><body><ul>{links}</ul></body></html>".encode()
    name = path[len("/p/"):]
    if path.startswith("/p/") and name in PAGES:
        body = "".join(f"<p>{p}</p>" for p in PAGES[name])
        page = f"<!DOCTYPE html><html><head><title>{name}</title></head><body><article>{body}</article></body></html>"
        return 200, {}, page.encode()
    return 404, {}, b"not found"


@pytest.fixture(scope="module")
def site():
    with LocalSite(reply) as served:
        yield served


def crawl(site: LocalSite, out: Path, order: str, **settings) -> tuple[list[dict], list[dict]]:
    run_crawl(f"{site.url}/start/{order}", out, {**SETTINGS, **settings})
    # (the start page, which lists the order, is a document of its own: left out)
    records = [r for r in exported(out / "store") if "/start/" not in r["url"]]
    for r in records:
        del r["first_seen"], r["last_seen"]
    return records, [c for c in exported(out / "store", "--chunks") if not any("/start/" in u for u in c["urls"])]


@pytest.fixture(scope="module", params=[False, True], ids=["texts", "chunks"])
def crawls(site, tmp_path_factory, request):
    """The same site crawled in two orders (at two concurrencies), DEDUP_CHUNKS off or on."""
    chunks = request.param
    out = tmp_path_factory.mktemp("merged")
    forward = crawl(site, out / "abc", "a,b,c", DEDUP_CHUNKS=chunks)
    backward = crawl(site, out / "cba", "c,b,a", DEDUP_CHUNKS=chunks, CONCURRENT_REQUESTS=16)
    return site, forward, backward


def test_a_members_own_paragraphs_go_with_the_document_once(crawls):
    site, (records, _), _ = crawls
    [doc] = [r for r in records if r["url"].endswith("/p/a")]
    assert {s["url"] for s in doc["sources"]} == {f"{site.url}/p/{n}" for n in "abc"}
    assert ONLY_A in doc["text"] and ONLY_B not in doc["text"]
    assert doc["merged_passages"] == [
        {"source_url": f"{site.url}/p/b", "text": ONLY_B, "start": doc_start(doc, "b"), "end": doc_start(doc, "b") + len(ONLY_B)},
        {"source_url": f"{site.url}/p/c", "text": ONLY_C, "start": doc_start(doc, "c"), "end": doc_start(doc, "c") + len(ONLY_C)},
    ]
    # nothing the representative has is carried again, and nothing twice
    carried = [p["text"] for r in records for p in r["merged_passages"]]
    assert not any(line in doc["text"] for text in carried for line in text.splitlines())
    assert len(carried) == len(set(carried))


def doc_start(doc: dict, name: str) -> int:
    """Where the member's own line starts in its text: the export's offsets point into it."""
    text = "\n".join(PAGES[name])
    line = ONLY_B if name == "b" else ONLY_C
    return text.index(line)


def test_export_chunks_find_the_merged_text_with_its_url(crawls):
    site, (_, chunks), _ = crawls
    found = {c["text"]: c for c in chunks}
    assert ONLY_B in found and ONLY_C in found
    [occurrence] = found[ONLY_B]["documents"]
    assert occurrence["source_url"] == f"{site.url}/p/b"
    assert found[ONLY_B]["urls"] == [f"{site.url}/p/a", f"{site.url}/p/b", f"{site.url}/p/c"]
    # the representative's own chunks point into its own text
    own = [o for c in chunks for o in c["documents"] if o["source_url"].endswith("/p/a")]
    assert own and all(o["start"] < o["end"] for o in own)
    texts = "".join(c["text"] for c in chunks)
    assert all(p in texts for p in SHARED) and texts.count(ONLY_B) == 1 and texts.count(SHARED[0]) == 1


def test_the_export_does_not_depend_on_the_order(crawls):
    site, forward, backward = crawls
    assert forward == backward


def test_merged_passages_keep_runs_and_skip_what_is_known():
    rep = "title\nshared one\nshared two"
    member = "title\nnew one\n---\nnew two\nmore two\nshared one\nnew three\nshared two\nNEW ONE"
    passages = merged_passages(rep, [("u1", member), ("u2", "new three\nnew four")])
    assert [(p.source_url, p.text) for p in passages] == [
        ("u1", "new one"), ("u1", "new two\nmore two"), ("u1", "new three"), ("u2", "new four")
    ]
    assert all(member[p.start : p.end] == p.text for p in passages if p.source_url == "u1")
