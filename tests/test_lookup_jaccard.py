"""``scrapy dedup lookup`` of a near duplicate gives the Jaccard it was merged on.

A near duplicate is merged on the Jaccard of the two texts whatever their SimHash distance, and a
store's summary names ``DEDUP_MAX_DISTANCE 3``: on python-sqlalchemy-doc 1.4.46, ``lookup`` said
``near_duplicate, distance 12`` and nothing of the 0.87 that merged the page. It says both now, the
figure ``clusters`` gives for the same member.
"""

from __future__ import annotations

import json

from crawl_helpers import dedup
from test_calibrate_far_pairs import crawl_far_pair


def test_lookup_of_a_near_duplicate_says_its_jaccard(tmp_path):
    store, clusters, member = crawl_far_pair(tmp_path)
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
