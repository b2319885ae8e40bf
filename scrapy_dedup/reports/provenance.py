"""``scrapy dedup provenance``: every URL the store knows, with everything it knows.

The URL records first (fetched, redirected, or found as pages), then the URL
variants dropped before fetch: those were never fetched, so their content
fields are empty and their ``status`` is ``dropped``.  Streams in store order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy_dedup.reports.formats import Progress, hex64, iso
from scrapy_dedup.reports.resolve import Resolver, host_matcher
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import iter_urls

FIELDS = (
    "url",
    "key",
    "canonical_url",
    "status",
    "reason",
    "content_hash",
    "simhash",
    "cluster_id",
    "http_status",
    "first_seen",
    "last_seen",
    "fetch_count",
    "text_length",
)
#: what the table shows (jsonl and csv carry every field)
TABLE_FIELDS = ("url", "status", "reason", "canonical_url", "http_status", "fetch_count", "last_seen")
SHRINK = ("url", "canonical_url")
OPTIONAL = ("last_seen", "fetch_count", "http_status")


def rows(store: DedupStore, *, host: str | None = None, progress: Progress | None = None) -> Iterator[dict[str, Any]]:
    progress = progress or Progress("provenance", streaming=True)
    resolver = Resolver(store)
    wanted = host_matcher(host)
    for record in progress(iter_urls(store), "URL records"):
        if not wanted(record.url):
            continue
        placement = resolver.place(record)
        yield {
            "url": record.url,
            "key": record.key,
            "canonical_url": placement.canonical_url,
            "status": record.status,
            "reason": placement.reason,
            "content_hash": record.content_hash,
            "simhash": hex64(record.simhash),
            "cluster_id": record.cluster_id,
            "http_status": record.http_status,
            "first_seen": iso(record.first_seen),
            "last_seen": iso(record.last_seen),
            "fetch_count": record.fetch_count,
            "text_length": record.text_length,
        }
    for url, variant, placement in resolver.variants(wanted, progress):
        yield {
            "url": url,
            "key": variant.get("key"),
            "canonical_url": placement.canonical_url,
            "status": "dropped",
            "reason": "url_variant",
            "content_hash": None,
            "simhash": None,
            "cluster_id": placement.cluster_id,
            "http_status": None,
            "first_seen": iso(variant.get("first_seen")),
            "last_seen": iso(variant.get("last_seen")),
            "fetch_count": 0,
            "text_length": None,
        }
    progress.done()
