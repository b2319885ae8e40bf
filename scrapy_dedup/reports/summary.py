"""``scrapy dedup summary``: counts by kind and the duplicate rate per host.

One pass over the URL records, the URL variants and the clusters; memory
grows with the number of hosts, not of URLs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from scrapy_dedup.core.records import ALIAS_REASONS
from scrapy_dedup.reports.formats import Progress, write_rows
from scrapy_dedup.reports.resolve import Resolver, host_of, url_variants
from scrapy_dedup.reports.store import held_by_a_crawl
from scrapy_dedup.store.base import FRONTIER, PENDING, DedupStore
from scrapy_dedup.store.records import SETTLED_META, get_meta, iter_clusters, iter_urls

#: statuses of URL records that hold no document
NOT_DOCUMENTS = ("hub", "asset", "skipped_empty", "deleted", "fetched", "seen", "error", "not_modified")


@dataclass
class HostCounts:
    urls: int = 0
    documents: int = 0
    #: URLs with content that are not their document's canonical (exact or near duplicates)
    duplicates: int = 0

    @property
    def rate(self) -> float:
        """Share of the host's URLs with content that are not their document's canonical; a URL
        dropped before fetch or redirected has no content of its own and is not counted."""
        total = self.documents + self.duplicates
        return self.duplicates / total if total else 0.0


@dataclass
class Summary:
    path: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    runs: int = 0
    url_records: int = 0
    frontier_keys: int = 0
    variants: int = 0
    #: the requests of the URL variants over all runs, by reason (not every request the crawl
    #: dropped before fetch: a repeated request of a URL fetched is no variant's)
    dropped_requests: Counter[str] = field(default_factory=Counter)
    #: URL variants (spellings of a URL key fetched under another URL, never fetched as
    #: written), by reason: ``seen``, ``fresh``, ``alias`` (dropped before fetch) or
    #: ``normalized`` (its request went out normalized)
    dropped_urls: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    #: the error answers (HTTP 400 and above) of the URLs fetched without a document, by status
    http_errors: Counter[int] = field(default_factory=Counter)
    #: aliases (URLs that are not their document's canonical) by reason
    aliases: Counter[str] = field(default_factory=Counter)
    #: URLs with content that are not their document's canonical, by how their text compares
    #: with the representative's: exact_duplicate, near_duplicate (resolve.Placement.duplicate)
    copies: Counter[str] = field(default_factory=Counter)
    documents: int = 0
    canonical_mismatches: int = 0
    hosts: dict[str, HostCounts] = field(default_factory=dict)
    #: Hamming distance of each near duplicate to its canonical
    near_distances: Counter[int] = field(default_factory=Counter)
    #: number of clusters of each size
    cluster_sizes: Counter[int] = field(default_factory=Counter)
    #: requests the last run left owed (an interrupted run, resumed by the next one)
    pending: int = 0
    #: a crawl holds the store (a snapshot was read) or other processes write it: its run is under way
    running: bool = False
    #: the last run never closed (killed before it owed any request): no crawl runs, yet its
    #: state is still "running"
    unclosed: bool = False

    @property
    def frontier_state(self) -> str:
        """``complete``, ``interrupted: N pending``, or for a store a crawl holds ``running: N
        requests owed so far``."""
        state = self.frontier
        if state == "running":
            return f"running: {self.pending:,} requests owed so far"
        if state == "complete":
            return state
        return f"interrupted: {self.pending:,} pending" if self.pending else "interrupted: it stopped before it closed"

    @property
    def frontier(self) -> str:
        """``running``, ``complete`` or ``interrupted``."""
        if self.running:
            return "running"
        return "interrupted" if self.pending or self.unclosed else "complete"

    @property
    def urls_known(self) -> int:
        return self.url_records + self.variants

    @property
    def duplicates(self) -> int:
        return sum(self.aliases.values())

    def metrics(self) -> list[tuple[str, Any]]:
        """Flat (name, value) pairs: the csv and jsonl forms."""
        rows: list[tuple[str, Any]] = [
            ("urls_known", self.urls_known),
            ("url_records", self.url_records),
            ("frontier_keys", self.frontier_keys),
            ("frontier", self.frontier),
            ("pending", self.pending),
            ("dropped_before_fetch", sum(self.dropped_urls.values())),
        ]
        rows += [(f"dropped_before_fetch/{r}", n) for r, n in sorted(self.dropped_urls.items())]
        rows += [(f"dropped_requests/{r}", n) for r, n in sorted(self.dropped_requests.items())]
        rows += [("documents", self.documents), ("aliases", self.duplicates)]
        rows += [(f"aliases/{reason}", self.aliases.get(reason, 0)) for reason in ALIAS_REASONS]
        rows += [("exact_duplicates", self.copies.get("exact_duplicate", 0))]
        rows += [("near_duplicates", self.copies.get("near_duplicate", 0))]
        rows += [("unchanged", self.statuses.get("unchanged", 0))]
        rows += [("canonical_mismatches", self.canonical_mismatches)]
        rows += [(f"status/{s}", n) for s, n in sorted(self.statuses.items())]
        rows += [(f"http_error/{code}", n) for code, n in sorted(self.http_errors.items())]
        for host, counts in sorted(self.hosts.items()):
            rows += [
                (f"host/{host}/urls", counts.urls),
                (f"host/{host}/documents", counts.documents),
                (f"host/{host}/duplicates", counts.duplicates),
                (f"host/{host}/duplicate_rate", round(counts.rate, 4)),
            ]
        return rows


def collect(store: DedupStore, progress: Progress | None = None) -> Summary:
    progress = progress or Progress("reading the store")
    resolver = Resolver(store)
    held = held_by_a_crawl(store)
    path = held or str(getattr(store, "path", ""))
    prefix = getattr(store, "prefix", None)
    if prefix:
        path += f", prefix {prefix}"  # a Redis server holds several stores: which one
    summary = Summary(
        path=path, params=dict(store.params or {}), runs=store.run,
        # a crawl holds it (a snapshot was read), or other processes write it (a shared store)
        running=held is not None or store.writing_elsewhere() > 0,
    )
    # the near-duplicate settings of the last settle, else of the last crawl (the store's own
    # params hold the distance only)
    job = get_meta(store, "job") or {}
    for found in (get_meta(store, SETTLED_META) or {}, job):
        if "min_jaccard" in found:
            summary.params.setdefault("min_jaccard", found["min_jaccard"])
    summary.unclosed = not summary.running and job.get("state") == "running"

    def host(url: str) -> HostCounts:
        name = host_of(url)
        counts = summary.hosts.get(name)
        if counts is None:
            counts = summary.hosts[name] = HostCounts()
        return counts

    for record in progress(iter_urls(store), "URL records"):
        summary.url_records += 1
        summary.statuses[record.status] += 1
        answer = record.http_status or 0
        if record.status == "fetched" and answer >= 400:
            summary.http_errors[answer] += 1
        if record.canonical_mismatch:
            summary.canonical_mismatches += 1
        counts = host(record.url)
        counts.urls += 1
        placement = resolver.place(record)
        if placement.reason is not None:
            summary.aliases[placement.reason] += 1
            if placement.distance is not None:
                summary.near_distances[placement.distance] += 1
        elif placement.canonical_url is not None:
            counts.documents += 1
        if placement.duplicate is not None:
            summary.copies[placement.duplicate] += 1
            counts.duplicates += 1
    for url, variant in url_variants(store, progress):
        summary.variants += 1
        reason = variant.get("reason") or "url_variant"
        summary.dropped_urls[reason] += 1
        summary.dropped_requests[reason] += int(variant.get("count") or 1)
        summary.aliases["url_variant"] += 1
        host(url).urls += 1
    for cluster in progress(iter_clusters(store), "clusters"):
        summary.documents += 1
        summary.cluster_sizes[cluster.size] += 1
    summary.frontier_keys = store.count(FRONTIER)
    summary.pending = store.count(PENDING)
    progress.done()
    return summary


def render(summary: Summary, fmt: str, out: TextIO) -> None:
    if fmt == "jsonl":
        out.write(json.dumps(dict(summary.metrics()), ensure_ascii=False) + "\n")
    elif fmt == "csv":
        write_rows(({"metric": k, "value": v} for k, v in summary.metrics()), ["metric", "value"], "csv", out)
    else:
        render_text(summary, out)


def near_settings(params: dict[str, Any]) -> str:
    """The settings near duplicates were found with. A near duplicate is confirmed by its Jaccard
    similarity; the SimHash distance finds candidates (and lowers the bar a little for an
    estimate), so a member may lie further than ``DEDUP_MAX_DISTANCE`` bits from its representative.

    >>> near_settings({"max_distance": 3, "min_jaccard": 0.8})
    'near duplicates at DEDUP_MIN_JACCARD 0.8, DEDUP_MAX_DISTANCE 3'
    >>> near_settings({"max_distance": 3})
    'near duplicates at DEDUP_MAX_DISTANCE 3'
    """
    jaccard = f"DEDUP_MIN_JACCARD {params['min_jaccard']}, " if "min_jaccard" in params else ""
    return f"near duplicates at {jaccard}DEDUP_MAX_DISTANCE {params.get('max_distance', '?')}"


def _n(value: int) -> str:
    return f"{value:,}"


def render_text(s: Summary, out: TextIO) -> None:
    out.write(f"store  {s.path}\n")
    out.write(f"       format {s.params.get('store_format', '?')}, {s.runs} crawl run(s), {near_settings(s.params)}\n")
    resume = " (the next crawl run resumes it)" if s.pending and not s.running else ""
    out.write(f"       last run {s.frontier_state}{resume}\n\n")
    dropped = sum(s.dropped_urls.values())
    by_reason = ", ".join(
        f"{r} {_n(n)} URLs / {_n(s.dropped_requests[r])} requests" for r, n in sorted(s.dropped_urls.items())
    )
    if by_reason:
        by_reason += " (the requests of these spellings, over all runs)"
    # a URL fetched without a document: most often an error answer, said with its status
    errors = "; ".join(f"{code}: {_n(n)}" for code, n in sorted(s.http_errors.items()))
    fetched_notes = [f"HTTP {errors}"] if errors else []
    answered = s.statuses.get("fetched", 0) - sum(s.http_errors.values())
    if s.running and answered:
        # while a crawl runs, a page is "fetched" from its answer until the pipeline decides its
        # item: most of these are documents on their way, not pages without one
        fetched_notes.append(f"{_n(answered)} answered without a document so far: the crawl runs, their items may come")
    not_docs = ", ".join(
        f"{st} {_n(s.statuses[st])}" + (f" ({'; '.join(fetched_notes)})" if st == "fetched" and fetched_notes else "")
        for st in NOT_DOCUMENTS
        if s.statuses.get(st)
    )
    lines = [
        ("URLs seen", s.urls_known,
         f"{_n(s.url_records)} fetched or redirected, {_n(dropped)} URL variants: other spellings, never fetched as written"),
        ("  URL variants", dropped, by_reason),
        ("Documents", s.documents, "distinct contents kept, one canonical URL each"),
        ("Aliases", s.duplicates, "URLs that are not their document's canonical"),
    ]
    lines += [(f"  {reason}", s.aliases.get(reason, 0), "") for reason in ALIAS_REASONS]
    lines += [
        ("Exact duplicates", s.copies.get("exact_duplicate", 0), "URLs with the same text as their canonical"),
        ("Near duplicates", s.copies.get("near_duplicate", 0), _distances(s)),
        ("Unchanged", s.statuses.get("unchanged", 0), "not modified at the last visit"),
        ("Canonical mismatches", s.canonical_mismatches, "rel=canonical named a different text: both kept"),
        ("Not documents", sum(s.statuses.get(st, 0) for st in NOT_DOCUMENTS), not_docs),
    ]
    width = max(len(label) for label, _, _ in lines)
    numw = max(len(_n(v)) for _, v, _ in lines)
    for label, value, note in lines:
        out.write(f"{label:<{width}}  {_n(value):>{numw}}  {note}".rstrip() + "\n")
    out.write("\nDuplicate rate per host (exact and near duplicates / URLs with content)\n")
    rows = [
        {"host": h, "urls": c.urls, "documents": c.documents, "duplicates": c.duplicates, "rate": f"{c.rate:.1%}"}
        for h, c in sorted(s.hosts.items(), key=lambda hc: (-hc[1].urls, hc[0]))
    ]
    write_rows(rows, ["host", "urls", "documents", "duplicates", "rate"], "table", out, width=0)


def _distances(s: Summary) -> str:
    if not s.near_distances:
        return ""
    return "distance " + ", ".join(f"{d}: {_n(n)}" for d, n in sorted(s.near_distances.items()))
