"""``scrapy dedup calibrate`` shows a pair merged on its Jaccard farther than k+3.

A near duplicate is merged on the Jaccard of the two texts whatever their SimHash distance (on
SQLAlchemy's example sources, two pages at distance 12 with J 0.87), so the pairs a person choosing
the thresholds most needs to read may lie beyond the table's k-2..k+3: they are listed at their own
distance, not left out.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from crawl_helpers import dedup
from local_site import LocalSite
from testing import run_crawl

VOCABULARY = [
    f"{head}{tail}"
    for head in ("lor", "pat", "ven", "mor", "kal", "sid", "tur", "bex", "nol", "fim", "gra", "hus")
    for tail in ("ane", "ito", "umo", "era", "ola", "ist", "ark", "ence")
]


def _page(title: str, words: list[str]) -> bytes:
    paragraphs = "".join(f"<p>{' '.join(words[i : i + 50])}.</p>" for i in range(0, len(words), 50))
    return f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1>{paragraphs}</main></body></html>".encode()


def crawl_far_pair(out: Path) -> tuple[Path, list[dict], dict]:
    """Crawl two pages one word in sixty apart (Jaccard about 0.85, their SimHashes far apart) into
    ``out/store``: the store, its ``clusters`` records, and the member merged on its Jaccard."""
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
        run_crawl(f"{site.url}/", out)
    store = out / "store"
    clusters = [json.loads(line) for line in dedup(store, "clusters", "--format", "jsonl").stdout.splitlines()]
    [merged] = [m for c in clusters for m in c["members"] if m["reason"] == "near_duplicate"]
    return store, clusters, merged


def test_a_pair_merged_beyond_k_plus_3_is_listed_at_its_distance(tmp_path):
    store, _, merged = crawl_far_pair(tmp_path)
    k = 3
    assert merged["distance"] > k + 3  # the case under test: merged, and beyond the table's range

    pairs = [json.loads(line) for line in dedup(store, "calibrate", "--format", "jsonl").stdout.splitlines()]
    assert [(p["distance"], p["merged"]) for p in pairs] == [(merged["distance"], True)]
    assert 0.8 <= pairs[0]["jaccard"] < 1
    table = dedup(store, "calibrate").stdout.splitlines()
    rows = [line.split() for line in table[4:] if line.strip() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [*range(k - 2, k + 4), merged["distance"]]
    assert rows[-1][1:5] == [">", "k", "1", "1"]
    assert f"distance {merged['distance']}  (beyond k = {k})" in table
    # the report's calibration sample reads the same pairs
    html = tmp_path / "report.html"
    assert dedup(store, "report", "--html", str(html)).returncode == 0
    assert f"<h3>Distance {merged['distance']}</h3>" in html.read_text("utf-8")
