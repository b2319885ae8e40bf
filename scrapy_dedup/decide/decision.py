"""What the content index is given (a :class:`Document`) and what it answers (a :class:`Decision`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scrapy_dedup.core.fingerprints import Fingerprint


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
    #: ``text`` as the store keeps it, when an extraction worker packed it (else the store does)
    packed_text: bytes | None = None
    #: fetched again because it now represents its cluster: emitted, replacing ``supersedes``
    promoted: bool = False
    supersedes: tuple[str, ...] = ()
    #: its fingerprint was recalled from a byte-identical body seen before (no extraction)
    recalled: bool = False
    #: the page's title (the item's title field, else its HTML's <title>), or None
    title: str | None = None
    #: its text was served as plain text, not extracted from markup (UrlRecord.plain_text)
    plain_text: bool = False


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
            # the cluster is the document: a member that takes over a cluster keeps its id,
            # so an index upserting by it ends with one copy per document
            "document_id": self.cluster_id,
            "content_hash": self.content_hash,
            "simhash": f"{self.simhash:016x}" if self.simhash is not None else None,
            "cluster_id": self.cluster_id,
            "canonical_url": self.canonical_url,
            "duplicate_of": self.duplicate_of,
            "distance": self.distance,
            "supersedes": list(self.supersedes),
        }
