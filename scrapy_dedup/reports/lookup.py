"""``scrapy dedup lookup URL``: what the store knows about one URL.

The URL is normalized and keyed the way the crawl did it (with the project's
``DEDUP_*`` settings), then the answer says: which record holds it, its
canonical URL, why, the path from the URL to the canonical, and every other
URL of the same document.  That last list needs the redirects and variants
that point into the document; the store indexes them by source, so they are
found by one scan (or by the backend's ``iter_aliases_of(key)`` if it has one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.decide.frontier import DROP_ALIAS, DROP_FRESH, DROP_SEEN, NORMALIZED
from scrapy_dedup.reports.clusters import pair_jaccard, why_kept
from scrapy_dedup.reports.formats import iso, write_rows
from scrapy_dedup.reports.resolve import Resolver
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import get_url, get_urls, get_variant, iter_aliases_of, members_of

MEMBER_FIELDS = ("url", "reason", "distance", "status")

EXPLAIN = {
    "exact_content": "same text as the canonical (after normalization)",
    "near_duplicate": "nearly the same text as the canonical",
    "rel_canonical": "declares the canonical with rel=canonical, and the texts match",
    "redirect": "redirects to the canonical",
}

#: what a URL whose record holds no document is, by its status
NO_DOCUMENT = {
    "deleted": "deleted: gone at its last fetch, it left its document",
    "hub": "a hub: a page of links that yielded no item",
    "asset": "a file that yielded no item",
    "skipped_empty": "a page without text",
}


def lookup(
    store: DedupStore,
    url: str,
    normalize: Callable[[str], str],
    key_of: Callable[[str], str],
) -> dict[str, Any]:
    resolver = Resolver(store)
    normalized = normalize(url)
    key = key_of(normalized)
    variant = get_variant(store, normalized) or (get_variant(store, url) if url != normalized else None)
    record_key = variant["key"] if variant else key
    record = get_url(store, record_key)
    answer: dict[str, Any] = {
        "url": url,
        "normalized_url": normalized,
        "key": record_key,
        "known": record is not None or variant is not None,
        "canonical_url": None,
        "reason": None,
        "distance": None,
        "status": None,
        "http_status": None,
        "first_seen": None,
        "last_seen": None,
        "fetch_count": None,
        "cluster_id": None,
        "path": [],
        "kept_because": None,
        "same_document": [],
    }
    if record is None:
        if variant is not None:
            answer.update(canonical_url=record_key, reason="url_variant", status="dropped")
            answer["path"] = [_hop(url, record_key, "url_variant", None, _variant_note(variant))]
        return answer
    placement = resolver.place(record)
    path = []
    if url != record.url:
        if variant is not None:
            note = _variant_note(variant)
        elif normalized == record.url:
            note = "normalized before any request (fragment, tracking parameters, case, encoding, dot segments)"
        else:
            note = "same URL key: the crawl fetched it under the other URL"
        path.append(_hop(url, record.url, "url_variant", None, note))
    if placement.reason is not None:
        hop = _hop(record.url, placement.canonical_url, placement.reason, placement.distance, EXPLAIN[placement.reason])
        cluster = resolver.cluster(placement.cluster_id) if placement.cluster_id else None
        if placement.reason == "near_duplicate" and cluster is not None:
            # a near duplicate is merged on its Jaccard, whatever its distance: say the figure
            hop["jaccard"] = pair_jaccard(store, record.key, cluster.representative)
        path.append(hop)
    answer.update(
        canonical_url=placement.canonical_url,
        reason=path[0]["reason"] if path else None,
        distance=placement.distance,
        status=record.status,
        http_status=record.http_status,
        first_seen=iso(record.first_seen),
        last_seen=iso(record.last_seen),
        fetch_count=record.fetch_count,
        cluster_id=placement.cluster_id,
        path=path,
    )
    answer["same_document"], answer["kept_because"] = _same_document(store, resolver, record, placement)
    return answer


def _hop(source: str, target: str | None, reason: str, distance: int | None, note: str) -> dict[str, Any]:
    return {"from": source, "to": target, "reason": reason, "distance": distance, "note": note}


#: why a URL variant's request was dropped, by the reason its record keeps
_DROPPED_BECAUSE = {
    DROP_SEEN: "its URL key was already scheduled",
    DROP_FRESH: "its URL key was fetched in an earlier run and was not due again",
    DROP_ALIAS: "its URL key redirects to another URL",
}


def _variant_note(variant: dict) -> str:
    """What became of a URL variant's requests.

    >>> _variant_note({"count": 2, "reason": "fresh"})
    'dropped before fetch 2 time(s): its URL key was fetched in an earlier run and was not due again'
    >>> _variant_note({"reason": "normalized"})
    'never fetched as written: requested 1 time(s) under its normalized URL'
    >>> _variant_note({"count": 1, "reason": "robots"})
    'dropped before fetch 1 time(s): robots'
    """
    count = variant.get("count") or 1
    reason = variant.get("reason") or DROP_SEEN
    if reason == NORMALIZED:
        # its request went out under the normalized URL
        return f"never fetched as written: requested {count} time(s) under its normalized URL"
    return f"dropped before fetch {count} time(s): {_DROPPED_BECAUSE.get(reason, reason)}"


def _same_document(
    store: DedupStore, resolver: Resolver, record: UrlRecord, placement: Any
) -> tuple[list[dict[str, Any]], str | None]:
    if placement.canonical_url is None:
        return [], None  # no document: a deleted page, a hub, a page without text
    cluster = resolver.cluster(placement.cluster_id) if placement.cluster_id else None
    members: list[UrlRecord] = []
    if cluster is not None:
        members = get_urls(store, members_of(store, cluster))
    else:
        target = get_url(store, record.duplicate_of) if record.reason == "redirect" and record.duplicate_of else None
        members = [target or record]
    keys = {m.key for m in members}
    found = []
    for member in members:
        p = resolver.place(member)
        found.append({"url": member.url, "reason": p.reason, "distance": p.distance, "status": member.status})
    for url, reason, status in _aliases_into(store, keys):
        found.append({"url": url, "reason": reason, "distance": None, "status": status})
    found.sort(key=lambda m: (m["reason"] is not None, m["reason"] or "", m["url"]))
    kept = why_kept(cluster, members) if cluster is not None else None
    return found, kept


def _aliases_into(store: DedupStore, keys: set[str]) -> Iterator[tuple[str, str, str]]:
    """Redirects and URL variants whose target is one of ``keys``."""
    for key in keys:
        for url, reason in iter_aliases_of(store, key):
            yield url, reason, "redirect" if reason == "redirect" else "dropped"


def render(answer: dict[str, Any], fmt: str, out: TextIO) -> None:
    if fmt == "jsonl":
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
    elif fmt == "csv":
        rows = ({**m, "canonical_url": answer["canonical_url"]} for m in answer["same_document"])
        write_rows(rows, ["url", "canonical_url", "reason", "distance", "status"], "csv", out)
    else:
        render_text(answer, out)


def render_text(a: dict[str, Any], out: TextIO) -> None:
    def line(label: str, value: Any) -> None:
        out.write(f"{label:<14} {value}\n")

    line("url", a["url"])
    if a["normalized_url"] != a["url"]:
        line("normalized", a["normalized_url"])
    line("url key", a["key"])
    if not a["known"]:
        out.write("not known to the store: no URL record and no URL variant with this key\n")
        return
    if a["canonical_url"] is None:
        line("canonical_url", f"- ({NO_DOCUMENT.get(a['status'], 'no document recorded for it')})")
        line("reason", "-")
    else:
        line("canonical_url", a["canonical_url"])
        line("reason", a["reason"] or "- (this URL is the canonical URL of its document)")
    for hop in a["path"]:
        d = f", distance {hop['distance']}" if hop["distance"] is not None else ""
        if hop.get("jaccard") is not None:
            d += f", Jaccard {hop['jaccard']:.2f}"
        out.write(f"  {hop['from']}\n    -> {hop['reason']}{d}: {hop['note']}\n")
    if a["path"]:
        out.write(f"  {a['path'][-1]['to']}\n")
    line("status", _status(a))
    if a.get("cluster_id"):
        line("cluster", f"{a['cluster_id']}  kept: {a['kept_because']}")
    if a["canonical_url"] is None:
        return
    out.write(f"\nEvery URL of this document ({len(a['same_document'])}):\n")
    rows = [{"role": m["reason"] or "canonical", **m} for m in a["same_document"]]
    write_rows(rows, ["role", "url", "distance", "status"], "table", out, shrink=("url",))


def _status(a: dict[str, Any]) -> str:
    parts = [a["status"] or "-"]
    if a.get("http_status"):
        parts.append(f"HTTP {a['http_status']}")
    if a.get("fetch_count") is not None:
        parts.append(f"fetched {a['fetch_count']} time(s)")
    if a.get("first_seen"):
        parts.append(f"first seen {a['first_seen']}, last seen {a['last_seen']}")
    return ", ".join(parts)
