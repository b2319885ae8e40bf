"""State shared by the components of one crawl: config, store, frontier, index.

The add-on installs several components (dupefilter, middlewares, pipeline);
they must see one store, because an embedded store allows one process and
one handle.  ``DedupRuntime.of(crawler)`` returns the crawl's single runtime;
the store opens on first use and closes when the engine stops.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import weakref
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from scrapy.utils.misc import load_object
from scrapy.utils.project import data_path

from scrapy_dedup.core.bands import BANDS, BLOCKS, ROWS
from scrapy_dedup.core.fingerprints import FINGERPRINT_PARAMS
from scrapy_dedup.core.urls import url_key
from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS
from scrapy_dedup.decide.frontier import Frontier
from scrapy_dedup.decide.index import ContentIndex
from scrapy_dedup.crawl.settings import DedupConfig
from scrapy_dedup.store.base import DedupStore, StoreError, StoreWriteError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_runtimes: weakref.WeakKeyDictionary[Any, DedupRuntime] = weakref.WeakKeyDictionary()


def store_params(config: DedupConfig) -> dict[str, Any]:
    """What makes two crawls' fingerprints comparable; recorded in the store."""
    return {
        "fingerprint": dict(FINGERPRINT_PARAMS),
        "simhash_blocks": BLOCKS,
        "lsh_bands": BANDS,
        "lsh_rows": ROWS,
        "max_distance": config.max_distance,
    }


def url_rules(config: DedupConfig, settings: Any) -> dict[str, Any]:
    host_rules = settings.get("DEDUP_HOST_RULES") or {}
    return {
        "host_rules": json.loads(host_rules) if isinstance(host_rules, str) else dict(host_rules),
        "tracking_params": list(config.tracking_params),
        "session_params": list(config.session_params),
    }


def default_store_path(spider_name: str) -> str:
    return data_path(f"dedup/{spider_name}", createdir=True)


