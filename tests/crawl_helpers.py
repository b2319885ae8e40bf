"""Shared helpers for the crawl tests: what a finished crawl left in the store, and the
``scrapy dedup`` commands that read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scrapy_dedup.core.urls import url_key
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import iter_aliases_of, iter_clusters, iter_urls, iter_variants, members_of


def dedup(store: Path, *args: str) -> subprocess.CompletedProcess:
    """``scrapy dedup ARGS --store STORE`` in a subprocess run beside the store (outside any
    project), with full-width tables whatever terminal runs the tests."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=store.parent,
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    )


def exported(store: Path, *args: str) -> list[dict]:
    """The records of ``scrapy dedup export ARGS`` of ``store`` (it must succeed)."""
    proc = dedup(store, "export", *args)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def crawled_page(page: str, out: Path, settings: dict) -> dict:
    """Serve ``page`` on 127.0.0.1, linked from a start page, crawl it with ``settings`` (the store
    in ``out/store``) and return its record of the export."""
    from local_site import LocalSite
    from testing import run_crawl

    def reply(path: str):
        if path == "/":
            return 200, {}, b'<html><head><title>Index</title></head><body><a href="/page.html">page</a></body></html>'
        if path == "/page.html":
            return 200, {}, page.encode()
        return 404, {}, b"not found"

    with LocalSite(reply) as site:
        run_crawl(f"{site.url}/", out, settings)
        url = f"{site.url}/page.html"
    [doc] = [r for r in exported(out / "store") if r["url"] == url]
    return doc


def final_documents(items: list[dict]) -> list[dict]:
    """Items still standing once every ``supersedes`` has been applied."""
    superseded = {url for item in items for url in item.get("dedup", {}).get("supersedes", [])}
    return [item for item in items if item["url"] not in superseded]


class StoreView:
    """The records of a crawl's store, by URL key."""

    def __init__(self, path: Path, host_rules: dict | None = None) -> None:
        self.host_rules = host_rules
        with LevelDBStore.open_existing(str(path)) as store:
            self.records = {r.key: r for r in iter_urls(store)}
            self.clusters = {c.cluster_id: c for c in iter_clusters(store)}
            self.members = {cid: members_of(store, cid) for cid in self.clusters}
            self.variants = dict(iter_variants(store))

    def key(self, url: str) -> str:
        return url_key(url, self.host_rules)

    def record(self, url: str):
        return self.records[self.key(url)]

    def representative_url(self, url: str) -> str:
        return self.clusters[self.record(url).cluster_id].rep_url

    def partition(self) -> dict[frozenset, str]:
        """Each cluster as (its members' keys) -> its representative's URL key.

        Keys, not fetched URLs: which variant of a key (``?PHPSESSID=...``) was fetched
        first depends on the fetch order.
        """
        return {frozenset(members): self.clusters[cid].representative for cid, members in self.members.items()}


def process_count_outcome(store) -> dict:
    """What must not depend on the process count: per URL key its status and the URL key
    of its cluster's representative; each cluster as (members, representative)."""
    clusters = {c.cluster_id: c for c in iter_clusters(store)}
    per_key = {}
    for record in iter_urls(store):
        cluster = clusters.get(record.cluster_id)
        # every spelling of the key, the one fetched and its variants: which spelling came first
        # (and so is the record's, the others variants) depends on fetch order, with one process
        # as with several; a link to an #anchor is its page (stores of earlier versions kept it)
        aliases = {(url.split("#", 1)[0], reason) for url, reason in iter_aliases_of(store, record.key)}
        spellings = tuple(sorted({record.url, *(url for url, _ in aliases)}))
        reasons = tuple(sorted({reason for url, reason in aliases if url != record.url}))
        per_key[record.key] = (record.kind, cluster.representative if cluster else None, spellings, reasons)
    partition = {frozenset(members_of(store, cid)): c.representative for cid, c in clusters.items()}
    return {"per_key": per_key, "partition": partition}


def tutorial_crawl(reply, out: Path, monkeypatch, settings: dict | None = None) -> tuple[str, object]:
    """Serve ``reply`` on 127.0.0.1 and crawl it with the tutorial's spider
    (``tests/spiders/tutorial_spiders.py``: a ``CrawlSpider`` yielding ``{url, title, html}`` for
    every page), with ``settings`` besides; returns the site's URL and the crawl's result (store
    in ``out/store``)."""
    from local_site import LocalSite
    from testing import run_crawl

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent / "spiders"))
    with LocalSite(reply) as site:
        settings = {"DEDUP_WORKERS": 1, "SPIDER_MODULES": "tutorial_spiders", **(settings or {})}
        return site.url, run_crawl(site.url + "/", out, settings, spider="tutorial")
