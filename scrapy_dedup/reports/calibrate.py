"""``scrapy dedup calibrate``: stored pairs around the near-duplicate threshold, to read.

For each Hamming distance from k-2 to k+3 (k = the store's ``max_distance``)
it samples pairs of stored documents at that distance: members against their
representative (pairs the crawl merged), and representatives against the
representatives that share a SimHash block with them (pairs it kept apart).
A near duplicate is merged on its Jaccard whatever its distance, so a merged
pair farther than k+3 is sampled too, at its own distance.
Each pair shows its Jaccard (of the two texts when they are available, with a
word-level diff; else the MinHash estimate).  A person reads them and picks the threshold where pairs
stop being the same document.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from scrapy_dedup.core.fingerprints import (
    DEFAULT_MAX_DISTANCE,
    DEFAULT_MIN_TOKENS,
    hamming,
    jaccard_estimate,
    shingle_jaccard,
)
from scrapy_dedup.reports.diff import SAME, as_text, word_diff
from scrapy_dedup.reports.formats import Progress, write_rows
from scrapy_dedup.reports.resolve import Resolver
from scrapy_dedup.reports.texts import Texts
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import get_minhash, get_url, iter_clusters, members_of

FIELDS = ("distance", "jaccard", "merged", "url", "other_url", "diff")
#: documents looked at, at most (each costs a few prefix scans)
MAX_CLUSTERS = 100_000


@dataclass
class Pair:
    distance: int
    url: str
    other_url: str
    key: str
    other_key: str
    merged: bool
    jaccard: float | None = None
    diff: list[tuple[str, str]] | None = None


@dataclass
class Calibration:
    k: int
    distances: range
    per_distance: int
    found: Counter[int] = field(default_factory=Counter)
    merged: Counter[int] = field(default_factory=Counter)
    samples: dict[int, list[Pair]] = field(default_factory=dict)
    scanned: int = 0
    truncated: bool = False
    text_source: str = ""

    def pairs(self) -> Iterator[Pair]:
        for _, pairs in self.sampled():
            yield from pairs

    def rows(self) -> list[int]:
        """The distances of the table: k-2 to k+3, then every farther one with a merged pair."""
        return [*self.distances, *sorted(d for d in self.found if d > self.distances[-1])]

    def sampled(self) -> Iterator[tuple[int, list[Pair]]]:
        """(distance, its sampled pairs) for each distance that has some, in order."""
        for d in self.rows():
            if self.samples.get(d):
                yield d, self.samples[d]


def sample(
    store: DedupStore,
    *,
    per_distance: int = 5,
    k: int | None = None,
    min_tokens: int = DEFAULT_MIN_TOKENS,
    texts: Texts | None = None,
    max_clusters: int = MAX_CLUSTERS,
    seed: int = 0,
    progress: Progress | None = None,
) -> Calibration:
    k = int(store.params.get("max_distance", DEFAULT_MAX_DISTANCE)) if k is None else k
    cal = Calibration(k=k, distances=range(max(0, k - 2), k + 4), per_distance=per_distance)
    rng = random.Random(seed)
    resolver = Resolver(store)
    progress = progress or Progress("documents scanned")

    def offer(pair: Pair) -> None:
        # reservoir sampling: every pair found at a distance has the same chance
        d = pair.distance
        cal.found[d] += 1
        cal.merged[d] += pair.merged
        bucket = cal.samples.setdefault(d, [])
        if len(bucket) < per_distance:
            bucket.append(pair)
        else:
            slot = rng.randrange(cal.found[d])
            if slot < per_distance:
                bucket[slot] = pair

    for cluster in progress(iter_clusters(store)):
        if cal.scanned >= max_clusters:
            cal.truncated = True
            break
        cal.scanned += 1
        rep = resolver.representative(cluster)
        if rep is None or rep.simhash is None:
            continue
        if cluster.size > 1:
            for key in members_of(store, cluster):
                member = get_url(store, key) if key != rep.key else None
                if member is None or member.simhash is None:
                    continue
                d = hamming(member.simhash, rep.simhash)
                # a near duplicate merged beyond the range was merged on its Jaccard: it is
                # the pair a person choosing the thresholds most needs to read
                if d in cal.distances or (d > cal.distances[-1] and member.reason == "near_duplicate"):
                    offer(Pair(d, member.url, rep.url, member.key, rep.key, merged=True))
        if (rep.tokens or 0) < min_tokens:
            continue  # short pages are exact-only: no threshold applies to them
        near = store.near_candidates(cluster.scope, rep.simhash, (), max(cal.distances))
        for other_simhash, other_id in near.simhash:
            if other_id <= cluster.cluster_id:
                continue  # each unordered pair once, and not the cluster itself
            d = hamming(other_simhash, rep.simhash)
            if d not in cal.distances:
                continue
            other = resolver.cluster(other_id)
            if other is not None:
                offer(Pair(d, rep.url, other.rep_url, rep.key, other.representative, merged=False))
    progress.done()
    for pair in cal.pairs():
        a, b = get_minhash(store, pair.key), get_minhash(store, pair.other_key)
        pair.jaccard = round(jaccard_estimate(a, b), 3) if a and b else None
        if texts is not None and texts.available:
            ta, tb = texts.get(pair.key, pair.url), texts.get(pair.other_key, pair.other_url)
            if ta is not None and tb is not None:
                pair.diff = word_diff(tb, ta)
                # the Jaccard a pair is decided on when the texts are kept, not its estimate
                pair.jaccard = round(shingle_jaccard(ta, tb), 3)
    cal.text_source = texts.source if texts is not None else ""
    return cal


def rows(cal: Calibration) -> Iterator[dict[str, Any]]:
    for pair in cal.pairs():
        yield {
            "distance": pair.distance,
            "jaccard": pair.jaccard,
            "merged": pair.merged,
            "url": pair.url,
            "other_url": pair.other_url,
            "diff": as_text(pair.diff) if pair.diff is not None else None,
        }


def jaccard_range(pairs: list[Pair]) -> tuple[float | None, float | None, float | None]:
    values = [p.jaccard for p in pairs if p.jaccard is not None]
    if not values:
        return None, None, None
    return min(values), statistics.median(values), max(values)


def render(cal: Calibration, fmt: str, out: TextIO) -> None:
    if fmt != "table":
        write_rows(rows(cal), FIELDS, fmt, out)
        return
    out.write(
        f"Near-duplicate threshold k = {cal.k} (DEDUP_MAX_DISTANCE): a pair merges on its word 5-shingle Jaccard "
        f"(DEDUP_MIN_JACCARD), of its kept texts when the store has them, whatever the distance; without texts, "
        f"on its MinHash estimate, with a lower bar within distance {cal.k}.\n"
        f"Scanned {cal.scanned:,} documents{' (stopped early)' if cal.truncated else ''}; "
        f"up to {cal.per_distance} pairs shown per distance, and the Jaccard columns are theirs. "
        f"Texts for diffs: {cal.text_source}.\n\n"
    )
    table = []
    for d in cal.rows():
        lo, mid, hi = jaccard_range(cal.samples.get(d, []))
        table.append(
            {
                "distance": d,
                "vs_k": "<= k" if d <= cal.k else "> k",
                "pairs": cal.found[d],
                "merged": cal.merged[d],
                # the Jaccard columns are over the pairs sampled, not every pair found
                "sampled": len(cal.samples.get(d, [])),
                "jaccard_min": lo,
                "jaccard_median": mid,
                "jaccard_max": hi,
            }
        )
    write_rows(table, list(table[0]), "table", out, width=0)
    for d, pairs in cal.sampled():
        out.write(f"\ndistance {d}  ({'within' if d <= cal.k else 'beyond'} k = {cal.k})\n")
        for pair in pairs:
            j = f"{pair.jaccard:.2f}" if pair.jaccard is not None else "-"
            out.write(f"  jaccard {j}  {'merged' if pair.merged else 'kept apart'}\n")
            out.write(f"    {pair.url}\n    {pair.other_url}\n")
            if pair.diff is not None:
                out.write(f"    diff: {as_text(pair.diff) or SAME}\n")