class DedupRuntime:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.config = DedupConfig.from_settings(crawler.settings)
        self.stats = crawler.stats
        self._store: DedupStore | None = None
        self._frontier: Frontier | None = None
        self._index: ContentIndex | None = None
        #: item id -> the response it came from (filled by the spider middleware)
        self.item_sources: dict[int, Any] = {}
        self.canonical_waits = CanonicalWaits(self.config.canonical_timeout, self.config.canonical_max_depth)
        self._key = functools.lru_cache(maxsize=4096)(self._make_key)
        self._store_error: StoreWriteError | None = None
        crawler.signals.connect(self.close, signal=signals.engine_stopped)

    @classmethod
    def of(cls, crawler: Crawler) -> DedupRuntime:
        runtime = _runtimes.get(crawler)
        if runtime is None:
            runtime = _runtimes[crawler] = cls(crawler)
        return runtime

    # -- URL keys -----------------------------------------------------------
    def key(self, url: str) -> str:
        """The URL key under this crawl's rules (a page's URL is keyed by several components)."""
        return self._key(url)

    def _make_key(self, url: str) -> str:
        return url_key(
            url,
            self.config.host_rules,
            tracking_params=self.config.tracking_params,
            session_params=self.config.session_params,
        )

    # -- the store and what sits on it --------------------------------------
    @property
    def store_path(self) -> str:
        if self.config.store:
            return self.config.store
        spider = getattr(self.crawler, "spider", None)
        return default_store_path(spider.name if spider else "default")

    @property
    def store(self) -> DedupStore:
        if self._store is None:
            backend = load_object(self.config.store_backend)
            self._store = backend(self.store_path, store_params(self.config), cache_mb=self.config.store_cache_mb)
            run = self._store.begin_run()
            # what the URL keys were made with, so reports key a looked-up URL the same way
            self._store.put_meta("url_rules", url_rules(self.config, self.crawler.settings))
            self._store.put_meta("extraction", dict(EXTRACT_PARAMS))
            logger.info("dedup store %s opened, run %d", self.store_path, run)
        return self._store

    @property
    def frontier(self) -> Frontier:
        if self._frontier is None:
            self._frontier = Frontier(self.store, self.store.run, revisit_after=self.config.revisit_after)
        return self._frontier

    @property
    def index(self) -> ContentIndex:
        if self._index is None:
            self._index = ContentIndex(
                self.store,
                self.store.run,
                max_distance=self.config.max_distance,
                min_jaccard=self.config.min_jaccard,
                min_tokens=self.config.min_tokens,
                authority=self.config.authority,
            )
        return self._index

    def open(self) -> None:
        """Open the store (raises StoreError, e.g. StoreLocked, when it cannot be used)."""
        try:
            _ = self.store  # the property opens it
        except StoreError as exc:
            logger.error("scrapy-dedup cannot start: %s", exc)
            raise

    def refetch_promoted(self, url: str, supersedes: list[str], like: Any = None) -> None:
        """Fetch a member that now represents its cluster, to emit it.

        ``supersedes`` lists the URLs it replaces downstream; ``like`` is a request
        whose callback and errback it reuses.
        """
        from scrapy import Request

        self.inc("doc/promoted")
        self.crawler.engine.crawl(
            Request(
                url,
                callback=getattr(like, "callback", None),
                errback=getattr(like, "errback", None),
                dont_filter=True,
                meta={"dedup_promoted": True, "dedup_supersedes": list(supersedes)},
            )
        )

    def release_canonical(self, key: str) -> None:
        self.canonical_waits.release(key)

    def failed(self, where: str, message: str, *args: Any) -> None:
        """Count and log the exception being handled; the page or item passes through.

        A store that cannot be written (disk full) is not one bad page: it is said once, in one
        line that names the store and the cause, and the crawl stops (``dedup_store_error``).
        """
        exc = sys.exc_info()[1]
        if isinstance(exc, StoreWriteError):
            self.store_failed(exc)
            return
        self.inc(f"error/{where}")
        logger.exception("scrapy-dedup " + message, *args)

    def store_failed(self, exc: StoreWriteError) -> None:
        self.inc("error/store_write")
        if self._store_error is not None:
            return
        self._store_error = exc
        logger.error("scrapy-dedup stops the crawl: %s", exc)
        engine = self.crawler.engine
        if engine is None:
            return
        if hasattr(engine, "close_spider_async"):
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(engine.close_spider_async(reason="dedup_store_error"))
        else:  # Scrapy 2.13
            engine.close_spider(self.crawler.spider, "dedup_store_error")

    def inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"dedup/{key}", count)

    def close(self) -> None:
        self.canonical_waits.release_all()
        if self._store is not None:
            self._store.close()
            logger.info("dedup store %s closed", self.store_path)
            self._store = self._frontier = self._index = None


class CanonicalWaits:
    """Pages waiting for their rel=canonical target to be processed.

    A page that names a canonical the store does not know yet waits (at most
    ``timeout`` seconds) until the target has been ingested, has turned out to
    be a hub, or failed.  A page never waits on a chain longer than
    ``max_depth`` or on a cycle (A names B, B names A).
    """

    def __init__(self, timeout: float, max_depth: int) -> None:
        self.timeout = timeout
        self.max_depth = max_depth
        self._waiters: dict[str, list[Deferred]] = {}
        self._waits_for: dict[str, str] = {}

    def blocked(self, key: str, target: str) -> str | None:
        """Why ``key`` must not wait for ``target`` (``loop``, ``depth``), or None."""
        depth, current = 0, target
        while current in self._waits_for:
            current = self._waits_for[current]
            depth += 1
            if current == key:
                return "loop"
            if depth >= self.max_depth:
                return "depth"
        return None

    async def wait(self, key: str, target: str) -> bool:
        """Wait for ``target``; False when the wait timed out."""
        from twisted.internet import reactor

        d: Deferred = Deferred()
        self._waiters.setdefault(target, []).append(d)
        self._waits_for[key] = target
        timer = reactor.callLater(self.timeout, _fire, d, False)
        try:
            return await maybe_deferred_to_future(d)
        finally:
            self._waits_for.pop(key, None)
            if timer.active():
                timer.cancel()

    def release(self, target: str) -> None:
        for d in self._waiters.pop(target, ()):
            _fire(d, True)

    def release_all(self) -> None:
        for target in list(self._waiters):
            self.release(target)


def _fire(d: Deferred, value: bool) -> None:
    if not d.called:
        d.callback(value)
