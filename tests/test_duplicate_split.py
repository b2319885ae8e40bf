"""The exact/near split is one definition: the settle stats, ``summary`` and the HTML report agree.

A duplicate is exact when its text is its document's representative's, near otherwise
(records.duplicate_reason). The crawl's ``dedup/doc/*`` count its online decisions, made as the
pages arrive; ``dedup/settle/*`` count the settled store's split, which is what the reports read.
The site is a chain of pages, so that they are decided in order:

- ``a``, then ``a-copy`` (its exact copy), then ``a-longer`` (``a`` and one more paragraph): the
  longer text takes over as representative, and ``a-copy``, counted exact when it was decided,
  is a near duplicate of the new representative;
- ``b`` (the longest), ``b-short`` (near), then ``b-short-copy``: an exact copy of a member, not
  of the representative, so a near duplicate;
- ``c`` and ``c-copy``: plain exact copies;
- ``chain-c``, ``chain-b``, ``chain-a``: a chain A~B~C with A and C apart (test_settle's), each
  longer than the one before: online, B takes C's cluster over and A takes B's, C a member near B
  only; settled, C is a document of its own, so the online and settled splits differ.

Every page also links to its own ``#anchors``: another anchor of the same page is neither a
URL variant nor a duplicate.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

from local_site import LocalSite
from test_settle import chain_texts
from testing import run_crawl

from scrapy_dedup.core.urls import url_key
from scrapy_dedup.decide.settle import SETTLED_META
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import put_meta

random.seed(36)
WORDS = [
    "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(random.randint(3, 9))) for _ in range(400)
]


def paragraph(seed: int, words: int = 120) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


A, B, C, EXTRA = paragraph(1, 300), paragraph(2, 300), paragraph(3, 300), paragraph(4, 12)
B_SHORT = B.rsplit(" ", 12)[0] + "."
TEXTS = {
    "a": A, "a-copy": A, "a-longer": A + " " + EXTRA,
    "b": B, "b-short": B_SHORT, "b-short-copy": B_SHORT,
    "c": C, "c-copy": C,
    **{f"chain-{name}": chain_texts()[name] for name in ("c", "b", "a")},
}
CHAIN = list(TEXTS)


def page(path: str) -> tuple[int, dict, bytes]:
    name = path.strip("/") or "start"
    nxt = CHAIN[0] if name == "start" else (CHAIN[CHAIN.index(name) + 1] if name != CHAIN[-1] else None)
    links = f'<a href="/{nxt}">next</a>' if nxt else ""
    links += f'<a href="#top">top</a><a href="{path}#part-2">part 2</a>'
    body = f"<p>{TEXTS[name]}</p>" if name in TEXTS else "<p>Start.</p>"
    html = f"<html><head><title>{name}</title></head><body><main>{body}</main>{links}</body></html>"
    return 200, {}, html.encode()


def dedup(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "COLUMNS")}
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def card(html: str, label: str) -> int:
    found = re.search(rf"<b>([\d,]+)</b><span>{label}</span>", html)
    assert found, label
    return int(found.group(1).replace(",", ""))


def test_stats_summary_and_report_give_one_split(tmp_path):
    with LocalSite(page) as site:
        result = run_crawl(site.url + "/", tmp_path, {"CONCURRENT_REQUESTS": 1, "DEDUP_WORKERS": 0})
    store = str(tmp_path / "store")
    assert len(result.stats_with_prefix("dedup/doc/")) and result.stat("dedup/doc/extracted") == len(TEXTS) + 1
    online = (result.stat("dedup/doc/exact_duplicate"), result.stat("dedup/doc/near_duplicate"))
    stats = (result.stat("dedup/settle/exact_duplicate"), result.stat("dedup/settle/near_duplicate"))
    summary = json.loads(dedup("summary", "--store", store, "--format", "jsonl").stdout)
    dedup("report", "--store", store, "--html", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text("utf-8")
    report = (card(html, "exact duplicates"), card(html, "near duplicates"))
    # the settings the duplicates were found with: a near duplicate is confirmed by its Jaccard,
    # so it may lie further than DEDUP_MAX_DISTANCE bits from its representative
    said = "near duplicates at DEDUP_MIN_JACCARD 0.8, DEDUP_MAX_DISTANCE 3"
    assert said in dedup("summary", "--store", store).stdout and said in html
    # a store not settled yet (processes that closed at once) says the crawl's Jaccard all the same
    with LevelDBStore.open_existing(store) as opened:
        put_meta(opened, SETTLED_META, None)
    assert said in dedup("summary", "--store", store).stdout
    # a-copy and a against a-longer, b-short and b-short-copy against b, chain-b against chain-a:
    # near; c-copy: exact
    assert stats == (summary["exact_duplicates"], summary["near_duplicates"]) == report == (1, 5)
    # online each page was counted when it arrived: a-copy an exact copy of a, a-longer and
    # chain-a near duplicates of what they took over; settling then took chain-c out of chain-a's
    # cluster
    assert online == (2, 5)
    assert online != stats and result.stat("dedup/settle/revised") > 0
    # the duplicate rate counts URLs with content: 6 duplicates of the 12 (11 pages and the start page)
    host = site.url.split("://")[1]
    assert summary[f"host/{host}/duplicates"] == 6
    assert summary[f"host/{host}/duplicate_rate"] == round(6 / 12, 4)
    # links to anchors are not variants, nor in a store where an earlier version recorded them
    assert summary["aliases/url_variant"] == 0
    with LevelDBStore.open_existing(store) as opened:
        key = url_key(site.url + "/a")
        with opened.batch() as batch:
            batch.count_variant(site.url + "/a#part-2", key, 1.0, "seen")
            batch.count_variant(site.url + "/a?", key, 1.0, "seen")
    again = json.loads(dedup("summary", "--store", store, "--format", "jsonl").stdout)
    assert again["aliases/url_variant"] == again["urls_known"] - summary["urls_known"] == 1
    for listing in ("aliases", "provenance", "export"):
        out = dedup(listing, "--store", store, "--format", "jsonl").stdout
        assert "#" not in out and f'"{site.url}/a?"' in out, listing
