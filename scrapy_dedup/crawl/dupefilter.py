"""A store-backed ``DUPEFILTER_CLASS``: the seen-set on disk, keyed by ``url_key``.

Unlike Scrapy's ``RFPDupeFilter`` it keeps no fingerprint in memory, drops
URL variants (tracking parameters, session ids, facets outside a host's
allowlist...) that Scrapy's fingerprint keeps apart, remembers what earlier
runs fetched, and records each redirect as an alias of its target (a redirect whose source
another process is deciding waits in the downloader middleware, never on the reactor
thread, then comes back here).

Requests with ``dont_filter=True`` never reach a dupefilter; requests with
``meta["dont_dedup"]`` are let through here.  Both bypass the URL layer.  So does the
copy of an owed request that the store issues again, whose key is marked already.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import NotConfigured
from scrapy.utils.request import referer_str

from scrapy_dedup.crawl.busy import META_REDIRECT_WAITS
from scrapy_dedup.crawl.pending import META_RECHECK, is_owed_copy
from scrapy_dedup.crawl.state import DedupState
from scrapy_dedup.decide.frontier import DROP_SEEN
from scrapy_dedup.store.base import DecisionBusy, StoreWriteError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request

logger = logging.getLogger(__name__)


def _redirect_source(state: DedupState, request: Request) -> str | None:
    """The pending id of the request this one is a redirect of, if any."""
    owed = request.meta.get("dedup_pending")
    sources = request.meta.get("redirect_urls")
    if owed is None or not sources or state.key(sources[-1]) != owed:
        return None  # not a redirect of an owed request (meta copied from a parent, say)
    return owed


def _respelled(state: DedupState, request: Request, key: str) -> list[str]:
    """The URLs ``request`` was redirected from under its own URL key, when it is a redirect to
    its source's key under another spelling (a directory's URL with its slash, ``/news`` to
    ``/news/``): not a page of its own but the one its source was scheduled for. Else none; a
    spelling the redirects went through already is a loop."""
    sources = request.meta.get("redirect_urls")
    if not sources or request.url in sources or state.key(sources[-1]) != key:
        return []
    return [url for url in sources[:-1] if state.key(url) == key] + [sources[-1]]


class DedupDupeFilter(BaseDupeFilter):
    def __init__(self, state: DedupState) -> None:
        self.state = state
        self._logged: set[str] = set()
        self._send_due = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupDupeFilter:
        return cls(DedupState.of(crawler))

    @classmethod
    def from_spider(cls, spider) -> DedupDupeFilter:
        """How scrapy-redis's scheduler builds its dupefilter; it never calls ``open()``,
        so the store opens here, and an unreachable store still fails the crawl at start."""
        dupefilter = cls.from_crawler(spider.crawler)
        dupefilter.open()
        return dupefilter

    @classmethod
    def from_settings(cls, settings) -> DedupDupeFilter:
        raise NotConfigured(
            f"{cls.__name__} needs the crawler (it shares the crawl's dedup state): "
            "build it with from_crawler(crawler) or from_spider(spider)"
        )

    def request_seen(self, request: Request) -> bool:
        if request.meta.get("dont_dedup"):
            return False
        state = self.state
        assert state.store is not None and state.frontier is not None  # opened with the scheduler
        if is_owed_copy(request, state.store.run):
            return False  # owed, and marked in this run when the store issued it
        key = state.key(request.url)
        try:
            if not self._redirect_recorded(request):
                return False  # checked once the redirect is recorded (DedupDownloaderMiddleware)
            spellings = _respelled(state, request, key)
            if spellings:
                # the page its source was scheduled for: marked, and owed under this key, already
                state.frontier.respelled(key, request.url, spellings)
                return False
            known = state.frontier.known_checks
            # marked ahead with its page's other links (PendingSpiderMiddleware), or else: a key
            # the store is asked about is mostly new, so its request is owed with the mark (one
            # call where the store can, see DedupStore.frontier_mark_many)
            offer = state.frontier.offered(key)
            if offer is None and not state.frontier.knows(key):
                offer = state.pending.offer(request, key)
            reason = state.frontier.check(request.url, key, request.meta.get("dedup_original_url"), owe=offer)
            if state.frontier.known_checks != known:
                state.inc("url/seen_known")  # answered without the store
            if not self._send_due:
                # the variants a page's links add wait until its links are all checked (this
                # turn of the reactor), then go to the store in one round trip (a store that
                # wrote them at once has nothing to send)
                from twisted.internet import reactor

                self._send_due = True
                reactor.callLater(0, self._send_waiting)  # type: ignore[arg-type]  # zope-typed reactor
            if reason == DROP_SEEN and request.meta.get(META_RECHECK) and state.frontier.abandoned(key):
                reason = None  # marked in this run by a process that died before owing it
            source = _redirect_source(state, request)
            if reason is None:
                # owed until its outcome is durable; a redirect's source is closed with it
                state.pending.owe(request, key, closes=source, offer=offer)
                return False
            if offer is not None:
                state.pending.withdraw(request)
            if source is not None:
                state.pending.close_ids([source])  # redirected to a URL already known: recorded
        except StoreWriteError as exc:
            state.store_failed(exc)
            return True  # the crawl is stopping: fetch nothing more
        state.inc(f"url/dropped/{reason}")
        request.meta["dedup_dropped"] = reason
        return True

    def _redirect_recorded(self, request: Request) -> bool:
        """Record a redirect's aliases (:meth:`DedupState.record_redirect`). On a shared store,
        False while another process holds the decision of a source that held a document: the
        request is let through unchecked, marked META_REDIRECT_WAITS, and the downloader
        middleware waits for that process off the reactor thread, then sends it back here."""
        if not request.meta.get("redirect_urls"):
            return True
        state = self.state
        try:
            state.record_redirect(request)
        except DecisionBusy:
            request.meta[META_REDIRECT_WAITS] = True
            return False
        return True

    def _send_waiting(self) -> None:
        self._send_due = False
        state = self.state
        if state.store is None or state.store_broken:
            return
        try:
            state.store.flush()
        except StoreWriteError as exc:
            state.store_failed(exc)
        except Exception:
            state.failed("variants", "could not record the URL variants of the last links checked")

    def log(self, request: Request, spider=None) -> None:
        """Called by the scheduler for each request this filter dropped."""
        reason = request.meta.get("dedup_dropped", "seen")
        if self.state.config.debug:
            logger.debug(
                "Dropped before fetch (%s): %s (referer: %s)",
                reason,
                request.url,
                referer_str(request),
                extra={"spider": self.state.crawler.spider},
            )
        elif reason not in self._logged:
            self._logged.add(reason)
            logger.debug(
                "Dropped before fetch (%s): %s - no more such messages will be shown "
                "(see DEDUP_DEBUG to show all of them)",
                reason,
                request.url,
                extra={"spider": self.state.crawler.spider},
            )

    def open(self) -> None:
        # open the store now, so that a store another crawl holds fails the crawl at start
        self.state.open()

    def clear(self) -> None:
        """Called by scrapy-redis's scheduler when it does not persist its queue.

        Deletes nothing: the store is shared by every process of the crawl and by
        later runs (what was fetched, kept and clustered), so one process ending
        must not wipe what the others use.
        """

    def close(self, reason: str) -> None:
        pass
