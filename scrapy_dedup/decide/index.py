"""The content layer's decisions: exact and near duplicates, clusters, lifecycle.

Scrapy-free: the pipeline hands it a :class:`Document` and gets a
:class:`Decision`.  A document joins a cluster by matching the cluster's
representative (the only fingerprints in the near-duplicate tables), so a
series of small edits cannot chain unrelated pages together.  The writes of
one decision go to the store in one atomic batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import xxhash

from scrapy_dedup.core.bands import band_hashes
from scrapy_dedup.core.fingerprints import Fingerprint, hamming, near_match
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.core.representative import Candidate, choose_representative, representative_order
from scrapy_dedup.store.base import DedupStore, StoreBatch


@dataclass(slots=True)
class Document:
    """What the pipeline learned about one fetched page."""

    key: str
    url: str
    #: None for a binary body (PDF, image): exact duplicates by raw bytes only
    fingerprint: Fingerprint | None
    raw_hash: str
    scope: str = ""
    #: url key and URL of an in-scope rel=canonical the page declared
    canonical_key: str | None = None
    canonical_url: str | None = None
    #: the text to keep for reports (None: keep nothing)
    text: str | None = None


@dataclass(slots=True)
class Decision:
    status: str
    url: str
    content_hash: str | None = None
    simhash: int | None = None
    cluster_id: str | None = None
    #: URL of the cluster's representative
    canonical_url: str | None = None
    #: URL whose content this one duplicates
    duplicate_of: str | None = None
    distance: int | None = None
    jaccard: float | None = None
    reason: str | None = None
    supersedes: list[str] = field(default_factory=list)
    #: rel=canonical outcome: honored, mismatch, unverified (target unknown)
    canonical: str | None = None
    #: the item should go on to the next pipeline (representative or flagged)
    is_representative: bool = False
    #: a member that now represents the cluster this URL's old content left
    #: (to be fetched again and emitted, or its content is lost downstream)
    promoted: str | None = None

    def as_item_field(self) -> dict:
        return {
            "status": self.status,
            "content_hash": self.content_hash,
            "simhash": f"{self.simhash:016x}" if self.simhash is not None else None,
            "cluster_id": self.cluster_id,
            "canonical_url": self.canonical_url,
            "duplicate_of": self.duplicate_of,
            "distance": self.distance,
            "supersedes": list(self.supersedes),
        }


@dataclass(slots=True)
class _Match:
    cluster_id: str
    reason: str
    duplicate_of: str | None
    distance: int | None = None
    jaccard: float | None = None


def cluster_id_for(scope: str, content_hash: str) -> str:
    """A cluster is named after the content and scope of its founding document."""
    return xxhash.xxh64_hexdigest(f"{scope}\0{content_hash}".encode())


class ContentIndex:
    def __init__(
        self,
        store: DedupStore,
        run: int,
        *,
        max_distance: int,
        min_jaccard: float,
        min_tokens: int,
        authority: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.run = run
        self.max_distance = max_distance
        self.min_jaccard = min_jaccard
        self.min_tokens = min_tokens
        self.authority = tuple(authority)
        self.clock = clock

    # -- reading ------------------------------------------------------------
    def known_content(self, key: str) -> UrlRecord | None:
        """The URL record of ``key`` if it holds indexed content."""
        record = self.store.get_url(key)
        return record if record is not None and record.has_content else None

    def fingerprint_of(self, record: UrlRecord) -> Fingerprint | None:
        if record.simhash is None or record.content_hash is None:
            return None
        minhash = self.store.get_minhash(record.key) or b""
        return Fingerprint(
            content_hash=record.content_hash,
            simhash=record.simhash,
            minhash=minhash,
            tokens=record.tokens or 0,
            length=record.text_length or 0,
        )

    def recall(self, raw_hash: str) -> Fingerprint | None:
        """Fingerprints of a byte-identical body seen before (skips extraction)."""
        key = self.store.find_raw(raw_hash)
        record = self.store.get_url(key) if key else None
        if record is None or record.raw_hash != raw_hash or not record.has_content:
            return None  # a gone or emptied page keeps its hashes but no longer its MinHash
        return self.fingerprint_of(record)

    # -- deciding -----------------------------------------------------------
    def ingest(self, doc: Document) -> Decision:
        now = self.clock()
        record = self.store.get_url(doc.key) or UrlRecord(key=doc.key, url=doc.url, first_seen=now, first_run=self.run)
        record.last_seen = now
        record.kind = "document"
        fp = doc.fingerprint
        content_hash = fp.content_hash if fp is not None else doc.raw_hash

        if fp is not None and fp.tokens == 0:
            # a page without text is no document: like a hub, it is fetched again
            record.status, record.raw_hash, record.kind = "skipped_empty", doc.raw_hash, "hub"
            promoted = self._forget_content(record)
            return Decision(status="skipped_empty", url=doc.url, promoted=promoted)

        if record.has_content and record.content_hash == content_hash:
            return self._unchanged(record, doc)

        updated = record.has_content
        promoted = self._forget_content(record) if updated else None

        canonical_outcome = None
        match = None
        if doc.canonical_key is not None:
            match, canonical_outcome = self._match_canonical(doc, content_hash)
            if canonical_outcome == "mismatch":
                record.canonical_mismatch = doc.canonical_url
        if match is None:
            match = self._match_content(doc, content_hash)

        record.content_hash, record.raw_hash = content_hash, doc.raw_hash
        record.simhash = fp.simhash if fp is not None else None
        record.tokens = fp.tokens if fp is not None else None
        record.text_length = fp.length if fp is not None else None
        record.canonical_alias = match is not None and match.reason == "rel_canonical"
        decision = self._found_cluster(record, doc) if match is None else self._join(record, doc, match)
        if updated and decision.is_representative and decision.status not in ("exact_duplicate", "near_duplicate"):
            decision.status = "updated"
        decision.canonical = canonical_outcome
        decision.promoted = promoted
        return decision

    def _unchanged(self, record: UrlRecord, doc: Document) -> Decision:
        record.status = "unchanged"
        record.fetch_count = max(record.fetch_count, 1)
        with self.store.batch() as batch:
            batch.put_url(record)
        cluster = self.store.get_cluster(record.cluster_id)
        rep_url = cluster.rep_url if cluster else record.url
        duplicate_url = self._url_of(record.duplicate_of)
        return Decision(
            status="unchanged",
            url=doc.url,
            content_hash=record.content_hash,
            simhash=record.simhash,
            cluster_id=record.cluster_id,
            canonical_url=rep_url,
            duplicate_of=duplicate_url,
            distance=record.distance,
            reason=record.reason,
        )

    def _url_of(self, key: str | None) -> str | None:
        if key is None:
            return None
        record = self.store.get_url(key)
        return record.url if record is not None else key

    def resolve(self, key: str, max_hops: int = 5) -> str:
        """Follow recorded redirects from ``key`` (a bounded number of hops)."""
        seen = {key}
        for _ in range(max_hops):
            record = self.store.get_url(key)
            if record is None or record.status != "redirect" or record.duplicate_of in (None, *seen):
                break
            key = record.duplicate_of
            seen.add(key)
        return key

    def _match_canonical(self, doc: Document, content_hash: str) -> tuple[_Match | None, str]:
        target = self.known_content(self.resolve(doc.canonical_key))
        if target is None:
            return None, "unverified"
        if target.scope != doc.scope:
            return None, "mismatch"  # restricted text never collapses into another scope
        if target.content_hash == content_hash:
            return _Match(target.cluster_id, "rel_canonical", target.key, 0, 1.0), "honored"
        target_fp = self.fingerprint_of(target)
        if doc.fingerprint is not None and target_fp is not None:
            ok, distance, jaccard = near_match(
                doc.fingerprint,
                target_fp,
                max_distance=self.max_distance,
                min_jaccard=self.min_jaccard,
                min_tokens=self.min_tokens,
            )
            if ok:
                return _Match(target.cluster_id, "rel_canonical", target.key, distance, jaccard), "honored"
        return None, "mismatch"

    def _match_content(self, doc: Document, content_hash: str) -> _Match | None:
        cluster_id = self.store.find_exact(doc.scope, content_hash)
        if cluster_id is not None:
            cluster = self.store.get_cluster(cluster_id)
            if cluster is not None:
                return _Match(cluster_id, "exact_content", cluster.representative, 0, 1.0)
        fp = doc.fingerprint
        if fp is None or fp.tokens < self.min_tokens:
            return None
        # the SimHash tables are the cheap first probe; every candidate is confirmed by near_match
        close = sorted(
            (hamming(stored, fp.simhash), cid)
            for stored, cid in self.store.simhash_candidates(doc.scope, fp.simhash, self.max_distance)
        )
        for _, cid in close:
            match = self._confirm(fp, cid)
            if match is not None:
                return match
        return self._match_bands(doc, fp, exclude={cid for _, cid in close})

    def _confirm(self, fp: Fingerprint, cluster_id: str) -> _Match | None:
        """A near-duplicate match with the cluster's representative, or None."""
        cluster = self.store.get_cluster(cluster_id)
        rep = self.store.get_url(cluster.representative) if cluster else None
        rep_fp = self.fingerprint_of(rep) if rep else None
        if rep_fp is None:
            return None
        ok, distance, jaccard = near_match(
            fp, rep_fp, max_distance=self.max_distance, min_jaccard=self.min_jaccard, min_tokens=self.min_tokens
        )
        return _Match(cluster_id, "near_duplicate", rep.key, distance, jaccard) if ok else None

    def _match_bands(self, doc: Document, fp: Fingerprint, exclude: set[str]) -> _Match | None:
        best: _Match | None = None
        for cid in sorted(self.store.band_candidates(doc.scope, band_hashes(fp.minhash)) - exclude):
            match = self._confirm(fp, cid)
            if match is not None and (best is None or match.jaccard > best.jaccard):
                best = match
        return best

    def _indexable(self, record: UrlRecord) -> bool:
        return record.simhash is not None and (record.tokens or 0) >= self.min_tokens

    def _bands_of(self, key: str, minhash: bytes | None = None) -> tuple[int, ...]:
        minhash = minhash if minhash is not None else self.store.get_minhash(key)
        return band_hashes(minhash) if minhash else ()

    def _found_cluster(self, record: UrlRecord, doc: Document) -> Decision:
        cid = cluster_id_for(doc.scope, record.content_hash)
        # a cluster outlives the content it was named after (its founder may have changed
        # or gone): never take over a live cluster's id
        salt = 0
        while self.store.get_cluster(cid) is not None:
            salt += 1
            cid = cluster_id_for(doc.scope, f"{record.content_hash}/{record.key}/{salt}")
        # the exact hash is claimed before the cluster is written: where another process of a
        # shared store founded a cluster for the same text meanwhile, this document joins it
        # (cluster ids are named after the content, so the other process's may be this one's)
        owner = self.store.claim_exact(doc.scope, record.content_hash, cid)
        owner_cluster = self.store.get_cluster(owner) if owner is not None else None
        if owner_cluster is not None:
            return self._join(record, doc, _Match(owner, "exact_content", owner_cluster.representative, 0, 1.0))
        cluster = Cluster(
            cluster_id=cid,
            representative=record.key,
            rep_url=record.url,
            rep_text_length=record.text_length or 0,
            rep_first_run=record.first_run,
            scope=doc.scope,
        )
        record.cluster_id, record.scope = cid, doc.scope
        record.reason = record.duplicate_of = record.distance = record.jaccard = None
        record.status = "new"
        with self.store.batch() as batch:
            self._write_content(batch, record, doc)
            batch.put_cluster(cluster)
            batch.add_member(cid, record.key)
            batch.index_exact(doc.scope, record.content_hash, cid)
            if self._indexable(record):
                batch.index_near(doc.scope, record.simhash, band_hashes(doc.fingerprint.minhash), cid)
        return Decision(
            status="new",
            url=record.url,
            content_hash=record.content_hash,
            simhash=record.simhash,
            cluster_id=cid,
            canonical_url=record.url,
            is_representative=True,
        )

    def _write_content(self, batch: StoreBatch, record: UrlRecord, doc: Document) -> None:
        batch.put_url(record)
        batch.index_raw(doc.raw_hash, record.key)
        if doc.fingerprint is not None and doc.fingerprint.minhash:
            batch.put_minhash(record.key, doc.fingerprint.minhash)
        if doc.text is not None:
            batch.put_text(record.key, doc.text)

    def _join(self, record: UrlRecord, doc: Document, match: _Match) -> Decision:
        cluster = self.store.get_cluster(match.cluster_id)
        old_rep = self.store.get_url(cluster.representative)
        me = Candidate(record.key, record.url, record.text_length or 0, record.first_run, record.canonical_alias)
        incumbent = Candidate(
            cluster.representative,
            cluster.rep_url,
            cluster.rep_text_length,
            cluster.rep_first_run,
            cluster.rep_canonical_alias,
        )
        wins = representative_order(me, self.authority) < representative_order(incumbent, self.authority)
        record.cluster_id, record.scope = match.cluster_id, doc.scope
        if match.reason == "rel_canonical":
            same = self._same_text(record, match)
            record.status = "exact_duplicate" if same else "near_duplicate"
        else:
            record.status = "exact_duplicate" if match.reason == "exact_content" else "near_duplicate"
        decision = Decision(
            status=record.status,
            url=record.url,
            content_hash=record.content_hash,
            simhash=record.simhash,
            cluster_id=match.cluster_id,
            reason=match.reason,
        )
        cluster.size += 1
        with self.store.batch() as batch:
            batch.add_member(match.cluster_id, record.key)
            batch.index_exact(doc.scope, record.content_hash, match.cluster_id)
            if wins and old_rep is not None:
                distance = self._distance(record, old_rep)
                old_rep.reason = "exact_content" if old_rep.content_hash == record.content_hash else "near_duplicate"
                old_rep.duplicate_of, old_rep.distance = record.key, distance
                old_rep.status = "exact_duplicate" if old_rep.reason == "exact_content" else "near_duplicate"
                batch.put_url(old_rep)
                if self._indexable(old_rep):
                    batch.unindex_near(doc.scope, old_rep.simhash, self._bands_of(old_rep.key), match.cluster_id)
                if self._indexable(record):
                    batch.index_near(doc.scope, record.simhash, band_hashes(doc.fingerprint.minhash), match.cluster_id)
                cluster.representative, cluster.rep_url = record.key, record.url
                cluster.rep_text_length, cluster.rep_first_run = record.text_length or 0, record.first_run
                cluster.rep_canonical_alias = record.canonical_alias
                cluster.max_distance = max(cluster.max_distance, distance or 0)
                record.reason = record.duplicate_of = record.distance = record.jaccard = None
                decision.canonical_url = record.url
                decision.supersedes = [old_rep.url]
                decision.duplicate_of = old_rep.url
                decision.distance = distance
                decision.is_representative = True
            else:
                rep_distance = self._distance(record, old_rep) if old_rep is not None else match.distance
                record.reason = match.reason
                record.duplicate_of = match.duplicate_of
                record.distance = match.distance if match.distance is not None else rep_distance
                record.jaccard = match.jaccard
                cluster.max_distance = max(cluster.max_distance, rep_distance or 0)
                decision.canonical_url = cluster.rep_url
                decision.duplicate_of = self._url_of(match.duplicate_of)
                decision.distance = record.distance
                decision.jaccard = match.jaccard
            self._write_content(batch, record, doc)
            batch.put_cluster(cluster)
        return decision

    def _same_text(self, record: UrlRecord, match: _Match) -> bool:
        target = self.store.get_url(match.duplicate_of) if match.duplicate_of else None
        return target is not None and target.content_hash == record.content_hash

    @staticmethod
    def _distance(a: UrlRecord, b: UrlRecord) -> int | None:
        if a.simhash is None or b.simhash is None:
            return 0 if a.content_hash == b.content_hash else None
        return hamming(a.simhash, b.simhash)

    # -- lifecycle ----------------------------------------------------------
    def forget(self, key: str, http_status: int) -> str | None:
        """The URL is gone (404/410) or now redirects: take it out of its cluster.

        Returns the URL of the member that now represents the cluster when the
        gone URL was its representative, so that it can be fetched and emitted
        with ``supersedes``.
        """
        record = self.store.get_url(key)
        if record is None:
            return None
        record.status, record.http_status, record.last_seen = "deleted", http_status, self.clock()
        return self._forget_content(record)

    def _forget_content(self, record: UrlRecord) -> str | None:
        """Take ``record`` out of its cluster (content changed or gone), in one batch.

        The record is written in the same batch, without its cluster. Returns the
        promoted representative's URL when there is one.
        """
        cid = record.cluster_id
        if cid is None:
            with self.store.batch() as batch:
                batch.put_url(record)
            return None
        cluster = self.store.get_cluster(cid)
        others = [k for k in self.store.cluster_members(cid) if k != record.key]
        other_records = [r for r in (self.store.get_url(k) for k in others) if r is not None]
        is_rep = cluster is not None and cluster.representative == record.key
        bands = self._bands_of(record.key) if is_rep and self._indexable(record) else ()
        content_hash = record.content_hash
        record.cluster_id = None
        record.reason = record.duplicate_of = record.distance = record.jaccard = None
        promoted = None
        with self.store.batch() as batch:
            batch.remove_member(cid, record.key)
            if not any(r.content_hash == content_hash for r in other_records):
                batch.unindex_exact(record.scope, content_hash)
            if is_rep and self._indexable(record):
                batch.unindex_near(record.scope, record.simhash, bands, cid)
            if not other_records:
                batch.delete_cluster(cid)
            elif cluster is not None:
                cluster.size = len(other_records)
                if is_rep:
                    promoted = self._promote(batch, cluster, other_records).url
                batch.put_cluster(cluster)
            batch.delete_minhash(record.key)
            batch.delete_text(record.key)
            batch.put_url(record)
        return promoted

    def _promote(self, batch: StoreBatch, cluster: Cluster, members: list[UrlRecord]) -> UrlRecord:
        by_key = {r.key: r for r in members}
        best = choose_representative(
            (Candidate(r.key, r.url, r.text_length or 0, r.first_run, r.canonical_alias) for r in members),
            self.authority,
        )
        rep = by_key[best.key]
        cluster.representative, cluster.rep_url = rep.key, rep.url
        cluster.rep_text_length, cluster.rep_first_run = rep.text_length or 0, rep.first_run
        cluster.rep_canonical_alias = rep.canonical_alias
        cluster.max_distance = 0
        for other in members:
            if other.key == rep.key:
                continue
            other.duplicate_of = rep.key
            other.distance = self._distance(other, rep)
            if other.reason != "rel_canonical":
                other.reason = "exact_content" if other.content_hash == rep.content_hash else "near_duplicate"
            cluster.max_distance = max(cluster.max_distance, other.distance or 0)
            batch.put_url(other)
        rep.reason = rep.duplicate_of = rep.distance = rep.jaccard = None
        batch.put_url(rep)
        if self._indexable(rep):
            batch.index_near(cluster.scope, rep.simhash, self._bands_of(rep.key), cluster.cluster_id)
        return rep

    def mark_unchanged(self, key: str) -> None:
        """A conditional GET answered 304: the document is as it was."""
        record = self.store.get_url(key)
        if record is None:
            return
        record.status, record.last_seen = "unchanged", self.clock()
        with self.store.batch() as batch:
            batch.put_url(record)
