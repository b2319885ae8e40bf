"""The state the components of one crawl share: config, store, frontier, content index.

The add-on installs several components (dupefilter, middlewares, pipeline);
they must see one store, because an embedded store allows one process and one
handle.  That state is an extension, :class:`DedupState`: Scrapy builds it
before the engine, the components get it with ``DedupState.of(crawler)``
(``crawler.get_extension``), the first component that needs the store opens it
explicitly (the dupefilter when the scheduler opens, so that a store another
crawl holds fails the crawl at start), and it closes when the engine stops.

It is also the one place where a document that is gone, has moved or was taken
over is handled: :meth:`DedupState.retire` and :meth:`DedupState.take_over`.
"""

from __future__ import annotations

import logging
import sys
import weakref
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.project import data_path

from scrapy_dedup.core.bands import BANDS, BLOCKS, ROWS
from scrapy_dedup.core.fingerprints import FINGERPRINT_PARAMS
from scrapy_dedup.core.records import record_time
from scrapy_dedup.crawl.owed import PendingRequests, promoted_id
from scrapy_dedup.crawl.settings import DedupConfig, SettingError, unknown_settings
from scrapy_dedup.crawl.sources import ItemSources
from scrapy_dedup.crawl.waits import CanonicalWaits, crawl_closing
from scrapy_dedup.crawl.workers import DecisionThread
from scrapy_dedup.decide.chunk_layer import OWED as CHUNKS_OWED, ChunkLayer
from scrapy_dedup.decide.frontier import Frontier
from scrapy_dedup.decide.index import ContentIndex
from scrapy_dedup.store import is_redis_url
from scrapy_dedup.store.base import PENDING, DedupStore, StoreError, StoreWriteError
from scrapy_dedup.store.open import backend_class, open_store as opened, unusable
from scrapy_dedup.store.records import get_meta, pending_held_elsewhere, put_meta

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler

    from scrapy_dedup.core.records import UrlRecord

logger = logging.getLogger(__name__)


class _ReportedOnce(logging.Filter):
    """Leaves out asyncio's report of a crawl that failed to start ("Task exception was never
    retrieved", with its traceback) when the error is one scrapy-dedup logged in one line."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: weakref.WeakSet[BaseException] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or exc not in self.reported


_REPORTED_ONCE = _ReportedOnce()

#: Request meta keys that say how one request was fetched (Scrapy's downloader and middlewares:
#: its slot, latency, redirects, retries, cache entry, start flag), not what it is for.
_FETCH_META = frozenset({
    "download_slot", "download_latency", "redirect_urls", "redirect_reasons", "redirect_times",
    "redirect_ttl", "retry_times", "cached_response", "cache_timestamp", "is_start_request",
})


def _of_a_fetch(key: str) -> bool:
    """Whether a request's meta ``key`` belongs to that request alone: :data:`_FETCH_META`,
    private keys (``_...``) and this project's (``dedup_...``, ``dont_dedup``)."""
    return key in _FETCH_META or key.startswith(("_", "dedup_")) or key == "dont_dedup"


def _cannot_start(exc: Exception) -> None:
    """Say in one line why the crawl cannot start; it fails with ``exc`` (exit status 1),
    without a second report."""
    logger.error("scrapy-dedup cannot start: %s", exc)
    _REPORTED_ONCE.reported.add(exc)
    logging.getLogger("asyncio").addFilter(_REPORTED_ONCE)  # a filter added twice is kept once


def store_params(config: DedupConfig) -> dict[str, Any]:
    """What makes two crawls' fingerprints comparable; recorded in the store."""
    return {
        "fingerprint": dict(FINGERPRINT_PARAMS),
        "simhash_blocks": BLOCKS,
        "lsh_bands": BANDS,
        "lsh_rows": ROWS,
        "max_distance": config.max_distance,
    }


def default_store_path(spider_name: str) -> str:
    return data_path(f"dedup/{spider_name}", createdir=True)


def store_path(config: DedupConfig, crawler: Crawler | None) -> str:
    if config.store:
        return config.store
    spider = getattr(crawler, "spider", None)
    return default_store_path(spider.name if spider else "default")


def redis_options(config: DedupConfig, crawler: Crawler | None) -> dict[str, Any]:
    """The key prefix and retries of a Redis store (nothing for other backends)."""
    if not config.store or not is_redis_url(config.store):
        return {}
    from scrapy_dedup.store.redis.functions import RetryPolicy

    spider = getattr(crawler, "spider", None)
    prefix = config.redis_prefix or f"dedup:{spider.name if spider else 'default'}"
    return {
        "prefix": prefix,
        "retry": RetryPolicy(retries=config.redis_retries),
        "lease_ms": int(config.redis_lease * 1000),
    }


