"""``scrapy dedup summary``: counts by kind."""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from scrapy_dedup.store.base import DedupStore


def collect(store: DedupStore) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for record in store.iter_urls():
        counts[f"status/{record.status}"] += 1
        counts["urls"] += 1
        if record.reason:
            counts[f"alias/{record.reason}"] += 1
    for _url, _variant in store.iter_variants():
        counts["alias/url_variant"] += 1
    counts["clusters"] = sum(1 for _ in store.iter_clusters())
    return dict(counts)


def render(store: DedupStore, out: TextIO) -> None:
    for name, value in sorted(collect(store).items()):
        out.write(f"{name:<32} {value}\n")
