"""The resumable frontier: requests the crawl still owes, kept in the store.

A request that passes the frontier is *owed* (stored with what it takes to issue it
again, as JOBDIR does: Scrapy's request dict, callbacks by name) until its outcome is
durable: its response went through the spider, every request the callback yielded was
recorded (owed in turn, or dropped as known), and every item it yielded was decided.
A request that fails for good, a redirect whose target is recorded and a 304 are closed too
(no longer owed). One that leaves the crawl any other way (dropped by a middleware: off-site,
robots.txt, any ``IgnoreRequest``; swallowed by one; lost with a callback's exception) is closed
when the process is next idle, with nothing in flight (``dedup/frontier/left``).
A run that starts on a store with requests still owed issues them again, next to the
start requests: a crawl killed at any moment loses nothing.

Two components of the add-on carry the hooks:

- :class:`PendingSpiderMiddleware`, outermost of the spider middlewares: it issues the
  owed requests after the start requests, closes at idle moments those that left the crawl, counts the items of each response and closes
  the response's request once its output is exhausted and every item has left the
  pipelines (``item_scraped``, ``item_dropped``, ``item_error``); it marks a page's new
  links in the frontier and owes them in one call to the store, ahead of the dupefilter's
  checks, when nothing lies between it and the scheduler;
- :class:`PendingDownloaderMiddleware`, innermost of the engine side: it closes a
  request whose download failed for good (retries exhausted), and drops a request that
  a persisted queue (JOBDIR) issued again although the store resumes it itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.core.scheduler import Scheduler
from scrapy.exceptions import DontCloseSpider, DropItem, IgnoreRequest
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object
from twisted.internet import task

from scrapy_dedup.crawl.held import held_back, held_back_async

# the request meta keys and is_owed_copy are read from here by the other components
from scrapy_dedup.crawl.owed import (  # noqa: F401
    META_PENDING,
    META_RECHECK,
    META_RESUMED,
    META_RUN,
    is_owed_copy,
)
from scrapy_dedup.crawl.state import DedupState
from scrapy_dedup.crawl.waits import crawl_closing
from scrapy_dedup.store.base import PENDING, OweOffer, StoreError
from scrapy_dedup.store.records import maybe_elsewhere, pending_held_elsewhere

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

class LeftOwed(IgnoreRequest):
    """A request not fetched, whose owed request stays owed: the crawl stops before it could
    go on, or the store issues or recorded the owed one (:class:`PendingDownloaderMiddleware`
    does not close it)."""


class _StaleRequest(LeftOwed):
    """A copy of a request not to fetch: the store issues the owed one itself, or another
    process fetched it and recorded its outcome."""


class LeftPending(DropItem):
    """An item that could not be decided because the crawl is stopping.

    It is not passed on, and its request stays owed: the next run decides it. Logged at DEBUG:
    the crawl said once why it stops, and ``dedup/doc/left_pending`` counts them.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.log_level = "DEBUG"


@dataclass(eq=False)
class _OpenResponse:
    """A response whose request is not closed yet: its output is still running, or items it
    yielded are still in the pipelines."""

    response: Response
    #: passes over its spider output still running
    outputs: int = 0
    #: items it yielded that have not left the pipelines yet
    items: int = 0
    #: an item was left undecided by a stop: the request stays owed, for the next run
    keep_owed: bool = False
    #: (url key, content hash) of its items emitted, written with the closing in one batch
    emitted: list[tuple[str, str]] = field(default_factory=list)


