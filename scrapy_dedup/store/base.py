"""The store interface.

Every backend keeps the same things: the frontier (URL keys scheduled, per
crawl run), URL records, URL variants, and the content index (exact hashes,
SimHash permutation tables, MinHash LSH bands, clusters).  The dedup logic
(:mod:`scrapy_dedup.decide.frontier`, :mod:`scrapy_dedup.decide.index`) talks to this
interface only; reports read through it too.

Reads go straight to the store.  Writes that belong to one decision go into a
:class:`StoreBatch` and are applied atomically when the ``with`` block exits,
so a crash never leaves a document half-indexed.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from scrapy_dedup.core.records import Cluster, UrlRecord

#: Version of the on-disk layout (keys and values).  A change is a migration.
STORE_FORMAT = 2


#: the oldest store format ``scrapy dedup migrate`` brings up to date (0.1.0 wrote format 2)
OLDEST_MIGRATABLE = 2


def format_problem(path: str, stored_format: Any) -> str | None:
    """Why a store of ``stored_format`` cannot be used as it is, or None when it can."""
    if stored_format is None or stored_format == STORE_FORMAT:
        return None
    if isinstance(stored_format, int) and OLDEST_MIGRATABLE <= stored_format < STORE_FORMAT:
        return (
            f"the dedup store {path!r} has store format {stored_format}, from an earlier version; this "
            f"version uses format {STORE_FORMAT}: run `scrapy dedup migrate --store {path}` to "
            "migrate it in place (copy the directory first to keep the old one)"
        )
    return (
        f"the dedup store {path!r} has store format {stored_format!r}; this version reads format "
        f"{STORE_FORMAT} (and migrates formats {OLDEST_MIGRATABLE} to {STORE_FORMAT - 1})"
    )


class StoreError(Exception):
    """The store cannot be opened or used (locked, incompatible, corrupt)."""


class StoreLocked(StoreError):
    """Another process holds the store (embedded backends are single-process)."""


class StoreWriteError(StoreError):
    """A write did not reach the store (disk full, I/O error); what was written before stands."""


class IncompatibleStore(StoreError):
    """The store was written with other fingerprint or layout parameters."""


class StoreBatch(abc.ABC):
    """Writes applied together when the batch closes."""

    @abc.abstractmethod
    def put_url(self, record: UrlRecord) -> None: ...

    @abc.abstractmethod
    def put_variant(
        self, url: str, key: str, seen_at: float, previous: dict | None = None, reason: str = "seen"
    ) -> None:
        """Record that ``url`` was dropped before fetch as a variant of ``key`` (and why)."""

    @abc.abstractmethod
    def put_alias(self, target_key: str, url: str, reason: str) -> None:
        """Index ``url`` under the key it points to (redirects, URL variants) for lookups."""

    @abc.abstractmethod
    def delete_alias(self, target_key: str, url: str) -> None: ...

    @abc.abstractmethod
    def put_cluster(self, cluster: Cluster) -> None: ...

    @abc.abstractmethod
    def delete_cluster(self, cluster_id: str) -> None: ...

    @abc.abstractmethod
    def add_member(self, cluster_id: str, key: str) -> None: ...

    @abc.abstractmethod
    def remove_member(self, cluster_id: str, key: str) -> None: ...

    @abc.abstractmethod
    def index_exact(self, scope: str, content_hash: str, cluster_id: str) -> None: ...

    @abc.abstractmethod
    def unindex_exact(self, scope: str, content_hash: str) -> None: ...

    @abc.abstractmethod
    def index_raw(self, raw_hash: str, key: str) -> None: ...

    @abc.abstractmethod
    def put_minhash(self, key: str, minhash: bytes) -> None: ...

    @abc.abstractmethod
    def put_text(self, key: str, text: str) -> None:
        """Keep a document's text (for diffs in reports); replaces the previous one."""

    @abc.abstractmethod
    def delete_text(self, key: str) -> None: ...

    @abc.abstractmethod
    def delete_minhash(self, key: str) -> None: ...

    @abc.abstractmethod
    def index_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        """Enter a representative's fingerprints in the permutation tables and bands."""

    @abc.abstractmethod
    def unindex_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None: ...


class DedupStore(abc.ABC):
    """One store of one crawl (by default one per spider).

    ``DEDUP_STORE_BACKEND`` names the class; the crawl builds it as
    ``Backend(path, params, cache_mb=DEDUP_STORE_CACHE_MB)`` and reports open an
    existing one with ``Backend.open_existing(path)``.
    """

    #: parameters recorded at creation; opening with others raises IncompatibleStore
    params: dict[str, Any]

    # -- life cycle ---------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def open_existing(cls, path: str) -> DedupStore:
        """Open a store for reading, with the parameters it was written with."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def begin_run(self) -> int:
        """Start a crawl run; returns its number (1 for the first run)."""

    @property
    @abc.abstractmethod
    def run(self) -> int:
        """The current run number (0 before the first run)."""

    @abc.abstractmethod
    def batch(self) -> AbstractContextManager[StoreBatch]: ...

    # -- frontier -----------------------------------------------------------
    @abc.abstractmethod
    def frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
        """Mark ``key`` scheduled in ``run``.

        Returns None for a key never seen, else the run it was last scheduled in
        and the URL it was first scheduled with.
        """

    @abc.abstractmethod
    def frontier_size(self) -> int: ...

    # -- URL records --------------------------------------------------------
    @abc.abstractmethod
    def get_url(self, key: str) -> UrlRecord | None: ...

    @abc.abstractmethod
    def iter_urls(self) -> Iterator[UrlRecord]: ...

    @abc.abstractmethod
    def get_variant(self, url: str) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    def iter_aliases_of(self, key: str) -> Iterator[tuple[str, str]]:
        """(url, reason) of every redirect and URL variant that points to ``key``."""

    # -- free-form metadata (not checked on open) -------------------------
    @abc.abstractmethod
    def get_meta(self, name: str) -> Any: ...

    @abc.abstractmethod
    def put_meta(self, name: str, value: Any) -> None:
        """Keep a JSON value, e.g. the URL rules a crawl keyed its URLs with."""

    @abc.abstractmethod
    def iter_variants(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(url, {"key", "first_seen", "last_seen", "count"}) for every variant."""

    # -- content index ------------------------------------------------------
    @abc.abstractmethod
    def find_exact(self, scope: str, content_hash: str) -> str | None: ...

    @abc.abstractmethod
    def find_raw(self, raw_hash: str) -> str | None: ...

    @abc.abstractmethod
    def get_minhash(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    def get_text(self, key: str) -> str | None:
        """The text kept for ``key`` (``DEDUP_KEEP_TEXT``), or None."""

    @abc.abstractmethod
    def simhash_candidates(
        self, scope: str, simhash: int, max_distance: int | None = None
    ) -> Iterator[tuple[int, str]]:
        """(stored simhash, cluster id) sharing at least one 16-bit block with ``simhash``.

        With ``max_distance``, only those within that Hamming distance.
        """

    @abc.abstractmethod
    def band_candidates(self, scope: str, bands: Iterable[int]) -> set[str]:
        """Cluster ids that collide with ``bands`` in at least one LSH band."""

    @abc.abstractmethod
    def get_cluster(self, cluster_id: str) -> Cluster | None: ...

    @abc.abstractmethod
    def cluster_members(self, cluster_id: str) -> list[str]: ...

    @abc.abstractmethod
    def iter_clusters(self) -> Iterator[Cluster]: ...

    def __enter__(self) -> DedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
