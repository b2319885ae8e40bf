"""Near-duplicate decisions of several crawl processes at the same moment, over one Redis store.

A local site serves families of near-duplicate pages (one word edited per member) linked from
one start page; or, as ``copies``, families of exact copies that are never compared by
distance: identical PDFs, and identical pages too short for the near-duplicate indexes. Four plain Scrapy processes start with that same start page at once (the
server answers it only when all four have asked), so each family's members are fetched by
different processes at about the same time. Two near duplicates decided at the same moment may
both be kept by the crawl (provisional); however the pages fall, once ``scrapy dedup settle``
has run the store must be as one process on LevelDB leaves it: one cluster per family with the
same representative. The start page, whose URL key each decision holds, is emitted once.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections import Counter

import pytest
from crawl_helpers import final_documents
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import iter_clusters, members_of
from scrapy_dedup.store.redis.functions import connect, primaries
from scrapy_dedup.store.redis.store import RedisStore

FAMILIES = 40
MEMBERS = 4
PROCESSES = 4
WORDS = 360
VOCABULARY = (
    "index query table column row join plan vacuum lock page buffer cache replica stream backup "
    "restore role grant schema type cast function trigger rule view sequence cursor commit abort"
).split()


def family_words(family: int) -> list[str]:
    rng = random.Random(f"family-{family}")
    return [f"{rng.choice(VOCABULARY)}{rng.randrange(1000)}" for _ in range(WORDS)]


def member_text(family: int, member: int) -> str:
    words = family_words(family)
    spot = 40 + 70 * member  # one word edited per member, each at its own place, same length
    words[spot] = "q" + words[spot][1:]
    return "".join(f"<p>{' '.join(words[j:j + 30])}.</p>" for j in range(0, WORDS, 30))


def html(title: str, body: str, links: list[str]) -> bytes:
    nav = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><article>{body}</article><footer><ul>{nav}</ul></footer></body></html>"
    ).encode()


def copy_page(family: int) -> tuple[dict[str, str], bytes]:
    """A member of a family of exact copies: an even family's is a PDF, an odd family's a page
    with fewer words than DEDUP_MIN_TOKENS."""
    if family % 2 == 0:
        return {"Content-Type": "application/pdf"}, b"%PDF-1.4\n%% family " + str(family).encode() + b"\n" * 64
    words = " ".join(family_words(family)[:12])
    return {}, html(f"Family {family}", f"<p>Opening hours of branch {family}: {words}.</p>", ["/start"])


class FamilySite:
    """The start page (answered once ``gate`` requests for it have arrived) and the families:
    near duplicates, or with ``copies`` exact copies (:func:`copy_page`)."""

    def __init__(self, gate: int, copies: bool = False) -> None:
        self.copies = copies
        self.barrier = threading.Barrier(gate, timeout=60)
        self.hits: Counter = Counter()
        #: the members of a family are answered together, once all were asked for (or after a
        #: few seconds), so that the processes that fetched them decide them at the same moment
        self.families: dict[int, threading.Barrier] = {}
        self.lock = threading.Lock()
        self.served = LocalSite(self._reply)
        self.url = self.served.url

    def _reply(self, path: str) -> tuple[int, dict[str, str], bytes]:
        parts = path.strip("/").split("/")
        self.hits[path] += 1
        if path == "/start":
            try:
                self.barrier.wait()  # every process decides the start page at the same moment
            except threading.BrokenBarrierError:
                pass
            links = [f"/fam/{f}/{m}" for f in range(FAMILIES) for m in range(MEMBERS)]
            return 200, {}, html("Start", member_text(10_000, 0), links)
        if len(parts) == 3 and parts[0] == "fam" and parts[1].isdigit() and parts[2].isdigit():
            family, member = int(parts[1]), int(parts[2])
            with self.lock:
                barrier = self.families.setdefault(family, threading.Barrier(MEMBERS, timeout=5))
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass
            if self.copies:
                return 200, *copy_page(family)
            return 200, {}, html(f"Family {family}", member_text(family, member), ["/start"])
        return 404, {}, b"not found"

    def close(self) -> None:
        self.served.close()


@pytest.fixture
def family_site(request):
    gate, copies = request.param if isinstance(request.param, tuple) else (request.param, False)
    site = FamilySite(gate, copies)
    yield site
    site.close()


SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 16, "DEDUP_LOGSTATS_INTERVAL": 0}


def partition(store) -> dict[frozenset, str]:
    return {frozenset(members_of(store, c.cluster_id)): c.representative for c in iter_clusters(store)}


def family_of(url: str) -> str:
    parts = url.split("/")
    return parts[-2] if "/fam/" in url else "start"


def crawl_together(start: str, tmp_path, settings: dict) -> list:
    results: list = [None] * PROCESSES

    def crawl(i: int) -> None:
        results[i] = run_crawl(start, tmp_path / f"p{i}", {**SETTINGS, **settings}, timeout=400)

    threads = [threading.Thread(target=crawl, args=(i,)) for i in range(PROCESSES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("family_site", [1, (1, True)], indirect=True, ids=["near", "copies"])
def test_one_process_on_leveldb_keeps_one_page_per_family(family_site, tmp_path):
    """The reference the shared crawls are held to: the families are duplicates indeed."""
    result = run_crawl(family_site.url + "/start", tmp_path, SETTINGS)
    kept = Counter(family_of(item["url"]) for item in final_documents(result.items))
    assert kept == Counter({**{str(f): 1 for f in range(FAMILIES)}, "start": 1})
    with LevelDBStore.open_existing(str(tmp_path / "store")) as store:
        clusters = partition(store)
    assert sorted(len(members) for members in clusters) == [1] + [MEMBERS] * FAMILIES


@pytest.mark.parametrize("kind", ["single", "cluster"])
@pytest.mark.parametrize("family_site", [PROCESSES, (PROCESSES, True)], indirect=True, ids=["near", "copies"])
def test_processes_deciding_duplicates_at_once_keep_one_per_family(family_site, kind, tmp_path, request):
    """Near duplicates, and exact copies that are never compared by distance (PDFs, short
    pages): whatever the crawl kept provisionally, the settled clusters are LevelDB's."""
    server = request.getfixturevalue(f"redis_{kind}")
    start = family_site.url + "/start"
    # the reference: one process on LevelDB (the site answers its start page at once: a barrier of one)
    family_site.barrier = threading.Barrier(1)
    run_crawl(start, tmp_path / "leveldb", SETTINGS)
    with LevelDBStore.open_existing(str(tmp_path / "leveldb" / "store")) as store:
        expected = partition(store)
    family_site.barrier = threading.Barrier(PROCESSES, timeout=60)
    family_site.hits.clear()
    family_site.families.clear()

    for node in primaries(connect(server.url)):
        node.flushdb()  # the crawls use the default key prefix (dedup:site)
    results = crawl_together(start, tmp_path / kind, {"DEDUP_STORE": server.url})
    assert all(r.returncode == 0 for r in results)
    items = [item for r in results for item in r.items]

    # every family kept at least one page (two decided at once may both be kept until settled)
    kept = Counter(family_of(item["url"]) for item in final_documents(items))
    assert set(kept) == {*map(str, range(FAMILIES)), "start"}, kept
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "settle", "--store", server.url, "--redis-prefix", "dedup:site"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    with RedisStore.open_existing(server.url, prefix="dedup:site") as store:
        got = partition(store)
    assert got == expected, f"{kind}: settled clusters differ from one process on LevelDB"
    # the start page was decided by every process at once and emitted by one
    starts = [item for item in items if item["url"] == start]
    assert len(starts) == 1, [item["dedup"]["status"] for item in starts]
    assert starts[0]["dedup"]["status"] == "new"
    # every family page was fetched once, by one process (the frontier's atomic mark)
    assert family_site.hits == Counter({"/start": PROCESSES, **{f"/fam/{f}/{m}": 1 for f in range(FAMILIES) for m in range(MEMBERS)}})
