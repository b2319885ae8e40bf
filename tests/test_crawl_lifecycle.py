"""Re-crawl lifecycle on a small site of its own: a representative disappears or moves."""

from __future__ import annotations

from pathlib import Path

import pytest
from crawl_helpers import StoreView, exported, final_documents
from local_site import LocalSite
from testing import run_crawl

ARTICLE = " ".join(f"lifecycle{i % 71} chapter{i % 17} note{i % 5}." for i in range(300))
OTHER = " ".join(f"unrelated{i % 61} section{i % 19} remark{i % 7}." for i in range(300))


def page(body: str) -> bytes:
    return f"<html><head><title>t</title></head><body><article><p>{body}</p></article></body></html>".encode()


class Site:
    """/a and /b serve the same article (/a represents it); version 2 changes /a."""

    def __init__(self) -> None:
        self.version = 1

    def reply(self, path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/":
            links = "".join(f'<a href="{p}">{p}</a>' for p in ("/a", "/b", "/c"))
            return 200, {}, page(links)
        if path == "/b":
            return 200, {}, page(ARTICLE)
        if path == "/c":
            return 200, {}, page(OTHER)
        if path == "/a":
            if self.version == 1:
                return 200, {}, page(ARTICLE)
            if self.version == 2:
                return 404, {}, page("gone")
            return 301, {"Location": "/c"}, b""
        return 404, {}, page("not found")


@pytest.fixture
def site():
    state = Site()
    with LocalSite(lambda path: state.reply(path.split("?")[0])) as served:
        state.url = served.url
        yield state


SETTINGS = {"DEDUP_REVISIT_AFTER": 0, "DEDUP_WORKERS": 1}


@pytest.mark.parametrize("version, event", [(2, "deleted"), (3, "redirected")])
def test_the_next_member_takes_over_and_supersedes_the_lost_representative(site, tmp_path, version, event):
    first = run_crawl(site.url + "/", tmp_path, SETTINGS)
    standing = {i["url"] for i in final_documents(first.items)}
    assert site.url + "/a" in standing and site.url + "/b" not in standing  # /b duplicates /a
    settled_id = StoreView(tmp_path / "store").record(site.url + "/a").cluster_id
    site.version = version
    second = run_crawl(site.url + "/", tmp_path, SETTINGS)
    taken_over = [i for i in second.items if i["url"] == site.url + "/b"]
    assert len(taken_over) == 1
    assert taken_over[0]["dedup"]["status"] == "new"
    assert taken_over[0]["dedup"]["supersedes"] == [site.url + "/a"]
    # the member taking over carries the document id the settled store gave the copy it
    # supersedes (the first crawl's feed may have given it a provisional one)
    assert taken_over[0]["dedup"]["document_id"] == settled_id is not None
    assert second.stat(f"dedup/doc/{event}") == 1
    assert second.stat("dedup/doc/promoted") == 1
    store = StoreView(tmp_path / "store")
    assert store.clusters[store.record(site.url + "/b").cluster_id].representative == site.url + "/b"
    assert store.record(site.url + "/a").cluster_id is None


@pytest.mark.parametrize("version, event", [(2, "deleted"), (3, "redirected")])
def test_the_member_taking_over_reaches_a_crawl_spider_s_rule_callback(site, tmp_path, monkeypatch, version, event):
    # The tutorial's CrawlSpider dispatches every response on the rule its request carries in
    # meta; the take-over request, made by the store, must carry it too, or the callback raises
    # and the new representative's item never reaches the feed.
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent / "spiders"))
    settings = {**SETTINGS, "SPIDER_MODULES": "tutorial_spiders"}
    run_crawl(site.url + "/", tmp_path, settings, spider="tutorial")
    site.version = version
    second = run_crawl(site.url + "/", tmp_path, settings, spider="tutorial")
    assert second.stat("dedup/doc/promoted") == 1
    assert not [k for k in second.stats if k.startswith("spider_exceptions/")], second.log[-3000:]
    taken_over = [i for i in second.items if i["url"] == site.url + "/b"]
    assert len(taken_over) == 1
    assert taken_over[0]["dedup"]["supersedes"] == [site.url + "/a"]
    # what the gone or redirected request went through is not the take-over's: /b is no redirect target
    store = StoreView(tmp_path / "store")
    assert store.clusters[store.record(site.url + "/b").cluster_id].representative == site.url + "/b"
    (document,) = [d for d in exported(tmp_path / "store") if d["url"] == site.url + "/b"]
    assert [s["url"] for s in document["sources"]] == [site.url + "/b"]
