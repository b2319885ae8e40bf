"""``scrapy dedup clusters``: documents with several URLs, their members and representative.

Streams clusters in store order; ``--top N`` keeps only the N largest (a heap
of N entries, whatever the size of the store).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TextIO

from scrapy_dedup.core.fingerprints import jaccard_estimate, shingle_jaccard
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.core.representative import Candidate, representative_order
from scrapy_dedup.reports.formats import Progress, write_rows
from scrapy_dedup.reports.resolve import Resolver
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import get_cluster, get_minhash, get_text, get_urls, iter_clusters, members_of

FIELDS = ("cluster_id", "size", "representative", "max_distance", "members")
MEMBER_FIELDS = ("url", "reason", "distance", "jaccard", "text_length")
#: one row per member
CSV_FIELDS = ("cluster_id", "size", "representative", "max_distance", *MEMBER_FIELDS)


def select(
    store: DedupStore, *, min_size: int = 2, top: int | None = None, progress: Progress | None = None
) -> Iterator[Cluster]:
    progress = progress or Progress("clusters", streaming=top is None)
    clusters = (c for c in progress(iter_clusters(store)) if c.size >= min_size)
    if top is None:
        yield from clusters
    else:
        largest = heapq.nsmallest(top, ((-c.size, c.cluster_id) for c in clusters))
        progress.done()
        for _, cluster_id in largest:
            cluster = get_cluster(store, cluster_id)
            if cluster is not None:
                yield cluster
    progress.done()


def pair_jaccard(store: DedupStore, key: str, other_key: str) -> float | None:
    """The Jaccard of two stored pages, as ``clusters`` gives it (:func:`_jaccard`)."""
    return _jaccard(
        get_text(store, key), get_text(store, other_key), lambda: (get_minhash(store, key), get_minhash(store, other_key))
    )


def _minhashes(store: DedupStore, key: str, rep_minhash: bytes | None) -> tuple[bytes | None, bytes | None]:
    """``key``'s MinHash (read only when its representative has one) and its representative's."""
    return (get_minhash(store, key) if rep_minhash else None), rep_minhash


def _jaccard(
    text: str | None, other_text: str | None, minhashes: Callable[[], tuple[bytes | None, bytes | None]]
) -> float | None:
    """Of two kept texts (the Jaccard a merge is decided on), else the MinHash estimate of the
    two ``minhashes()``, read only then; rounded to 3 places, None when neither is there."""
    if text is not None and other_text is not None:
        return round(shingle_jaccard(text, other_text), 3)
    minhash, other_minhash = minhashes()
    return round(jaccard_estimate(minhash, other_minhash), 3) if minhash and other_minhash else None


def describe(store: DedupStore, resolver: Resolver, cluster: Cluster, authority: Sequence[str] = ()) -> dict[str, Any]:
    """The cluster with its members, representative first, then by distance."""
    rep = resolver.representative(cluster)
    rep_minhash = get_minhash(store, cluster.representative) if rep is not None else None
    rep_text = get_text(store, cluster.representative) if rep is not None else None
    records = get_urls(store, members_of(store, cluster))
    members = []
    for record in records:
        is_rep = record.key == cluster.representative
        reason = None if is_rep else resolver.reason_against(record, rep)
        text = get_text(store, record.key) if rep_text is not None and not is_rep else rep_text
        jaccard = (
            1.0
            if is_rep and rep_text is not None
            else _jaccard(text, rep_text, partial(_minhashes, store, record.key, rep_minhash))
        )
        members.append(
            {
                "url": record.url,
                "key": record.key,
                "reason": reason,
                "distance": 0 if is_rep else resolver.distance(record, rep),
                "jaccard": jaccard,
                "text_length": record.text_length,
            }
        )
    members.sort(key=lambda m: (m["reason"] is not None, m["distance"] or 0, m["url"]))
    return {
        "cluster_id": cluster.cluster_id,
        "size": len(members),
        "representative": cluster.rep_url,
        "max_distance": max((m["distance"] or 0 for m in members), default=0),
        "why": why_kept(cluster, records, authority),
        "members": members,
    }


def why_kept(cluster: Cluster, records: list[UrlRecord], authority: Sequence[str] = ()) -> str:
    """Which rule of core.representative chose the representative over the runner-up."""
    by_key = {r.key: r for r in records}
    rep = by_key.get(cluster.representative)
    if rep is None:
        return "representative"
    if len(records) == 1:
        return "the only copy"

    def order(r: UrlRecord) -> tuple:
        candidate = Candidate.of(r)
        return representative_order(candidate, authority)

    ranked = sorted(records, key=order)
    runner = ranked[1] if ranked[0].key == rep.key else ranked[0]
    a, b = order(rep), order(runner)
    if a > b:
        return "representative (chosen under other settings)"
    if a[0] != b[0]:
        return "the other copies declared a rel=canonical"
    if a[1] != b[1]:
        return "most authoritative source (DEDUP_AUTHORITY)"
    if a[2] != b[2]:
        return "extracted from HTML (the other copies were served as plain text)"
    if a[3] != b[3]:
        return f"longest text ({rep.text_length or 0:,} characters, next {runner.text_length or 0:,})"
    if a[4] != b[4]:
        return f"known since an earlier crawl run ({rep.first_run})"
    return "same text length: the smallest URL"


def rows(
    store: DedupStore,
    *,
    min_size: int = 2,
    top: int | None = None,
    authority: Sequence[str] = (),
    progress: Progress | None = None,
) -> Iterator[dict[str, Any]]:
    resolver = Resolver(store)
    for cluster in select(store, min_size=min_size, top=top, progress=progress):
        yield describe(store, resolver, cluster, authority)


def render(clusters: Iterator[dict[str, Any]], fmt: str, out: TextIO, min_size: int) -> int:
    """Write ``clusters`` in ``fmt``; ``min_size``: the size they were selected with, which the
    table's line for none says."""
    if fmt == "jsonl":
        n = 0
        for c in clusters:
            record = {f: c[f] for f in FIELDS} | {"members": [{f: m[f] for f in MEMBER_FIELDS} for m in c["members"]]}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
        return n
    if fmt == "csv":
        flat = ({**{f: c[f] for f in FIELDS[:-1]}, **m} for c in clusters for m in c["members"])
        return write_rows(flat, CSV_FIELDS, "csv", out)
    return render_text(clusters, out, min_size)