class PendingSpiderMiddleware:
    """Issues owed requests after the start requests; closes a response's request."""

    def __init__(self, crawler: Crawler) -> None:
        self.state = DedupState.of(crawler)
        self.pending = self.state.pending
        #: id(response) -> the response's output still running or its items in the pipelines
        self._open: dict[int, _OpenResponse] = {}
        crawler.signals.connect(self._item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(self._item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(self._item_error, signal=signals.item_error)
        # requests of a process that died are taken over while the crawl runs
        self._take_over: task.LoopingCall | None = None
        #: the requests that may be on their way elsewhere, held at the last idle moment: id ->
        #: whether this process issued it once more then
        self._held_when_idle: dict[str, bool] = {}
        #: whether this process said it waits for the requests of other processes
        self._said_waiting = False
        #: whether the scheduler's queue is shared with other processes (known once asked)
        self._shared_queue: bool | None = None
        #: when the crawl opened (monotonic), and whether a page's output here yielded anything since
        self._opened_at = 0.0
        self._yielded = False
        #: whether this is the outermost spider middleware (known once the crawl runs)
        self._outermost: bool | None = None
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._idle, signal=signals.spider_idle)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    def _opened(self, spider=None) -> None:
        self._opened_at = time.monotonic()
        if self.state.store is None:
            return
        # a store one process holds hands everything owed over at the start (resume): then
        # this finds nothing (DedupStore.claim_pending)
        self._take_over = task.LoopingCall(self._take_over_abandoned)
        self._take_over.start(max(0.5, self.state.config.redis_lease / 2), now=False)

    def _take_over_abandoned(self) -> None:
        try:
            requests = self.pending.take_over_abandoned()
        except Exception:
            self.state.failed("resume", "could not take over the pending requests of a stopped process")
            return
        self._issue(requests, "took over %d pending requests of a process that stopped")

    def _issue(self, requests: list[Request], message: str) -> None:
        if requests:
            logger.info(message, len(requests))
        for request in requests:
            self.state.crawler.engine.crawl(request)

    def _idle(self, spider=None) -> None:
        state = self.state
        store = state.store
        if store is None or state.store_broken or crawl_closing(state.crawler):
            return
        try:
            waiting = self._close_left(store)
            self._take_over_abandoned()
            elsewhere = pending_held_elsewhere(store)
            starting = not (waiting or elsewhere) and self._others_starting(store)
        except Exception:
            state.failed("resume", "could not count the pending requests of the store")
            return
        if waiting or elsewhere:
            # other processes still owe requests: if one of them dies, its requests are ours
            # to fetch once its leases run out
            if elsewhere and not waiting and not self._said_waiting:
                # said once: a process may wait a whole lease for one that was killed
                self._said_waiting = True
                logger.info(
                    "dedup: nothing left to fetch here; waiting for the %s requests other processes of the "
                    "crawl owe (those of a process that stopped are taken over once DEDUP_REDIS_LEASE, %gs, "
                    "runs out)",
                    f"{elsewhere:,}",
                    state.config.redis_lease,
                )
            raise DontCloseSpider(f"{waiting} requests owed here, {elsewhere} by other processes")
        if starting:
            raise DontCloseSpider("nothing yielded here yet, while other processes of the crawl start")

    def _others_starting(self, store: Any) -> bool:
        """Whether to wait for the other processes of the crawl before ending with nothing done.

        A spider's start requests are not filtered, so nothing is owed for them: of processes
        started together over one shared queue (scrapy-redis), one may pop every start request,
        and the others find nothing to do and nothing owed until its first page has owed its
        links. A process none of whose pages has yielded anything yet waits for that, while
        another process writes the store, for at most one lease (``DEDUP_REDIS_LEASE``) from
        its start."""
        if self._yielded or time.monotonic() - self._opened_at >= self.state.config.redis_lease:
            return False
        return store.writing_elsewhere() > 0

    def _close_left(self, store: Any) -> int:
        """Settle the owed requests that left the crawl without an outcome; returns how many
        this process still holds, to look at again at its next idle moment.

        An idle process has nothing in flight: a request it holds now was dropped on its way
        (off-site, robots.txt, an ``IgnoreRequest`` or an exception anywhere, a middleware that
        swallowed it) without its outcome being recorded, and nothing will fetch it.  A shared
        queue (scrapy-redis) is the exception: it hands a request to whichever process pops it,
        which holds it a moment later (Scrapy's own scheduler keeps its queue, in memory or in
        ``JOBDIR``, to this process: not that one).  So a request the store says may be on its way to another
        process (:func:`~scrapy_dedup.store.records.maybe_elsewhere`) left only when this process held it at two
        idle moments in a row; it is issued once more first, in case the process that popped it
        died before holding it, and closed when held again after that.
        """
        if not self.state.crawler.engine.spider_is_idle():
            return 0  # another handler of this idle moment issued requests: not idle any more
        held = set(store.held_pending())
        passing = maybe_elsewhere(store, held) if self._queue_shared() else set()
        twice = {i: self._held_when_idle[i] for i in passing if i in self._held_when_idle}
        left = (held - passing) | {i for i, reissued in twice.items() if reissued}
        again = {i for i, reissued in twice.items() if not reissued}
        self._held_when_idle = {i: i in again for i in passing - left}
        if left:
            self.pending.close_ids(sorted(left))
            self.state.inc("frontier/left", len(left))
            logger.info(
                "closed %d owed requests that left the crawl without a response (off-site, "
                "robots.txt or another middleware's IgnoreRequest, or a callback's error); "
                "see dedup/frontier/left",
                len(left),
            )
        if again:
            claimed = [(i, blob) for i in sorted(again) if (blob := store.get(PENDING, i)) is not None]
            self._issue(list(self.pending._reissue(claimed, "frontier/reissued")),
                        "issuing again %d pending requests this process holds and no process fetches")
        return len(held - left)

    def _queue_shared(self) -> bool:
        """Whether the crawl's scheduler may hand a request this process owes to another process
        (scrapy-redis's): any scheduler but Scrapy's own, whose queue is this process's."""
        if self._shared_queue is None:
            scheduler = load_object(self.state.crawler.settings["SCHEDULER"])
            # by inheritance: Scrapy's issubclass() takes any class with a scheduler's methods
            self._shared_queue = Scheduler not in getattr(scheduler, "__mro__", ())
        return self._shared_queue

    def _closed(self, spider=None) -> None:
        if self._take_over is not None and self._take_over.running:
            self._take_over.stop()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PendingSpiderMiddleware:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for element in start:
            if isinstance(element, Request):
                # tagged with the run: a copy a persisted queue issues in a later run is stale
                element.meta.setdefault(META_RUN, self.pending.store.run)
            yield element
        try:
            resumed = self.pending.resume()
            for request in resumed:
                yield request
        except Exception:
            self.state.failed("resume", "could not read the pending requests of the store")

    def process_spider_output(self, response: Response, result: Iterable[Any], spider=None) -> Iterator[Any]:
        page = self._begin(response)
        try:
            yield from held_back(result, lambda element: self._count(page, element), self._flush())
        finally:
            self._end(response, page)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider=None
    ) -> AsyncIterator[Any]:
        page = self._begin(response)
        try:
            async for element in held_back_async(result, lambda element: self._count(page, element), self._flush()):
                yield element
        finally:
            self._end(response, page)

    def _flush(self) -> Callable[[list[Any]], list[Any]] | None:
        """What a page's held-back output goes through: the mark-ahead, when it applies."""
        return self._mark_ahead if self._marks_ahead() else None

    def _marks_ahead(self) -> bool:
        """A page's new links are marked and owed together, in one call to the store, when
        nothing can drop them between this middleware and the scheduler's dupefilter: this is
        the outermost spider middleware."""
        if self._outermost is None:
            order = build_component_list(self.state.crawler.settings.getwithbase("SPIDER_MIDDLEWARES"))
            first = load_object(order[0]) if order else None
            self._outermost = isinstance(first, type) and issubclass(first, PendingSpiderMiddleware)
        store = self.state.store
        return self._outermost and store is not None and not self.state.store_broken

    def _mark_ahead(self, elements: list[Any]) -> list[Any]:
        """Mark the new links among ``elements`` ahead of their checks; returns ``elements``."""
        state, frontier = self.state, self.state.frontier
        assert frontier is not None  # _marks_ahead: the store is open
        offers: dict[str, tuple[Request, OweOffer]] = {}
        for element in elements:
            if not isinstance(element, Request) or element.dont_filter or element.meta.get("dont_dedup"):
                continue
            try:
                key = state.key(element.url)
            except Exception:  # noqa: BLE001 -- its check reports it
                continue
            if key in offers or frontier.knows(key):
                continue
            offer = self.pending.offer(element, key)
            if offer is not None:
                offers[key] = (element, offer)
        if not offers:
            return elements
        try:
            frontier.mark_ahead((request.url, key, offer) for key, (request, offer) in offers.items())
            state.inc("url/marked_ahead", len(offers))
        except Exception as exc:  # noqa: BLE001 -- the checks ask the store themselves
            for request, _ in offers.values():
                self.pending.withdraw(request)
            if not isinstance(exc, StoreError):
                state.failed("mark_ahead", "could not mark the links of a page ahead of their checks")
        return elements

    def _count(self, page: _OpenResponse, element: Any) -> Any:
        self._yielded = True
        if isinstance(element, Request):
            # A page issued again in this run: a process that died may have marked this link in
            # the frontier before owing it, so the dupefilter checks again.
            store = self.state.store
            request = getattr(page.response, "request", None)
            resumed = request.meta.get(META_RESUMED) if request is not None else None
            if resumed is not None and store is not None and resumed == store.run:
                element.meta[META_RECHECK] = True
        elif element is not None:
            page.items += 1  # an item: its request closes only once the item left the pipelines
        return element

    def _end(self, response: Response, page: _OpenResponse) -> None:
        page.outputs -= 1
        self._maybe_close(response, page)

    def _begin(self, response: Response) -> _OpenResponse:
        page = self._open.get(id(response))
        if page is None:
            page = self._open[id(response)] = _OpenResponse(response)
        page.outputs += 1
        return page

    def _item_scraped(self, item: Any, response: Any = None, spider=None) -> None:
        # Remember what was emitted, so that a resumed run re-emits only what was cut off;
        # written with the closing when this is the response's last item.
        try:
            emitted = self.pending.emission(item)
        except Exception:
            self.state.failed("owed", "could not read an emitted item")
            emitted = None
        self._item_done(response, keep=False, emitted=emitted)

    def _item_dropped(self, item: Any, response: Any = None, exception: Any = None, spider=None) -> None:
        self._item_done(response, keep=isinstance(exception, LeftPending))

    def _item_error(self, item: Any, response: Any = None, spider=None, failure: Any = None) -> None:
        self._item_done(response, keep=False)

    def _item_done(self, response: Any, keep: bool, emitted: tuple[str, str] | None = None) -> None:
        page = self._open.get(id(response)) if response is not None else None
        if page is None or page.response is not response:
            if emitted is not None:  # an item of no tracked response (an errback's)
                self._close(None, [emitted], getattr(response, "url", "an item"))
            return
        page.items -= 1
        if emitted is not None:
            if page.outputs > 0 or page.items > 0:
                self._close(None, [emitted], response.url)  # now: the request is not done yet
            else:
                page.emitted.append(emitted)  # with the closing, in one batch
        page.keep_owed = page.keep_owed or keep
        self._maybe_close(response, page)

    def _maybe_close(self, response: Response, page: _OpenResponse) -> None:
        if page.outputs > 0 or page.items > 0:
            return
        self._open.pop(id(response), None)
        # an item left undecided by a stop keeps the request owed: the next run decides it
        self._close(None if page.keep_owed else response.request, page.emitted, response.url)

    def _close(self, request: Request | None, emitted: list[tuple[str, str]], url: str) -> None:
        try:
            self.pending.close_request(request, emitted)
        except Exception:
            # a store that cannot be written stops the crawl once; the request stays owed
            self.state.failed("owed", "could not close the request of %s", url)