def open_store(
    config: DedupConfig, crawler: Crawler | None, admit: Callable[[DedupStore], None] | None = None
) -> DedupStore:
    """Open the configured store for writing (:func:`scrapy_dedup.store.open.open_store`; ``admit``
    may refuse it before anything is written), start a crawl run, record what keys and text
    were made with.

    Raises StoreError, in words that name the setting or the path, when the backend cannot be
    loaded (its client library is not installed) or the store's directory cannot be made."""
    backend = backend_class(config.store_backend)  # first: a Redis store's options need its client
    try:
        path = store_path(config, crawler)
    except OSError as exc:  # the project's data directory cannot be made
        raise unusable(exc, None, default=True) from None
    store = opened(
        path,
        store_params(config),
        backend=backend,
        cache_mb=config.store_cache_mb,
        default=not config.store,
        # what the URL keys were made with, so reports key a looked-up URL the same way
        meta={"url_rules": config.url_rules.to_json(), "extraction": config.extract_options.extraction()},
        admit=admit,
        **redis_options(config, crawler),
    )
    # the backend's own path: a URL's password never reaches the log
    logger.info("dedup store %s opened, run %d", store.path, store.run)
    return store


class DedupState:
    """The extension that holds one crawl's dedup state (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        try:
            self.config = DedupConfig.from_settings(crawler.settings)
        except SettingError as exc:
            _cannot_start(exc)
            raise
        for warning in unknown_settings(crawler.settings):
            logger.warning("%s", warning)
        self.stats = crawler.stats
        #: item -> the response it came from (filled by the spider middleware)
        self.sources = ItemSources()
        self.canonical_waits = CanonicalWaits(
            self.config.canonical_timeout, self.config.canonical_max_depth, lambda: crawl_closing(crawler)
        )
        #: the thread the pipeline decides documents on, off the reactor thread
        self.decisions = DecisionThread()
        #: set by :meth:`open`, None again after :meth:`close`
        self.store: DedupStore | None = None
        self.frontier: Frontier | None = None
        self.index: ContentIndex | None = None
        #: the chunk layer (DEDUP_CHUNKS, or chunk statuses an earlier crawl left to settle)
        self.chunks: ChunkLayer | None = None
        #: the requests the store owes, seen from the crawl
        self.pending = PendingRequests(self)
        #: requests an interrupted run left owed, counted when the store opened
        self.pending_at_start = 0
        #: the run the current crawl started in: a run that resumes an interrupted one
        #: continues it, so that pages count as first seen in the same run
        self.first_run = 0
        #: when this job began (record time; None: a job an older version began)
        self.job_started: float | None = None
        #: when this process opened the store: what was decided before is not its own
        self._store_error: StoreWriteError | None = None
        # the dupefilter opens it earlier, when the scheduler opens; this covers components
        # listed by hand without it
        crawler.signals.connect(self.open, signal=signals.spider_opened)
        crawler.signals.connect(self.close, signal=signals.engine_stopped)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupState:
        state = cls(crawler)
        if getattr(crawler, "spider", None) is not None:
            # a crawl starting: the store opens before the engine does, so that a store that
            # cannot be used fails the crawl before anything of it is set up
            state.open()
        return state

    @classmethod
    def of(cls, crawler: Crawler) -> DedupState:
        """The crawl's state; installed as an extension here when the settings did not list it
        (components listed by hand, without the add-on)."""
        state = crawler.get_extension(cls)
        if state is None:
            state = build_from_crawler(cls, crawler)
            crawler.extensions.middlewares = (*crawler.extensions.middlewares, state)
        return state

    def key(self, url: str) -> str:
        """The URL key under this crawl's rules."""
        return self.config.url_rules.key(url)

    def open(self) -> None:
        """Open the store (raises StoreError, e.g. StoreLocked, when it cannot be used); idempotent."""
        if self.store is not None:
            return
        try:
            self.store = open_store(self.config, self.crawler, admit=self._admit)
        except StoreError as exc:
            _cannot_start(exc)
            raise
        store, run = self.store, self.store.run
        job = get_meta(store, "job") or {}
        resumed = bool(self.pending_at_start)
        self.first_run = int(job.get("first_run", run)) if resumed else run
        # when the job began: what it fetched since is not fetched again when it resumes
        self.job_started = job.get("started") if resumed else record_time()
        put_meta(store, "job", self._job(run, "running"))
        self.frontier = Frontier(store, run, revisit_after=self.config.revisit_after, first_run=self.first_run,
                                 job_started=self.job_started)
        self.index = ContentIndex(
            self.store,
            self.first_run,
            max_distance=self.config.max_distance,
            min_jaccard=self.config.min_jaccard,
            min_tokens=self.config.min_tokens,
            authority=self.config.authority,
            extraction=self.config.extract_options.extraction(),
        )
        config = self.config
        if config.chunks or get_meta(store, CHUNKS_OWED):
            self.chunks = ChunkLayer(store, config.chunk_rules)

    def _admit(self, store: DedupStore) -> None:
        """Refuse a store whose owed requests another spider's crawl left (before its run begins)."""
        self.pending_at_start = store.count(PENDING)
        job = get_meta(store, "job") or {}
        spider = self._spider_name()
        if self.pending_at_start and job.get("spider") not in (None, spider):
            # its owed requests are another spider's, with that spider's callbacks and
            # allowed_domains: resumed here, they would be crawled as this spider's
            raise StoreError(
                f"the store {store.path} holds {self.pending_at_start:,} requests owed by an interrupted "
                f"crawl of spider {job['spider']!r}: finish it with `scrapy crawl {job['spider']}`, or give "
                f"spider {spider!r} a store of its own (DEDUP_STORE)"
            )

    def spider_closed(self) -> None:
        """The end of the crawl: settle the clusters, then the chunk statuses
        (:func:`~scrapy_dedup.decide.settle.settle_store`).

        Only when no other process writes the store: a process that closes cannot know when
        another one stops writing, so the last one to close settles (or ``scrapy dedup settle``
        once they are done). A crawl cut short before this leaves the settling to the next one."""
        store = self.store
        if store is None or self._store_error is not None:
            return
        from scrapy_dedup.decide.settle import settle_store

        # documents gone or taken over change who represents what, without a cluster settled
        moved = any(
            self.stats.get_value(f"dedup/doc/{k}", 0) for k in ("deleted", "redirected", "promoted", "superseded")
        )
        try:
            elsewhere = store.writing_elsewhere()
            if elsewhere:
                logger.info(
                    "dedup: %d other crawl process(es) write this store: the last one to close settles it "
                    "(or run `scrapy dedup settle` once every crawl process of this store is done)",
                    elsewhere,
                )
                return
            done = settle_store(store, self.config, moved=moved)
        except StoreWriteError as exc:
            self.store_failed(exc)
            return
        except Exception:
            self.failed("settle", "could not settle the store; `scrapy dedup settle` settles it")
            return
        result = done.clusters
        if result is not None:
            self.inc("settle/revised", result.revised)
            self.inc("settle/documents", result.documents)
            self.inc("settle/exact_duplicate", result.exact_duplicate)
            self.inc("settle/near_duplicate", result.near_duplicate)
            logger.info("dedup settled: %s", result)
        chunks = done.chunks
        if chunks is None:
            return
        self.inc("chunks/revised", chunks.revised)
        self.inc("chunks/settled", chunks.chunks)
        self.inc("chunks/boilerplate_learned", chunks.boilerplate)
        logger.info(
            "dedup chunks settled: %d chunks of %d documents in representative order, %d status(es) revised; "
            "%d boilerplate line(s) learned in %d group(s)%s",
            chunks.chunks,
            chunks.documents,
            chunks.revised,
            chunks.boilerplate,
            chunks.groups,
            f"; {chunks.without_text} document(s) without a kept text were left out" if chunks.without_text else "",
        )
        if chunks.left_owed:
            logger.info("dedup chunks: pages were recorded while settling; the next crawl to close settles them")

    def _job(self, run: int, state: str) -> dict[str, Any]:
        """The job's metadata: its first run, its run now, when it began, its state, the
        Jaccard it confirms near duplicates with (what a report of a store not settled yet shows),
        and its spider's name (another spider does not resume it)."""
        return {"first_run": self.first_run, "run": run, "started": self.job_started, "state": state,
                "min_jaccard": self.config.min_jaccard, "spider": self._spider_name()}

    def _spider_name(self) -> str | None:
        spider = getattr(self.crawler, "spider", None)
        return getattr(spider, "name", None)

    def close(self) -> None:
        self.canonical_waits.release_all()
        self.decisions.close()
        if self.store is None:
            return
        store = self.store
        self.store = self.frontier = self.index = self.chunks = None
        try:
            owed = store.count(PENDING)
            elsewhere = pending_held_elsewhere(store) if owed else 0
            put_meta(store, "job", self._job(store.run, "complete" if not owed else "interrupted"))
            state = closing_state(owed, elsewhere)
            owed -= elsewhere  # what the next run of this process would resume
        except StoreWriteError as exc:
            # the store failed under the crawl (said once already): what it owes stays owed
            self.store_failed(exc)
            owed, state = 1, "interrupted: the store failed"
        try:
            store.close()
        except StoreWriteError as exc:
            self.store_failed(exc)
        logger.info(
            "dedup store %s closed, run %d: %s%s",
            store.path,
            store.run,
            state,
            "" if not owed else " (run the crawl again to resume)",
        )

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

    @property
    def store_broken(self) -> bool:
        """The store failed under the crawl, which is stopping."""
        return self._store_error is not None

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
            spider = self.crawler.spider
            if spider is not None:
                engine.close_spider(spider, "dedup_store_error")

    def inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"dedup/{key}", count)

    # -- gone, moved, taken over --------------------------------------------
    def retire(
        self, key: str, url: str, http_status: int, stat: str, like: Request | None, record: UrlRecord | None = None,
    ) -> bool:
        """A document is gone (404/410) or has moved (a redirect): forget it and count it
        (``dedup/<stat>``); when it represented its cluster, :meth:`take_over`.

        ``record``: the URL record of ``key`` as the caller just wrote it, read otherwise.
        DecisionBusy, having done nothing, while another process of a shared store holds
        ``key`` (:meth:`ContentIndex.forget`). Returns whether ``key`` held a document.
        """
        assert self.index is not None  # documents retire only while the store is open
        if record is None:
            record = self.index.known_content(key)
        if record is None or not record.has_content:
            return False
        promoted = self.index.forget(key, http_status)
        self.inc(stat)
        self.take_over(promoted, [url], like)
        return True

    def take_over(self, promoted: str | None, supersedes: list[str], like: Request | None) -> None:
        """Fetch ``promoted``, the member that now represents a cluster, to emit it.

        ``supersedes`` lists the URLs it replaces downstream; ``like`` is a request
        whose callback, errback, ``cb_kwargs`` and meta it reuses (a ``CrawlSpider``'s callback
        reads its rule from the meta), less what that request's own fetch put there.
        """
        if not promoted:
            return
        self.inc("doc/promoted")
        meta = {k: v for k, v in getattr(like, "meta", {}).items() if not _of_a_fetch(k)}
        request = Request(
            promoted,
            callback=getattr(like, "callback", None),
            errback=getattr(like, "errback", None),
            cb_kwargs=dict(getattr(like, "cb_kwargs", {})),
            dont_filter=True,
            meta={**meta, "dedup_promoted": True, "dedup_supersedes": list(supersedes)},
        )
        # owed like any request: an interruption must not lose the take-over
        self.pending.owe(request, promoted_id(self.key(promoted)))
        self.crawler.engine.crawl(request)

    def record_redirect(self, request: Request) -> None:
        """Record the source URLs of a redirected request as aliases of its URL.

        DecisionBusy, the aliases not recorded yet, while another process of a
        shared store holds the key of a source that held a document (:meth:`retire`); calling
        it again once that process let go finishes the job (a source retired already is not
        retired twice)."""
        sources = request.meta.get("redirect_urls")
        if not sources:
            return
        target_key = self.key(request.url)
        keyed = [(url, self.key(url)) for url in sources]
        for url, key in keyed:
            if key != target_key:
                # a document that now redirects: its content moves to the target, not kept twice
                self.retire(key, url, 301, "doc/redirected", like=request)
        assert self.frontier is not None  # redirects are recorded only while the store is open
        recorded = self.frontier.record_redirect(keyed, target_key, request.meta.get("redirect_reasons", ()))
        self.inc("url/redirect", recorded)
        for _, key in keyed:
            self.canonical_waits.release(key)


def closing_state(owed: int, elsewhere: int = 0) -> str:
    """How a closing process describes the crawl: ``owed`` requests in the store, ``elsewhere`` of
    them held by other processes of a shared store (alive, or dead with a lease running).

    >>> closing_state(0)
    'complete'
    >>> closing_state(3)
    'interrupted: 3 pending'
    >>> closing_state(1200, 1200)
    'done here; 1,200 pending held by other processes of the crawl'
    >>> closing_state(5, 2)
    'interrupted: 3 pending (and 2 held by other processes of the crawl)'
    """
    if not owed:
        return "complete"
    own = owed - elsewhere
    if not own:
        return f"done here; {elsewhere:,} pending held by other processes of the crawl"
    others = f" (and {elsewhere:,} held by other processes of the crawl)" if elsewhere else ""
    return f"interrupted: {own:,} pending{others}"