def render_text(clusters: Iterator[dict[str, Any]], out: TextIO, min_size: int) -> int:
    n = 0
    for n, c in enumerate(clusters, 1):
        if n > 1:
            out.write("\n")
        out.write(f"cluster {c['cluster_id']}  {c['size']} URLs  largest distance {c['max_distance']}\n")
        rows = [
            {
                "role": m["reason"] or "canonical",
                "url": m["url"],
                "distance": m["distance"],
                "jaccard": m["jaccard"],
                "chars": m["text_length"],
            }
            for m in c["members"]
        ]
        buf = _Indented(out, "  ")
        write_rows(rows, ["role", "url", "distance", "jaccard", "chars"], "table", buf, shrink=("url",))
        out.write(f"  kept: {c['why']}\n")
    if n == 0:
        # said with the size asked for: 2 (the command's default) means no document has a second URL
        alone = ": every document has one URL" if min_size <= 2 else ""
        out.write(f"no cluster of {min_size:,} URLs or more{alone}\n")
    return n


class _Indented:
    """A text stream that indents every line written to it."""

    def __init__(self, out: TextIO, prefix: str) -> None:
        self.out, self.prefix = out, prefix

    def write(self, text: str) -> int:
        return self.out.write("".join(self.prefix + line for line in text.splitlines(keepends=True)))