class PendingDownloaderMiddleware:
    """Closes requests that failed for good; drops stale copies from a persisted queue."""

    def __init__(self, crawler: Crawler) -> None:
        self.state = DedupState.of(crawler)
        self.pending = self.state.pending

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PendingDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider=None) -> None:
        meta = request.meta
        store = self.pending.store
        owed_in, run = meta.get(META_RUN), store.run
        if owed_in is None or owed_in == run:
            if META_PENDING in meta:
                try:
                    # fetched here, whoever owed it: if this process dies, others take it over
                    owed = store.hold_pending(meta[META_PENDING])
                except Exception:
                    self.state.failed("owed", "could not hold the request of %s", request.url)
                    return None
                if not owed:
                    # a shared queue's copy of a request another process took over from one that
                    # died, and whose outcome is recorded: fetching it again would change nothing
                    self.state.inc("frontier/done_elsewhere")
                    raise _StaleRequest(f"fetched and recorded by another process already: {request.url}")
            return None
        # Owed by an earlier run and issued again by a persisted queue (JOBDIR): the store
        # issues every request still owed itself, and what is not owed any more is done.
        self.state.inc("frontier/stale")
        raise _StaleRequest(f"issued again from the store instead: {request.url}")

    def process_exception(self, request: Request, exception: BaseException, spider=None) -> None:
        # innermost on the engine side: an exception that reaches this point is final
        # (RetryMiddleware has given up or was not asked)
        if isinstance(exception, LeftOwed):
            return None  # still owed (a stale copy: the one the store issued is)
        try:
            self.pending.close_request(request)
        except Exception:
            self.state.failed("owed", "could not close the failed request %s", request.url)
        return None
