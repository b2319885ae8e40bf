"""Who represents the cluster?  Founding a cluster, joining one, promoting a member.

A cluster's representative is a pure function of its members
(:mod:`scrapy_dedup.core.representative`); only representatives are in the
near-duplicate indexes, so a chain of small edits cannot glue unrelated pages
together.  The writes of one decision go to the store in one atomic batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash

from scrapy_dedup.core.bands import band_hashes
from scrapy_dedup.core.fingerprints import hamming
from scrapy_dedup.core.records import Cluster, UrlRecord, duplicate_reason, duplicate_status
from scrapy_dedup.core.representative import Candidate, choose_representative, representative_order
from scrapy_dedup.decide.decision import Decision, Document
from scrapy_dedup.decide.matching import Match
from scrapy_dedup.store.base import TEXT, DedupStore, StoreBatch
from scrapy_dedup.store.records import (
    add_member,
    claim_exact,
    get_cluster,
    get_minhash,
    get_url,
    index_exact,
    index_raw,
    put_cluster,
    put_minhash,
    put_text,
)


def cluster_id_for(scope: str, key: str) -> str:
    """A cluster (a document of the export: its ``document_id``) is named after the scope and
    the URL key of its representative when it was founded or settled, so that it keeps its id
    while that representative stays (see :mod:`scrapy_dedup.decide.settle`)."""
    return xxhash.xxh64_hexdigest(f"{scope}\0{key}".encode())


def distance(a: UrlRecord, b: UrlRecord) -> int | None:
    """SimHash distance of two members (0 for two identical binary bodies)."""
    if a.simhash is None or b.simhash is None:
        return 0 if a.content_hash == b.content_hash else None
    return hamming(a.simhash, b.simhash)


class Clusters:
    """The cluster half of :class:`~scrapy_dedup.decide.index.ContentIndex`."""

    store: DedupStore
    min_tokens: int
    authority: Sequence[str]
    raw_prefix: str

    def _indexable(self, record: UrlRecord) -> bool:
        return record.simhash is not None and (record.tokens or 0) >= self.min_tokens

    def _bands_of(self, key: str) -> tuple[int, ...]:
        minhash = get_minhash(self.store, key)
        return band_hashes(minhash) if minhash else ()

    def _url_of(self, key: str | None) -> str | None:
        if key is None:
            return None
        record = get_url(self.store, key)
        return record.url if record is not None else key

    def _found_cluster(self, record: UrlRecord, doc: Document, status: str = "new") -> Decision:
        """A cluster of its own for ``record``; ``status``: ``new``, or ``updated`` for a page
        whose text changed since an earlier run (the record says so, as the item does)."""
        assert record.content_hash is not None, "a page is given its content hash before it is clustered"
        cid = cluster_id_for(doc.scope, record.key)
        # a cluster outlives its founder's content (its founder may have changed and left it
        # to another representative): never take over a live cluster's id
        salt = 0
        while get_cluster(self.store, cid) is not None:
            salt += 1
            cid = cluster_id_for(doc.scope, f"{record.key}/{salt}")
        # the exact hash is claimed before the cluster is written: where another process of a
        # shared store founded a cluster for the same text meanwhile, this document joins it
        owner = claim_exact(self.store, doc.scope, record.content_hash, cid)
        owner_cluster = get_cluster(self.store, owner) if owner is not None else None
        if owner is not None and owner_cluster is not None:
            return self._join(record, doc, Match(owner, "exact_content", owner_cluster.representative, 0, 1.0))
        cluster = Cluster(cid, record.key, record.url, 0, 0, scope=doc.scope)
        cluster.represent(record)
        record.cluster_id, record.scope = cid, doc.scope
        record.clear_match()
        record.status = status
        with self.store.batch() as batch:
            self._write_content(batch, record, doc)
            put_cluster(batch, cluster)  # its representative is its one member: no member set yet
            # the exact entry is the claim above (written already, or going with this batch),
            # unless it named a cluster that was never written (its process died)
            if owner not in (None, cid):
                index_exact(batch, doc.scope, record.content_hash, cid)
            if self._indexable(record):
                assert record.simhash is not None and doc.fingerprint is not None, "an indexable page has its fingerprint"
                batch.index_near(doc.scope, record.simhash, band_hashes(doc.fingerprint.minhash), cid)
        return Decision(
            status=status,
            url=record.url,
            content_hash=record.content_hash,
            simhash=record.simhash,
            cluster_id=cid,
            canonical_url=record.url,
            is_representative=True,
        )

    def _write_content(self, batch: StoreBatch, record: UrlRecord, doc: Document) -> None:
        batch.put_url(record)
        index_raw(batch, self.raw_prefix + doc.raw_hash, record.key)
        if doc.fingerprint is not None and doc.fingerprint.minhash:
            put_minhash(batch, record.key, doc.fingerprint.minhash)
        if doc.text is not None:
            put_text(batch, record.key, doc.text, packed=doc.packed_text)

    def _join(self, record: UrlRecord, doc: Document, match: Match) -> Decision:
        cluster = get_cluster(self.store, match.cluster_id)
        assert cluster is not None, "a match names a live cluster"
        assert record.content_hash is not None, "a page is given its content hash before it is clustered"
        old_rep = get_url(self.store, cluster.representative)
        wins = representative_order(Candidate.of(record), self.authority) < representative_order(
            Candidate.representing(cluster), self.authority
        )
        record.cluster_id, record.scope = match.cluster_id, doc.scope
        # exact or near is said against the representative, as every report says it: a text
        # found in the exact index may be a member's, not the representative's
        if old_rep is not None:
            relation = duplicate_reason(record.content_hash, old_rep.content_hash)
        else:  # a representative without its record: what matched
            relation = match.reason if match.reason != "rel_canonical" else "near_duplicate"
        record.status = duplicate_status(relation)
        reason = "rel_canonical" if match.reason == "rel_canonical" else relation
        decision = Decision(
            status=record.status,
            url=record.url,
            content_hash=record.content_hash,
            simhash=record.simhash,
            cluster_id=match.cluster_id,
            reason=reason,
        )
        cluster.size += 1
        with self.store.batch() as batch:
            add_member(batch, match.cluster_id, record.key)
            index_exact(batch, doc.scope, record.content_hash, match.cluster_id)
            if wins and old_rep is not None:
                gap = distance(record, old_rep)
                old_rep.reason = duplicate_reason(old_rep.content_hash, record.content_hash)
                old_rep.duplicate_of, old_rep.distance = record.key, gap
                old_rep.status = duplicate_status(old_rep.reason)
                batch.put_url(old_rep)
                add_member(batch, match.cluster_id, old_rep.key)  # a member no longer implied
                if self._indexable(old_rep):
                    assert old_rep.simhash is not None, "an indexable record has its SimHash"
                    batch.unindex_near(doc.scope, old_rep.simhash, self._bands_of(old_rep.key), match.cluster_id)
                if self._indexable(record):
                    assert record.simhash is not None and doc.fingerprint is not None, "an indexable page has its fingerprint"
                    batch.index_near(doc.scope, record.simhash, band_hashes(doc.fingerprint.minhash), match.cluster_id)
                cluster.represent(record)
                cluster.max_distance = max(cluster.max_distance, gap or 0)
                record.clear_match()
                if doc.text is None and record.content_hash == old_rep.content_hash:
                    # a byte-identical body skipped extraction: the text it represents now is
                    # the one the old representative kept
                    kept = self.store.get(TEXT, old_rep.key)
                    if kept is not None:
                        put_text(batch, record.key, None, packed=kept)
                decision.canonical_url = record.url
                decision.supersedes = [old_rep.url]
                decision.duplicate_of = old_rep.url
                decision.distance = gap
                decision.is_representative = True
            else:
                rep_distance = distance(record, old_rep) if old_rep is not None else match.distance
                record.reason = reason
                record.duplicate_of = match.duplicate_of
                record.distance = rep_distance if rep_distance is not None else match.distance
                record.jaccard = match.jaccard
                cluster.max_distance = max(cluster.max_distance, rep_distance or 0)
                decision.canonical_url = cluster.rep_url
                decision.duplicate_of = self._url_of(match.duplicate_of)
                decision.distance = record.distance
                decision.jaccard = match.jaccard
            self._write_content(batch, record, doc)
            put_cluster(batch, cluster)
        return decision

    def _promote(self, batch: StoreBatch, cluster: Cluster, members: list[UrlRecord]) -> UrlRecord:
        """The best of the remaining ``members`` now represents ``cluster``; the others point to it."""
        by_key = {r.key: r for r in members}
        rep = by_key[choose_representative((Candidate.of(r) for r in members), self.authority).key]
        cluster.represent(rep)
        cluster.max_distance = 0
        for other in members:
            if other.key == rep.key:
                continue
            other.duplicate_of = rep.key
            other.distance = distance(other, rep)
            if other.reason != "rel_canonical":
                other.reason = duplicate_reason(other.content_hash, rep.content_hash)
            cluster.max_distance = max(cluster.max_distance, other.distance or 0)
            batch.put_url(other)
        rep.clear_match()
        batch.put_url(rep)
        if self._indexable(rep):
            assert rep.simhash is not None, "an indexable record has its SimHash"
            batch.index_near(cluster.scope, rep.simhash, self._bands_of(rep.key), cluster.cluster_id)
        return rep
