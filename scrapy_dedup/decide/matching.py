"""Why did this page match?  Exact content, rel=canonical, then near duplicates.

A document is compared with cluster representatives only (the only
fingerprints in the near-duplicate indexes).  Candidates come from the exact
index, the SimHash tables and the MinHash bands; each is confirmed by
:func:`~scrapy_dedup.core.fingerprints.near_match`.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrapy_dedup.core.bands import band_hashes
from scrapy_dedup.core.fingerprints import Fingerprint, fingerprint, hamming, near_match
from scrapy_dedup.core.records import MAX_REDIRECT_HOPS, UrlRecord
from scrapy_dedup.decide.decision import Document
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import find_exact, find_raw, get_cluster, get_minhash, get_text, get_url

#: the fingerprints of a page without text (what extraction finding none gives)
NO_TEXT = fingerprint("")


@dataclass(slots=True)
class Match:
    cluster_id: str
    #: exact_content, near_duplicate or rel_canonical
    reason: str
    #: key of the member matched (the representative, or the canonical target)
    duplicate_of: str | None
    distance: int | None = None
    jaccard: float | None = None


class Matching:
    """The matching half of :class:`~scrapy_dedup.decide.index.ContentIndex`."""

    store: DedupStore
    max_distance: int
    min_jaccard: float
    min_tokens: int
    #: the raw index's keys under the running extraction (``raw_index_prefix``)
    raw_prefix: str

    def known_content(self, key: str) -> UrlRecord | None:
        """The URL record of ``key`` if it holds indexed content."""
        record = get_url(self.store, key)
        return record if record is not None and record.has_content else None

    def fingerprint_of(self, record: UrlRecord) -> Fingerprint | None:
        if record.simhash is None or record.content_hash is None:
            return None
        minhash = get_minhash(self.store, record.key) or b""
        return Fingerprint(
            content_hash=record.content_hash,
            simhash=record.simhash,
            minhash=minhash,
            tokens=record.tokens or 0,
            length=record.text_length or 0,
        )

    def recall(self, raw_hash: str) -> Fingerprint | None:
        """Fingerprints of a byte-identical body seen before (skips extraction): those of its
        text, or of no text for a body the same extraction found none in (a frameset, a page
        its scripts fill: fetched again on every run, like a hub)."""
        key = find_raw(self.store, self.raw_prefix + raw_hash)
        record = get_url(self.store, key) if key else None
        if record is None or record.raw_hash != raw_hash:
            return None
        if record.status == "skipped_empty":
            return NO_TEXT
        if not record.has_content:
            return None  # a gone or emptied page keeps its hashes but no longer its MinHash
        return self.fingerprint_of(record)

    def resolve(self, key: str, max_hops: int = MAX_REDIRECT_HOPS) -> str:
        """Follow recorded redirects from ``key`` (a bounded number of hops)."""
        seen = {key}
        for _ in range(max_hops):
            record = get_url(self.store, key)
            if record is None or record.status != "redirect" or record.duplicate_of is None:
                break
            if record.duplicate_of in seen:
                break
            key = record.duplicate_of
            seen.add(key)
        return key

    def _near(
        self, fp: Fingerprint, other: Fingerprint, text: str | None = None, other_key: str | None = None
    ) -> tuple[bool, int, float]:
        texts = None
        # a candidate is decided by the exact Jaccard of the two texts, and their languages, when
        # both are kept (DEDUP_KEEP_TEXT); pages too short for near matching need no read
        if text is not None and other_key is not None and min(fp.tokens, other.tokens) >= self.min_tokens:
            other_text = get_text(self.store, other_key)
            if other_text is not None:
                texts = (text, other_text)
        return near_match(
            fp,
            other,
            max_distance=self.max_distance,
            min_jaccard=self.min_jaccard,
            min_tokens=self.min_tokens,
            texts=texts,
        )

    def _match_canonical(self, doc: Document, content_hash: str) -> tuple[Match | None, str]:
        """The page's verified rel=canonical target, and the outcome: honored, mismatch, unverified."""
        assert doc.canonical_key is not None, "asked for a page that names a rel=canonical"
        target = self.known_content(self.resolve(doc.canonical_key))
        if target is None:
            return None, "unverified"
        assert target.cluster_id is not None, "known content is in a cluster"
        if target.scope != doc.scope:
            return None, "mismatch"  # restricted text never collapses into another scope
        if target.content_hash == content_hash:
            return Match(target.cluster_id, "rel_canonical", target.key, 0, 1.0), "honored"
        target_fp = self.fingerprint_of(target)
        if doc.fingerprint is not None and target_fp is not None:
            ok, distance, jaccard = self._near(doc.fingerprint, target_fp, doc.text, target.key)
            if ok:
                return Match(target.cluster_id, "rel_canonical", target.key, distance, jaccard), "honored"
        return None, "mismatch"

    def _match_content(self, doc: Document, content_hash: str) -> Match | None:
        cluster_id = find_exact(self.store, doc.scope, content_hash)
        if cluster_id is not None:
            cluster = get_cluster(self.store, cluster_id)
            if cluster is not None:
                return Match(cluster_id, "exact_content", cluster.representative, 0, 1.0)
        fp = doc.fingerprint
        if fp is None or fp.tokens < self.min_tokens:
            return None
        bands = band_hashes(fp.minhash) if fp.minhash else ()  # as the decision's first reads ask
        near = self.store.near_candidates(doc.scope, fp.simhash, bands, self.max_distance)
        # the SimHash tables' candidates, closest first, are confirmed first; every candidate is
        # confirmed by near_match
        close = sorted((hamming(stored, fp.simhash), cid) for stored, cid in near.simhash)
        for _, cid in close:
            match = self._confirm(fp, cid, doc.text)
            if match is not None:
                return match
        return self._match_bands(doc, fp, near.bands - {cid for _, cid in close})

    def _confirm(self, fp: Fingerprint, cluster_id: str, text: str | None = None) -> Match | None:
        """A near-duplicate match with the cluster's representative, or None."""
        cluster = get_cluster(self.store, cluster_id)
        rep = get_url(self.store, cluster.representative) if cluster else None
        rep_fp = self.fingerprint_of(rep) if rep else None
        if rep is None or rep_fp is None:
            return None
        ok, distance, jaccard = self._near(fp, rep_fp, text, rep.key)
        return Match(cluster_id, "near_duplicate", rep.key, distance, jaccard) if ok else None

    def _match_bands(self, doc: Document, fp: Fingerprint, candidates: set[str]) -> Match | None:
        """The best near-duplicate match of the clusters the bands found, or None."""
        best: Match | None = None
        best_jaccard = 0.0
        for cid in sorted(candidates):
            match = self._confirm(fp, cid, doc.text)
            if match is None:
                continue
            assert match.jaccard is not None, "a confirmed match carries its Jaccard"
            if best is None or match.jaccard > best_jaccard:
                best, best_jaccard = match, match.jaccard
        return best
