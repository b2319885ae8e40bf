"""``scrapy dedup lookup`` of a near duplicate gives the Jaccard it was merged on.

A near duplicate is merged on the Jaccard of the two texts whatever their SimHash distance, and a
store's summary names ``DEDUP_MAX_DISTANCE 3``: on python-sqlalchemy-doc 1.4.46, ``lookup`` said
``near_duplicate, distance 12`` and nothing of the 0.87 that merged the page. It says both now, the
figure ``clusters`` gives for the same member.
"""

from __future__ import annotations

import json
import random

from crawl_helpers import dedup
from local_site import LocalSite
from test_calibrate_far_pairs import VOCABULARY, _page
from testing import run_crawl


def test_lookup_of_a_near_duplicate_says_its_jaccard(tmp_path):
    rng = random.Random(0)
    words = [rng.choice(VOCABULARY) for _ in range(400)]
    edited = list(words)
    for i in range(20, 400, 60):
        edited[i] = rng.choice(VOCABULARY) + "x"
    pages = {"/a.html": _page("Guide", words), "/b.html": _page("Guide", edited)}
    index = b'<html><body><a href="/a.html">a</a> <a href="/b.html">b</a></body></html>'

    def reply(path: str):
        if path == "/":
            return 200, {}, index
        return (200, {}, pages[path]) if path in pages else (404, {}, b"not found")

    with LocalSite(reply) as site:
        run_crawl(f"{site.url}/", tmp_path)
    store = tmp_path / "store"
    clusters = [json.loads(line) for line in dedup(store, "clusters", "--format", "jsonl").stdout.splitlines()]
    [member] = [m for c in clusters for m in c["members"] if m["reason"] == "near_duplicate"]
    assert 0.8 <= member["jaccard"] < 1

    answer = json.loads(dedup(store, "lookup", member["url"], "--format", "jsonl").stdout)
    [hop] = answer["path"]
    assert hop["reason"] == "near_duplicate" and hop["jaccard"] == member["jaccard"]
    text = dedup(store, "lookup", member["url"]).stdout
    expected = f"-> near_duplicate, distance {member['distance']}, Jaccard {member['jaccard']:.2f}: nearly the same"
    assert expected in text, text
    # a canonical URL has no such hop
    canonical = json.loads(dedup(store, "lookup", clusters[0]["representative"], "--format", "jsonl").stdout)
    assert canonical["path"] == []
