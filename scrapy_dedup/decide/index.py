"""The content layer's decisions: exact and near duplicates, clusters, lifecycle.

Scrapy-free: the pipeline hands it a :class:`Document` and gets a
:class:`Decision`, made here and nowhere else.  :class:`ContentIndex` is three
rooms, one per question a reader has:

- :mod:`~scrapy_dedup.decide.matching`: why did this page match?
- :mod:`~scrapy_dedup.decide.clusters`: who represents the cluster?
- :mod:`~scrapy_dedup.decide.lifecycle`: what happens when a page changes or goes away?

The writes of one decision go to the store in one atomic batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scrapy_dedup.core.records import UrlRecord, record_time
from scrapy_dedup.decide.clusters import Clusters, cluster_id_for
from scrapy_dedup.decide.decision import Decision, Document
from scrapy_dedup.decide.lifecycle import Lifecycle
from scrapy_dedup.decide.matching import Matching
from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import get_url, index_raw, raw_index_prefix

__all__ = ["ContentIndex", "Decision", "Document", "cluster_id_for"]


class ContentIndex(Matching, Clusters, Lifecycle):
    def __init__(
        self,
        store: DedupStore,
        run: int,
        *,
        max_distance: int,
        min_jaccard: float,
        min_tokens: int,
        authority: Sequence[str] = (),
        extraction: Mapping[str, object] = EXTRACT_PARAMS,
        clock: Callable[[], float] = record_time,
    ) -> None:
        self.store, self.run, self.clock = store, run, clock
        # what made the texts (ExtractOptions.extraction): a body seen before skips extraction
        # only when its text was made the same way
        self.raw_prefix = raw_index_prefix(extraction)
        # what confirms a near duplicate, and who represents a cluster
        self.max_distance, self.min_jaccard, self.min_tokens = max_distance, min_jaccard, min_tokens
        self.authority = tuple(authority)

    # -- deciding -----------------------------------------------------------
    def ingest(self, doc: Document) -> Decision:
        """Decide ``doc`` and record the decision. Raises
        :class:`~scrapy_dedup.store.base.DecisionBusy`, having done nothing, when another
        process of a shared store is deciding the same URL key (see ``hold_document``)."""
        decision = self._decide(doc)
        if doc.promoted:
            # a member fetched again because it now represents its cluster: it is emitted
            if decision.status == "unchanged":
                decision.status, decision.is_representative = "new", True
                decision.canonical_url = decision.url
            if decision.is_representative:
                decision.supersedes = [*decision.supersedes, *doc.supersedes]
        return decision

    def _decide(self, doc: Document) -> Decision:
        # a shared store: another process may decide this page at the same moment; the
        # decision holds its URL key until its writes are in. A near duplicate decided at the
        # same moment elsewhere may be kept too: settling merges them.
        with self.store.hold_document(doc.key):
            return self._decide_held(doc)

    def _decide_held(self, doc: Document) -> Decision:
        now = self.clock()
        record = get_url(self.store, doc.key) or UrlRecord(key=doc.key, url=doc.url, first_seen=now, first_run=self.run)
        record.last_seen = now
        record.kind = "document"
        record.title = doc.title
        fp = doc.fingerprint
        content_hash = fp.content_hash if fp is not None else doc.raw_hash

        if fp is not None and fp.tokens == 0:
            # a page without text is no document: like a hub, it is fetched again
            record.status, record.raw_hash, record.kind = "skipped_empty", doc.raw_hash, "hub"
            promoted = self._forget_content(record)
            if not doc.recalled:
                # its body, met again (the next run, or under another URL), skips extraction
                with self.store.batch() as batch:
                    index_raw(batch, self.raw_prefix + doc.raw_hash, record.key)
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
        record.plain_text = doc.plain_text
        record.canonical_alias = match is not None and match.reason == "rel_canonical"
        if match is None:
            decision = self._found_cluster(record, doc, "updated" if updated else "new")
        else:
            decision = self._join(record, doc, match)
        decision.canonical = canonical_outcome
        decision.promoted = promoted
        return decision
