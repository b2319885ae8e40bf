"""One settled corpus per set of pages: crawls of one site in every order, at concurrency 1 and
16, killed and resumed, and an ingest of the same pages end with the same export (every field
but the fetch times), the same ``export --chunks`` and the same canonical URL for every page.

The site's pages form chains of near duplicates (D~A~B~C~E, none near the page two steps
away; see test_settle.py), so a page decided online joins whichever neighbour it met first.
The start page lists them in the order the test asks for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from itertools import permutations
from pathlib import Path

import pytest
from crawl_helpers import StoreView, dedup
from local_site import LocalSite
from test_settle import TEXTS
from testing import EXAMPLE_PROJECT, run_crawl

from scrapy_dedup.store.records import iter_clusters, iter_urls
from scrapy_dedup.store.redis.functions import connect, primaries
from scrapy_dedup.store.redis.store import RedisStore

NAMES = sorted(TEXTS)
SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}


def html(name: str) -> str:
    words = TEXTS[name].split()
    body = "".join(f"<p>{' '.join(words[i:i + 40])}</p>" for i in range(0, len(words), 40))
    return f"<!DOCTYPE html><html><head><title>{name}</title></head><body><article>{body}</article></body></html>"


class Site:
    """``/start/<names>``: links to every page in that order (and with a fragment);
    ``/p/<name>``: a page of the chain. ``delay``: seconds each page takes."""

    delay = 0.0
    served = 0

    def reply(self, path: str):
        if path.startswith("/start/"):
            order = path[len("/start/"):].split(",")
            # every page linked twice, with and without a fragment, which first depending on the order
            spellings = [(f"/p/{n}#top", f"/p/{n}") if i % 2 else (f"/p/{n}", f"/p/{n}#top") for i, n in enumerate(order)]
            links = "".join(f'<li><a href="{href}"></a></li>' for pair in spellings for href in pair)
            return 200, {}, f"<html><body><ul>{links}</ul></body></html>".encode()
        if path.startswith("/p/") and path[3:] in TEXTS:
            self.served += 1
            time.sleep(self.delay)
            return 200, {}, html(path[3:]).encode()
        return 404, {}, b"not found"


@pytest.fixture(scope="module")
def site():
    state = Site()
    with LocalSite(state.reply) as served:
        state.url = served.url
        yield state


def settled(out: Path, redis_url: str | None = None) -> dict:
    """The settled output of the store in ``out`` (or of the crawl on the Redis server at
    ``redis_url``): the export without fetch times, and every page's canonical URL (what
    ``lookup`` answers)."""
    where = ["--store", redis_url, "--redis-prefix", "dedup:site"] if redis_url else ["--store", str(out / "store")]
    proc = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "export", *where], capture_output=True, text=True,
                          timeout=120, cwd=out)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    for r in records:
        del r["first_seen"], r["last_seen"]
    proc = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "export", "--chunks", *where], capture_output=True,
                          text=True, timeout=120, cwd=out)
    assert proc.returncode == 0, proc.stderr
    chunks = sorted(proc.stdout.splitlines())
    assert chunks
    if redis_url:
        with RedisStore.open_existing(redis_url, prefix="dedup:site") as store:
            records_by_key = {r.key: r for r in iter_urls(store)}
            clusters = {c.cluster_id: c for c in iter_clusters(store)}
    else:
        view = StoreView(out / "store")
        records_by_key, clusters = view.records, view.clusters
    canonical = {
        key: (clusters[r.cluster_id].rep_url, r.cluster_id, r.reason, r.duplicate_of)
        for key, r in records_by_key.items()
        if r.has_content
    }
    return {"export": sorted(records, key=lambda r: r["document_id"]), "canonical": canonical, "chunks": chunks}


def crawl(site: Site, out: Path, order: list[str], **settings) -> dict:
    result = run_crawl(f"{site.url}/start/{','.join(order)}", out, {**SETTINGS, **settings})
    assert result.stat("dedup/settle/documents") == len(TEXTS)
    return {**settled(out), "revised": result.stat("dedup/settle/revised")}


@pytest.fixture(scope="module")
def reference(site, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    outcome = crawl(site, out, NAMES)
    assert outcome["revised"] > 0  # the crawl's own decisions were revised: there was something to settle
    check = dedup(out / "store", "check")  # the settled store keeps every invariant of the store
    assert check.returncode == 0, check.stdout + check.stderr
    return outcome


@pytest.mark.parametrize("chain", ["".join(p) for p in permutations("abc")])
def test_every_order_of_the_chain_settles_alike(site, reference, tmp_path, chain):
    order = ["d", *chain, "x", "b2", "e"]
    outcome = crawl(site, tmp_path, order)
    assert outcome["export"] == reference["export"]
    assert outcome["canonical"] == reference["canonical"]
    assert outcome["chunks"] == reference["chunks"]


def test_reverse_order_and_concurrency_16_settle_alike(site, reference, tmp_path):
    outcomes = [
        crawl(site, tmp_path / "reverse", NAMES[::-1]),
        crawl(site, tmp_path / "c16", NAMES, CONCURRENT_REQUESTS=16, DEDUP_WORKERS=2),
    ]
    for outcome in outcomes:
        assert outcome["export"] == reference["export"]
        assert outcome["canonical"] == reference["canonical"]
        assert outcome["chunks"] == reference["chunks"]
    assert len(reference["export"]) < len(TEXTS)


def test_an_ingest_of_the_same_pages_settles_alike(site, reference, tmp_path):
    lines = [json.dumps({"url": f"{site.url}/p/{n}", "html": html(n)}) for n in ["e", "c", "x", "a", "b2", "b", "d"]]
    corpus = tmp_path / "pages.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = dedup(tmp_path / "store", "ingest", str(corpus))
    assert proc.returncode == 0, proc.stderr
    proc = dedup(tmp_path / "store", "settle")
    assert proc.returncode == 0, proc.stderr
    # the ingest settled the store when it ended: nothing was decided since
    assert f"settled {len(TEXTS)} documents in 3 clusters (0 settled again)" in proc.stdout
    proc = dedup(tmp_path / "store", "settle", "--full")
    assert proc.returncode == 0, proc.stderr
    assert f"settled {len(TEXTS)} documents in 3 clusters ({len(TEXTS)} settled again): 0 provisional" in proc.stdout
    outcome = settled(tmp_path)
    # the file has no links: the spellings of a URL that only links carry are the crawl's alone
    crawled = [{**r, "sources": [s for s in r["sources"] if s["reason"] != "url_variant"]} for r in reference["export"]]
    assert outcome["export"] == crawled
    assert outcome["canonical"] == reference["canonical"]


def test_a_crawl_killed_and_resumed_settles_alike(site, reference, tmp_path):
    """SIGKILL while the fourth page is served, then a run to the end over the same store."""
    items = tmp_path / "killed.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start_url={site.url}/start/{','.join(NAMES[::-1])}",
           "-O", str(items)]
    for name, value in {**SETTINGS, "DEDUP_STORE": str(tmp_path / "store")}.items():
        cmd += ["-s", f"{name}={value}"]
    env = dict(os.environ, SCRAPY_SETTINGS_MODULE="demo_project.settings")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLE_PROJECT), env.get("PYTHONPATH")]))
    site.delay, site.served = 0.5, 0
    try:
        proc = subprocess.Popen(cmd, cwd=EXAMPLE_PROJECT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if site.served >= 4:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the crawl ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        site.delay = 0.0
    decided = sum(r.has_content for r in StoreView(tmp_path / "store").records.values())
    assert 0 < decided < len(TEXTS)
    # what the export says of the killed crawl's store: finish the crawl, which settles it
    partial = dedup(tmp_path / "store", "export", "-o", str(tmp_path / "partial.jsonl"))
    assert partial.returncode == 0, partial.stderr
    assert "no change token: the last crawl stopped before its end" in partial.stderr, partial.stderr
    outcome = crawl(site, tmp_path, NAMES)
    assert outcome["export"] == reference["export"]
    assert outcome["canonical"] == reference["canonical"]
    assert outcome["chunks"] == reference["chunks"]



@pytest.mark.parametrize("processes, kind", [(1, "single"), (2, "single"), (4, "single"), (4, "cluster")])
def test_processes_sharing_a_redis_store_settle_alike(site, reference, tmp_path, request, processes, kind):
    """1, 2 or 4 crawl processes over one Redis store (one server, or a 3-master cluster), each
    started with its own order of the pages, then ``scrapy dedup settle``: the export of one
    process on LevelDB."""
    server = request.getfixturevalue(f"redis_{kind}")
    for node in primaries(connect(server.url)):
        node.flushdb()  # the crawls use the default key prefix (dedup:site)
    orders = [NAMES, NAMES[::-1], ["d", "c", "b", "x", "a", "b2", "e"], ["b", "e", "x", "a", "c", "d", "b2"]]
    results: list = [None] * processes

    def run(i: int) -> None:
        start = f"{site.url}/start/{','.join(orders[i])}"
        results[i] = run_crawl(start, tmp_path / f"p{i}", {**SETTINGS, "DEDUP_STORE": server.url}, timeout=300)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and r.returncode == 0 for r in results)
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "settle", "--store", server.url, "--redis-prefix", "dedup:site"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"settled {len(TEXTS)} documents" in proc.stdout
    outcome = settled(tmp_path, server.url)
    assert outcome["export"] == reference["export"]
    assert outcome["canonical"] == reference["canonical"]
    assert outcome["chunks"] == reference["chunks"]


def test_document_ids_stay_across_a_re_crawl(site, reference, tmp_path):
    """Every page fetched again, in another order: each document keeps its id (its
    representative stayed), and nothing is revised."""
    crawl(site, tmp_path, NAMES[::-1])
    again = crawl(site, tmp_path, NAMES, DEDUP_REVISIT_AFTER=0)
    assert again["revised"] == 0
    assert [r["document_id"] for r in again["export"]] == [r["document_id"] for r in reference["export"]]
    assert again["export"] == reference["export"]
