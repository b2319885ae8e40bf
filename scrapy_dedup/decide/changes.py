"""The change history of the settled corpus: what ``export --changes-since TOKEN`` reads.

Every settle ends by comparing each document of the settled store with its history (one
small record per ``document_id`` in the ``changes`` table) and writes what differs under the
next *generation*, a number kept in the store's meta data:

- a document with no history (or one that was gone) is *born* in this generation;
- a document whose digest differs is *changed* in it. The digest covers what an index holds:
  the URL key, URL and content hash of every page of the document (its representative's
  text, and its members', whose text a document may carry) and the URL and reason of every
  alias of its pages (redirects, URL variants: the export's ``sources``), not the fetch times;
- a document the store no longer has is *gone* in it, and its record stays as a tombstone:
  ``into`` names the document its representative's page now belongs to (it was merged), or
  is None (its pages are gone).

A token is the store's id and a generation, ``<id>-<generation>``: an export hands out the
current one, and the changes since a token are the records born, changed or gone after its
generation. Nothing is forgotten, so a token stays good however many settles (full ones
included: they change no digest of a document that did not change) come after it.

The history is written by settling only, so it describes the settled store: a store with
decisions not settled yet (a crawl still running, or a store several processes share that
``scrapy dedup settle`` has not settled since) has no current token, and asking it for the
changes since one is an error rather than a partial feed.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import xxhash

from scrapy_dedup.core.records import UrlRecord, stored_json
from scrapy_dedup.decide.clusters import cluster_id_for
from scrapy_dedup.store.base import CHANGES, DedupStore, StoreError
from scrapy_dedup.store.records import get_meta, get_url, iter_urls, iter_variants, put_meta

__all__ = ["ChangeTokenError", "Changes", "History", "record", "since", "token"]

#: {"store": its id, "generation": the last one written}
META = "changes"

_MASK = (1 << 64) - 1


class ChangeTokenError(StoreError):
    """A change token this store cannot answer (unknown, another store's, or the store is not settled)."""


@dataclass(slots=True)
class History:
    """One document's history: the generations it was born, last changed and gone in."""

    born: int
    changed: int
    digest: str
    #: the URL key of its representative (its id is named after it)
    representative: str
    gone: int | None = None
    #: gone: the document its representative's page belongs to now (merged), or None
    into: str | None = None

    def to_json(self) -> bytes:
        values = [self.born, self.changed, self.digest, self.representative, self.gone, self.into]
        return json.dumps(values, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> History:
        return cls(*stored_json(raw)[:6])


@dataclass(slots=True)
class Changes:
    """What changed since a token: ``(document_id, reason)`` to upsert, ``(document_id, reason,
    into)`` to delete, both by id, and the token to ask with next time."""

    upserts: list[tuple[str, str]] = field(default_factory=list)
    deletes: list[tuple[str, str, str | None]] = field(default_factory=list)
    token: str = ""


def _current(store: DedupStore, records: Iterable[UrlRecord]) -> dict[str, tuple[str, str]]:
    """document id -> (digest, representative key), from one pass over the URL records and one
    over the URL variants.

    The digest is a sum of one hash per page and per alias of its pages (a redirect to it, a URL
    variant of it: the export's ``sources``), so it needs neither the members nor the aliases
    read per document, nor an order. Every write of an alias writes the URL record of the
    redirect or the variant's record too, so no alias changes unseen here."""
    sums: dict[str, int] = {}
    reps: dict[str, str] = {}
    cluster_of: dict[str, str] = {}
    aliases: list[tuple[str, str, str]] = []  # (target key, URL, reason)
    for r in records:
        cid = r.cluster_id
        if cid is None:
            if r.status == "redirect" and r.duplicate_of is not None:
                aliases.append((r.duplicate_of, r.url, "redirect"))
            continue
        cluster_of[r.key] = cid
        sums[cid] = (sums.get(cid, 0) + xxhash.xxh64_intdigest(f"{r.key}\0{r.url}\0{r.content_hash}".encode())) & _MASK
        if cluster_id_for(r.scope, r.key) == cid:
            reps[cid] = r.key
    # an #anchor link, recorded as a variant by stores of earlier versions, is no source
    variants = ((v["key"], url, "url_variant") for url, v in iter_variants(store) if "#" not in url)
    for target, url, reason in itertools.chain(aliases, variants):
        cid = cluster_of.get(target)
        if cid is not None:
            sums[cid] = (sums[cid] + xxhash.xxh64_intdigest(f"{url}\0{reason}".encode())) & _MASK
    return {cid: (f"{total:016x}", reps.get(cid, "")) for cid, total in sums.items()}


def _pending(
    store: DedupStore, records: Iterable[UrlRecord] | None = None
) -> tuple[dict, dict[str, History], dict[str, History]]:
    """(meta, every history, the histories the next generation writes); ``records``: the
    store's URL records, when the caller has them."""
    meta = get_meta(store, META) or {}
    generation = meta.get("generation", 0) + 1
    old = {cid: History.from_json(raw) for cid, raw in store.scan(CHANGES)}
    now = _current(store, iter_urls(store) if records is None else records)
    written: dict[str, History] = {}
    for cid, (digest, rep) in now.items():
        h = old.get(cid)
        if h is None or h.gone is not None:
            written[cid] = History(generation, generation, digest, rep)
        elif h.digest != digest:
            written[cid] = History(h.born, generation, digest, rep)
    for cid, h in old.items():
        if h.gone is None and cid not in now:
            page = get_url(store, h.representative) if h.representative else None
            into = page.cluster_id if page is not None and page.cluster_id in now else None
            written[cid] = History(h.born, h.changed, h.digest, h.representative, generation, into)
    return meta, old, written


def record(store: DedupStore, records: Iterable[UrlRecord] | None = None) -> int:
    """Write what changed since the last generation (settling calls it, with the URL records
    it read: every one with content, and the redirects); the generation now."""
    meta, _, written = _pending(store, records)
    if not meta:
        # the store's id keeps another store's tokens out
        meta = {"store": uuid.uuid4().hex[:8], "generation": 0}
    elif not written:
        return meta["generation"]
    if written:
        meta = {**meta, "generation": meta["generation"] + 1}
        with store.batch() as batch:
            for cid in sorted(written):
                batch.put(CHANGES, cid, written[cid].to_json())
    put_meta(store, META, meta)
    return meta["generation"]


def token(store: DedupStore) -> str | None:
    """The token of the store as it is, or None when it is not settled (or never was)."""
    meta, _, written = _pending(store)
    if not meta or written:
        return None
    return f"{meta['store']}-{meta['generation']}"


def since(store: DedupStore, given: str) -> Changes:
    """The documents to upsert and to delete for an index that holds the export ``given``
    came with; raises :class:`ChangeTokenError` when the store cannot say."""
    meta, old, written = _pending(store)
    if not meta:
        raise ChangeTokenError(
            "this store keeps no change history yet (a `scrapy dedup repair` starts it again): settle it "
            "(`scrapy dedup settle`) and export it in full first"
        )
    store_id, _, number = given.strip().rpartition("-")
    latest = f"{meta['store']}-{meta['generation']}"
    if store_id != meta["store"] or not number.isdigit() or int(number) > meta["generation"]:
        raise ChangeTokenError(
            f"unknown change token {given!r}: this store's tokens look like {latest}; an index made from another "
            "store, or from this one before a `scrapy dedup repair`, needs a full export"
        )
    if written:
        raise ChangeTokenError(
            f"{len(written)} document(s) changed since the store was last settled: run `scrapy dedup settle`, "
            "then export the changes"
        )
    after = int(number)
    # a document born since that took over one the index holds
    took_over = {h.into for h in old.values() if h.gone is not None and h.gone > after and h.born <= after}
    changes = Changes(token=latest)
    for cid in sorted(old):
        h = old[cid]
        if h.gone is None and h.changed > after:
            if h.born <= after:
                reason = "updated"
            else:
                reason = "re-represented" if cid in took_over else "new"
            changes.upserts.append((cid, reason))
        elif h.gone is not None and h.gone > after and h.born <= after:
            changes.deletes.append((cid, "merged" if h.into else "gone", h.into))
    return changes
