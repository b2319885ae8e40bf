"""Value types shared by the core, the store and the reports.

A :class:`UrlRecord` is what the store knows about one URL key: how it was
found, what it served and where its content went.  A :class:`Cluster` is a
set of documents with the same (or nearly the same) text and one
representative.  Both serialise to plain JSON so that a person can read a
record with ``scrapy dedup provenance`` and a later version can migrate it.

A stored record is a JSON array of its fields in declaration order, defaults at the end left
out, the URL as null when it is the key (a cluster's ``rep_url`` when it is the
representative), and a URL record's key (a cluster's id) as null too: the store names the
record by it, and gives it back to :meth:`UrlRecord.from_json` (:meth:`Cluster.from_json`).
A store of millions of URLs keeps one record each, and the names took about a third of a URL
record and two thirds of a cluster (590 -> 374 and 259 -> 90 bytes on average on a crawl of
the demo site; 332 without the key). A URL record's times are stored to the millisecond (12
bytes of about 250). Fields are only ever appended, so a version reads the records of a newer
one (what it does not know is left out); the objects with field names that store format 3 and
earlier wrote are read as well.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import time
import zlib
from dataclasses import dataclass
from typing import Any

#: Statuses a document takes in the content layer (the item's ``dedup.status``).
DOC_STATUSES = ("new", "exact_duplicate", "near_duplicate", "unchanged", "updated")

#: Reasons a URL is not the canonical URL of its document (``aliases`` records).
ALIAS_REASONS = ("url_variant", "redirect", "rel_canonical", "exact_content", "near_duplicate")

#: Recorded redirects followed from one key at most (the crawl and the reports alike).
MAX_REDIRECT_HOPS = 10


def record_time() -> float:
    """Now as a record keeps it: seconds since the epoch, to the millisecond (its stored form)."""
    return round(time.time(), 3)


def duplicate_reason(content_hash: str | None, other_hash: str | None) -> str:
    """Why one member duplicates another: the same canonical text, or a near duplicate.

    >>> duplicate_reason("ab", "ab"), duplicate_reason("ab", "cd"), duplicate_reason(None, None)
    ('exact_content', 'near_duplicate', 'near_duplicate')
    """
    return "exact_content" if content_hash is not None and content_hash == other_hash else "near_duplicate"


def duplicate_status(reason: str) -> str:
    """The document status that goes with a duplicate reason (exact_content: exact_duplicate)."""
    return "exact_duplicate" if reason == "exact_content" else "near_duplicate"


@dataclass(slots=True)
class UrlRecord:
    """Everything the store keeps about one URL key."""

    key: str
    url: str
    #: last outcome: a DOC_STATUSES value, or ``hub``, ``redirect``, ``deleted``,
    #: ``not_modified``, ``skipped_empty``, ``error``
    status: str = "seen"
    #: why this URL is not its document's canonical URL (ALIAS_REASONS), or None
    reason: str | None = None
    #: key of the URL this one duplicates or redirects to
    duplicate_of: str | None = None
    cluster_id: str | None = None
    scope: str = ""
    content_hash: str | None = None
    raw_hash: str | None = None
    simhash: int | None = None
    distance: int | None = None
    jaccard: float | None = None
    tokens: int | None = None
    text_length: int | None = None
    http_status: int | None = None
    etag: str | None = None
    last_modified: str | None = None
    #: ``document`` (produced an item) or ``hub`` (only links)
    kind: str | None = None
    #: the rel=canonical target this page declared, when it did not match
    canonical_mismatch: str | None = None
    #: declared a canonical that it matched: it never represents its cluster
    canonical_alias: bool = False
    first_seen: float = 0.0
    last_seen: float = 0.0
    fetched_at: float | None = None
    fetch_count: int = 0
    #: crawl run in which the URL was first seen (representative tie-break); a run that
    #: resumes an interrupted one counts as the run it resumes
    first_run: int = 0
    #: its page yielded requests for other pages (not its own #anchors) at its last full fetch:
    #: a link source, fetched again on every run like a hub (a document that links is where new
    #: pages appear)
    links: bool = False
    #: the page's title when it was last decided: the item's title field, else its HTML's <title>
    title: str | None = None
    #: its text was served as plain text, not extracted from markup (a Sphinx page's reST
    #: source): a page of the same text extracted from HTML represents it
    plain_text: bool = False

    def to_json(self) -> bytes:
        """The stored form (see the module docstring).

        >>> UrlRecord("http://h/a", "http://h/a", status="new", tokens=0).to_json()
        b'[null,null,"new",null,null,null,"",null,null,null,null,null,0]'
        >>> r = UrlRecord("http://h/a", "http://H/a", fetch_count=2, first_seen=1796307841.6452925)
        >>> UrlRecord.from_json(r.to_json(), "http://h/a").first_seen
        1796307841.645
        """
        # every field is a scalar: read them directly (asdict copies each value deeply)
        values = list(_URL_VALUES(self))
        values[0], values[1] = None, (None if values[1] == values[0] else values[1])
        for at in _URL_TIMES:  # to the millisecond: 4 of a time's 17 digits (12 bytes a record) go
            if type(values[at]) is float:
                values[at] = round(values[at], 3)
        return _dumps(values, _URL_DEFAULTS)

    @classmethod
    def from_json(cls, raw: bytes, key: str | None = None) -> UrlRecord:
        """A record from its stored form; ``key``: what the store names it by (the stored
        form leaves it out)."""
        data = stored_json(raw)
        if isinstance(data, list):
            record = cls(*data[: len(_URL_FIELD_ORDER)])  # fields a newer version appended: left out
            # one string object for each of the few values these take (a store's records, read at
            # once by a settle or a report, kept a copy each: about 240 bytes a record)
            record.status, record.scope = _word(record.status), _word(record.scope)
            if record.reason is not None:
                record.reason = _word(record.reason)
            if record.kind is not None:
                record.kind = _word(record.kind)
            if record.key is None:
                if key is None:
                    raise ValueError("a URL record is stored without its key: give the key it is stored under")
                record.key = key
            if record.url is None:
                record.url = record.key
            return record
        if not data.keys() <= _URL_FIELDS:  # a field from a newer version: keep what we know
            data = {k: v for k, v in data.items() if k in _URL_FIELDS}
        return cls(**data)

    @property
    def has_content(self) -> bool:
        return self.cluster_id is not None

    def clear_match(self) -> None:
        """Forget what this record duplicated: it represents its cluster, or has left it."""
        self.reason = self.duplicate_of = self.distance = self.jaccard = None


_URL_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(UrlRecord))
_URL_FIELDS = frozenset(_URL_FIELD_ORDER)
_URL_DEFAULTS = tuple(f.default for f in dataclasses.fields(UrlRecord))
_URL_VALUES = operator.attrgetter(*_URL_FIELD_ORDER)
#: the times a URL record keeps, stored to the millisecond
_URL_TIMES = tuple(_URL_FIELD_ORDER.index(name) for name in ("first_seen", "last_seen", "fetched_at"))


@dataclass(slots=True)
class Cluster:
    """A group of documents that share their text, exactly or nearly."""

    cluster_id: str
    #: URL key of the representative, and what decides its place (see core.representative)
    representative: str
    rep_url: str
    rep_text_length: int
    rep_first_run: int
    rep_canonical_alias: bool = False
    scope: str = ""
    size: int = 1
    #: largest Hamming distance of a member to the representative
    max_distance: int = 0
    #: digest of the members when this cluster was last settled (decide.settle); a cluster
    #: whose members no longer match it has changed since, and is settled again
    settled: str | None = None
    #: the representative's ``plain_text`` (a field appended after the others, read by the order)
    rep_plain_text: bool = False

    def to_json(self) -> bytes:
        """The stored form (see the module docstring).

        >>> Cluster("00000000000000aa", "http://h/a", "http://h/a", 1200, 1).to_json()
        b'[null,"http://h/a",null,1200,1]'
        """
        values = list(_CLUSTER_VALUES(self))
        values[0] = None
        if values[2] == values[1]:
            values[2] = None
        return _dumps(values, _CLUSTER_DEFAULTS)

    def represent(self, record: UrlRecord) -> None:
        """Make ``record`` the representative (the fields the representative order reads)."""
        self.representative, self.rep_url = record.key, record.url
        self.rep_text_length, self.rep_first_run = record.text_length or 0, record.first_run
        self.rep_canonical_alias, self.rep_plain_text = record.canonical_alias, record.plain_text

    @classmethod
    def from_json(cls, raw: bytes, cluster_id: str | None = None) -> Cluster:
        """A cluster from its stored form; ``cluster_id``: what the store names it by (the
        stored form leaves it out)."""
        data = stored_json(raw)
        if isinstance(data, list):
            cluster = cls(*data[: len(_CLUSTER_FIELD_ORDER)])
            if cluster.cluster_id is None:
                if cluster_id is None:
                    raise ValueError("a cluster is stored without its id: give the id it is stored under")
                cluster.cluster_id = cluster_id
            if cluster.rep_url is None:
                cluster.rep_url = cluster.representative
            return cluster
        return cls(**{k: v for k, v in data.items() if k in _CLUSTER_FIELD_ORDER})


_CLUSTER_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(Cluster))
_CLUSTER_DEFAULTS = tuple(f.default for f in dataclasses.fields(Cluster))
_CLUSTER_VALUES = operator.attrgetter(*_CLUSTER_FIELD_ORDER)
#: what json.dumps(..., separators=(",", ":"), ensure_ascii=False) builds on every call
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_DECODE = json.JSONDecoder().decode


def stored_json(raw: bytes | str) -> Any:
    """A stored JSON value: a record, a change history, a URL variant. The store keeps them in
    UTF-8 (or ASCII): decoded here first, as json.loads spends a third of its time on a bytes
    value finding which encoding it is in."""
    return _DECODE(raw.decode() if isinstance(raw, (bytes, bytearray)) else raw)


#: the values of a few fields many records share (statuses, reasons, scopes), one object each
_WORDS: dict[str, str] = {}
#: values kept in ``_WORDS`` at most (a store's scopes are few; the statuses and reasons fewer)
_MAX_WORDS = 4096


def _word(value: str) -> str:
    found = _WORDS.get(value)
    if found is None and len(_WORDS) < _MAX_WORDS:
        found = _WORDS[value] = value
    return value if found is None else found


def _dumps(values: list, defaults: tuple) -> bytes:
    """``values`` as a JSON array, those at the end that equal their field's default left out."""
    end = len(values)
    while end and (d := defaults[end - 1]) is not dataclasses.MISSING and _same(values[end - 1], d):
        end -= 1
    return _ENCODE(values[:end]).encode()


def _same(value: object, default: object) -> bool:
    # 0 == False == 0.0 in Python: a default is left out only when it is the same value and type
    return type(value) is type(default) and value == default


def pack_text(text: str) -> bytes:
    """A document's text as a store keeps it (``DEDUP_KEEP_TEXT``): UTF-8, zlib level 6.
    Level 1 was 2.3x faster but 13% larger on the PostgreSQL pages (66 against 152 us a page).

    >>> unpack_text(pack_text("caf\\u00e9, " * 3)) == "caf\\u00e9, " * 3
    True
    """
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 6)


def unpack_text(raw: bytes) -> str:
    return zlib.decompress(raw).decode("utf-8", "surrogatepass")
