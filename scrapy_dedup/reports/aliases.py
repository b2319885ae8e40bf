"""``scrapy dedup aliases``: every URL that is not its document's canonical URL.

One record per alias: the URL records whose content went to another URL
(exact or near duplicate, rel=canonical, redirect), then the URL variants
dropped before fetch.  Streams in store order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

from scrapy_dedup.reports.formats import Progress, iso
from scrapy_dedup.reports.resolve import Resolver, host_matcher
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import iter_urls

FIELDS = ("url", "canonical_url", "reason", "distance", "first_seen", "last_seen")
#: URL columns the table shortens to fit a terminal
SHRINK = ("url", "canonical_url")
#: columns the table leaves out first when the terminal is narrow
OPTIONAL = ("last_seen", "first_seen")


def rows(
    store: DedupStore,
    *,
    host: str | None = None,
    reasons: Collection[str] = (),
    progress: Progress | None = None,
) -> Iterator[dict[str, Any]]:
    progress = progress or Progress("aliases", streaming=True)
    resolver = Resolver(store)
    wanted: Callable[[str], bool] = host_matcher(host)
    if not reasons or set(reasons) - {"url_variant"}:
        for record in progress(iter_urls(store), "URL records"):
            if not wanted(record.url):
                continue
            placement = resolver.place(record)
            if placement.reason is None or (reasons and placement.reason not in reasons):
                continue
            yield {
                "url": record.url,
                "canonical_url": placement.canonical_url,
                "reason": placement.reason,
                "distance": placement.distance,
                "first_seen": iso(record.first_seen),
                "last_seen": iso(record.last_seen),
            }
    if not reasons or "url_variant" in reasons:
        for url, variant, placement in resolver.variants(wanted, progress):
            yield {
                "url": url,
                "canonical_url": placement.canonical_url,
                "reason": "url_variant",
                "distance": None,
                "first_seen": iso(variant.get("first_seen")),
                "last_seen": iso(variant.get("last_seen")),
            }
    progress.done()
