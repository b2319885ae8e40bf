"""What happens when a page is fetched again, changes, or goes away.

An unchanged page keeps its place; a changed or gone one leaves its cluster
in one batch (its fingerprints leave the indexes, the next member is promoted
when it was the representative, the URL record stays).
"""

from __future__ import annotations

from collections.abc import Callable

from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.decide.decision import Decision, Document
from scrapy_dedup.store.base import CLUSTER, MINHASH, TEXT, DedupStore, StoreBatch
from scrapy_dedup.store.records import (
    get_cluster,
    get_url,
    get_urls,
    index_raw,
    members_of,
    put_cluster,
    put_text,
    remove_member,
    unindex_exact,
)


class Lifecycle:
    """The lifecycle half of :class:`~scrapy_dedup.decide.index.ContentIndex`."""

    store: DedupStore
    clock: Callable[[], float]
    #: the first run of the job deciding (a resumed run goes on with it)
    run: int
    max_distance: int
    raw_prefix: str
    _indexable: Callable[[UrlRecord], bool]
    _bands_of: Callable[[str], tuple[int, ...]]
    _url_of: Callable[[str | None], str | None]
    _promote: Callable[[StoreBatch, Cluster, list[UrlRecord]], UrlRecord]

    def forget(self, key: str, http_status: int) -> str | None:
        """The URL is gone (404/410) or now redirects: take it out of its cluster.

        Returns the URL of the member that now represents the cluster when the
        gone URL was its representative, so that it can be fetched and emitted
        with ``supersedes``.

        On a shared store it holds the URL key as a decision does: another process deciding
        the same page goes before or after it, never in between. Raises
        :class:`~scrapy_dedup.store.base.DecisionBusy`, having done nothing, while another
        process holds it (see ``hold_document``).
        """
        with self.store.hold_document(key):
            record = get_url(self.store, key)
            if record is None:
                return None
            record.status, record.http_status, record.last_seen = "deleted", http_status, self.clock()
            return self._forget_content(record)

    def mark_unchanged(self, key: str) -> None:
        """A conditional GET answered 304: the document is as it was."""
        record = get_url(self.store, key)
        if record is None:
            return
        record.status, record.last_seen = "unchanged", self.clock()
        with self.store.batch() as batch:
            batch.put_url(record)

    def _unchanged(self, record: UrlRecord, doc: Document) -> Decision:
        """Fetched again with the same text: nothing moves. The record says ``unchanged`` when
        it came from an earlier job; a page first seen in this job and fetched again in it (a
        killed run's page, resumed) keeps what its first decision said, as an uninterrupted
        job's record does."""
        assert record.cluster_id is not None, "a record with the same text is in its cluster"
        if record.first_run < self.run:
            record.status = "unchanged"
        record.fetch_count = max(record.fetch_count, 1)
        if not doc.recalled:
            # extracted again (an earlier extraction version's store, or only the markup
            # changed): the next fetch of the same body skips extraction
            record.raw_hash = doc.raw_hash
        with self.store.batch() as batch:
            batch.put_url(record)
            if not doc.recalled:
                index_raw(batch, self.raw_prefix + doc.raw_hash, record.key)
                if doc.text is not None:
                    # the same words, perhaps not the same spaces and line breaks: the text a
                    # new crawl of this body keeps
                    put_text(batch, record.key, doc.text, packed=doc.packed_text)
        cluster = get_cluster(self.store, record.cluster_id)
        return Decision(
            status="unchanged",
            url=doc.url,
            content_hash=record.content_hash,
            simhash=record.simhash,
            cluster_id=record.cluster_id,
            canonical_url=cluster.rep_url if cluster else record.url,
            duplicate_of=self._url_of(record.duplicate_of),
            distance=record.distance,
            reason=record.reason,
            # a representative extracted again records its chunks again: their spans point
            # into the text kept now
            is_representative=cluster is not None and cluster.representative == record.key,
        )

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
        indexable = self._indexable(record)
        bands = self._bands_of(record.key) if indexable else ()
        # The cluster's record is read and written again. On a shared store a page that joins
        # the cluster in another process at that moment may be counted wrong or left in a
        # cluster that goes: settling recomputes the clusters from the documents.
        return self._leave_cluster(record, cid, indexable, bands)

    def _leave_cluster(self, record: UrlRecord, cid: str, indexable: bool, bands: tuple[int, ...]) -> str | None:
        cluster = get_cluster(self.store, cid)
        members = members_of(self.store, cluster) if cluster is not None else members_of(self.store, cid)
        others = [k for k in members if k != record.key]
        other_records = get_urls(self.store, others)
        is_rep = cluster is not None and cluster.representative == record.key
        content_hash = record.content_hash
        assert content_hash is not None, "a record in a cluster has its content hash"
        record.cluster_id = None
        record.clear_match()
        promoted = None
        with self.store.batch() as batch:
            remove_member(batch, cid, record.key)
            if not any(r.content_hash == content_hash for r in other_records):
                unindex_exact(batch, record.scope, content_hash)
            if is_rep and indexable:
                assert record.simhash is not None, "an indexable record has its SimHash"
                batch.unindex_near(record.scope, record.simhash, bands, cid)
            if not other_records:
                batch.delete(CLUSTER, cid)
            elif cluster is not None:
                cluster.size = len(other_records)
                if is_rep:
                    promoted = self._promote(batch, cluster, other_records).url
                put_cluster(batch, cluster)
            batch.delete(MINHASH, record.key)
            batch.delete(TEXT, record.key)
            batch.put_url(record)
        return promoted
