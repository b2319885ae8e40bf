"""Where a URL's content went: its canonical URL, why, and how far from it.

The store keeps, per URL record, the cluster it belongs to; the cluster names
its representative.  The canonical URL of a member is the representative's
URL; a redirect follows its target (a bounded chain); a URL variant dropped
before fetch takes the canonical of its URL key.

The reason is stated against the representative, not against the member a
page happened to match when it was ingested: a page whose text equals the
representative's is ``exact_content``, a different text is ``near_duplicate``
(with its Hamming distance to the representative), and a page that declared
its canonical stays ``rel_canonical``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from scrapy_dedup.core.fingerprints import hamming
from scrapy_dedup.core.records import MAX_REDIRECT_HOPS, Cluster, UrlRecord, duplicate_reason, duplicate_status
from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import get_cluster, get_url, iter_variants

#: longest redirect chain followed (a loop or a longer chain stops there)
MAX_HOPS = MAX_REDIRECT_HOPS

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A bounded cache, so that a scan of millions of URLs keeps flat memory."""

    def __init__(self, load: Callable[[K], V], size: int = 4096) -> None:
        self._load = load
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def __call__(self, key: K) -> V:
        try:
            self._data.move_to_end(key)
            return self._data[key]
        except KeyError:
            value = self._data[key] = self._load(key)
            if len(self._data) > self._size:
                self._data.popitem(last=False)
            return value


@dataclass(slots=True)
class Placement:
    """What a URL is to the store: canonical or alias, and of what."""

    #: the document's canonical URL; None for a URL that holds no document (hub, gone, empty)
    canonical_url: str | None
    #: why the URL is not its document's canonical (records.ALIAS_REASONS); None for a canonical
    reason: str | None = None
    #: Hamming distance to the canonical, for near duplicates only
    distance: int | None = None
    cluster_id: str | None = None
    #: a member of a cluster that does not represent it: ``exact_duplicate`` when its text is
    #: the representative's, else ``near_duplicate`` (records.duplicate_status), whatever its reason
    duplicate: str | None = None

    @property
    def is_alias(self) -> bool:
        return self.reason is not None


class Resolver:
    def __init__(self, store: DedupStore, cache_size: int = 4096) -> None:
        self.store = store
        self.cluster = LRU(partial(get_cluster, store), cache_size)
        self.record = LRU(partial(get_url, store), cache_size)

    def representative(self, cluster: Cluster) -> UrlRecord | None:
        return self.record(cluster.representative)

    def place(self, record: UrlRecord) -> Placement:
        if record.status == "redirect" or record.reason == "redirect":
            return self._place_redirect(record)
        if record.cluster_id is None:
            return Placement(canonical_url=None)
        cluster = self.cluster(record.cluster_id)
        if cluster is None:  # a dangling cluster id: report what the record says
            return Placement(record.url, record.reason, record.distance, record.cluster_id)
        if cluster.representative == record.key:
            return Placement(cluster.rep_url, None, None, cluster.cluster_id)
        rep = self.representative(cluster)
        reason = self.reason_against(record, rep)
        distance = self.distance(record, rep) if reason == "near_duplicate" else None
        relation = duplicate_reason(record.content_hash, rep.content_hash) if rep is not None else reason
        duplicate = duplicate_status("near_duplicate" if relation == "rel_canonical" else relation)
        return Placement(cluster.rep_url, reason, distance, cluster.cluster_id, duplicate)

    @staticmethod
    def reason_against(record: UrlRecord, rep: UrlRecord | None) -> str:
        if record.reason == "rel_canonical":
            return "rel_canonical"
        if rep is None:
            return record.reason or "near_duplicate"
        return duplicate_reason(record.content_hash, rep.content_hash)

    @staticmethod
    def distance(record: UrlRecord, rep: UrlRecord | None) -> int | None:
        if rep is not None and record.simhash is not None and rep.simhash is not None:
            return hamming(record.simhash, rep.simhash)
        return record.distance

    def _place_redirect(self, record: UrlRecord) -> Placement:
        seen = {record.key}
        current = record
        for _ in range(MAX_HOPS):
            target_key = current.duplicate_of
            if target_key is None or target_key in seen:
                break
            seen.add(target_key)
            target = self.record(target_key)
            if target is None:
                # the target was scheduled but its record is not written (yet)
                return Placement(target_key, "redirect")
            if target.status == "redirect" or target.reason == "redirect":
                current = target
                continue
            placement = self.place(target)
            return Placement(placement.canonical_url or target.url, "redirect", None, placement.cluster_id)
        return Placement(current.url if current is not record else None, "redirect")

    def variants(self, wanted: Callable[[str], bool], progress: Any) -> Iterator[tuple[str, dict, Placement]]:
        """(url, variant record, placement) of every URL dropped before fetch that ``wanted`` keeps."""
        for url, variant in url_variants(self.store, progress):
            if wanted(url):
                yield url, variant, self.place_variant(url, variant)

    def place_variant(self, url: str, variant: dict) -> Placement:
        """A URL dropped before fetch because its URL key was already scheduled."""
        key = variant.get("key")
        record = self.record(key) if key else None
        if record is None:
            return Placement(key, "url_variant")
        placement = self.place(record)
        return Placement(placement.canonical_url or record.url, "url_variant", None, placement.cluster_id)


def anchor_link(url: str) -> bool:
    """A link to an ``#anchor`` of a page, which stores of earlier versions recorded as a URL
    variant: it is the page, not a variant (nor a duplicate), and the reports leave it out."""
    return "#" in url


def url_variants(store: DedupStore, progress: Any) -> Iterator[tuple[str, dict]]:
    """The store's URL variants, without :func:`anchor_link` ones."""
    for url, variant in progress(iter_variants(store), "URL variants"):
        if not anchor_link(url):
            yield url, variant


def host_of(url: str) -> str:
    """``host[:port]`` of a URL, lower case, without user info (``?`` when there is none)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return "?"
    if not host:
        return "?"
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return host if port is None or port == default else f"{host}:{port}"


def host_matcher(spec: str | None) -> Callable[[str], bool]:
    """``--host example.com`` matches any port of the host; ``--host example.com:8080`` one port."""
    if not spec:
        return lambda url: True
    spec = spec.lower().strip()
    with_port = spec.rsplit("]", 1)[-1].count(":") == 1

    def match(url: str) -> bool:
        host = host_of(url)
        return host == spec if with_port else host.rsplit(":", 1)[0] == spec or host == spec

    return match
