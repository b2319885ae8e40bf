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
  pipelines (``item_scraped``, ``item_dropped``, ``item_error``); on a shared store it
  marks a page's new links in the frontier and owes them in one round trip, ahead of the
  dupefilter's checks, when nothing lies between it and the scheduler;
- :class:`PendingDownloaderMiddleware`, innermost of the engine side: it closes a
  request whose download failed for good (retries exhausted), and drops a request that
  a persisted queue (JOBDIR) issued again although the store resumes it itself.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, DropItem, IgnoreRequest
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict
from twisted.internet import task

from scrapy_dedup.crawl.canonical import crawl_closing
from scrapy_dedup.crawl.held import held_back, held_back_async
from scrapy_dedup.crawl.state import DedupState
from scrapy_dedup.store.base import PENDING, OweOffer, StoreError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: the item field the pipeline adds (see pipeline.ITEM_FIELD)
ITEM_FIELD = "dedup"

#: request meta: the id the request is owed under, the run that owed it (or issued it
#: again), and the run that issued it again from the store
META_PENDING = "dedup_pending"
META_RUN = "dedup_run"
META_RESUMED = "dedup_resumed"
#: request meta: a link of a page issued again from the store on a shared store; the frontier
#: may have marked it in this run for a process that died before owing it
META_RECHECK = "dedup_recheck"

_PICKLE_PROTOCOL = 4


class LeftOwed(IgnoreRequest):
    """A request not fetched, whose owed request stays owed: the crawl stops before it could
    go on, or the store issues or recorded the owed one (:class:`PendingDownloaderMiddleware`
    does not close it)."""


class _StaleRequest(LeftOwed):
    """A copy of a request not to fetch: the store issues the owed one itself, or another
    process fetched it and recorded its outcome."""


class LeftPending(DropItem):
    """An item that could not be decided because the crawl is stopping.

    It is not passed on, and its request stays owed: the next run decides it.
    """


def is_owed_copy(request: Request, run: int) -> bool:
    """Whether ``request`` is the copy of an owed request that a shared store issued in ``run``
    (resumed, or taken over from a process that stopped), and not a redirect it made."""
    meta = request.meta
    return meta.get(META_RESUMED) == run and META_PENDING in meta and not meta.get("redirect_urls")


def promoted_id(key: str) -> str:
    """The id a take-over fetch is owed under (its URL key may be owed as well)."""
    return key + "\0promoted"


class PendingRequests:
    """What the store owes, seen from the crawl."""

    def __init__(self, state: DedupState) -> None:
        self.state = state
        self._warned_unserializable = False
        self._warned_unresumable = False
        self._method_names: dict[Any, str] = {}

    @property
    def store(self):
        return self.state.store

    # -- owing and settling -------------------------------------------------
    def owe(
        self, request: Request, pending_id: str, closes: str | None = None, offer: OweOffer | None = None
    ) -> None:
        """``request`` passed the frontier: keep it until its outcome is durable.

        ``closes``: the id of a request this one replaces (a redirect's source), closed
        in the same batch.  ``offer``: what :meth:`offer` made of it for the frontier's
        mark, which may have owed it already.
        """
        if offer is not None:
            blob = None if offer.owed else offer.blob
        else:
            blob = self._blob(request, pending_id)
        if blob is None and (closes is None or closes == pending_id):
            return
        with self.store.batch() as batch:
            if blob is not None:
                batch.put_pending(pending_id, blob)
            if closes is not None and closes != pending_id:
                batch.settle_pending(closes)

    def offer(self, request: Request, pending_id: str) -> OweOffer | None:
        """``request`` serialized to be owed under ``pending_id`` with its URL key's mark in
        the frontier (:meth:`DedupStore.frontier_mark_owing`); then :meth:`owe` it with this
        offer if it is fetched, or :meth:`withdraw` the offer if it is dropped.  None for a
        request the store issued again (it is owed already) or one that cannot be serialized."""
        if META_PENDING in request.meta:
            return None
        blob = self._blob(request, pending_id)
        return OweOffer(pending_id, blob) if blob is not None else None

    @staticmethod
    def withdraw(request: Request) -> None:
        """The request an :meth:`offer` was made for is dropped: it is owed under no id."""
        request.meta.pop(META_PENDING, None)
        request.meta.pop(META_RUN, None)

    def _blob(self, request: Request, pending_id: str) -> bytes | None:
        """What the store keeps of ``request``, its meta naming ``pending_id`` and this run;
        None when the store has it already (issued again by this run) or it cannot be kept."""
        meta = request.meta
        run = self.state.store.run
        if meta.get(META_RESUMED) == run and meta.get(META_PENDING) == pending_id:
            meta[META_RUN] = run  # already in the store
            return None
        meta[META_PENDING], meta[META_RUN] = pending_id, run
        blob = self._serialize(request)
        if blob is None:
            del meta[META_PENDING], meta[META_RUN]
        return blob

    def close_request(self, request: Request | None, emitted: Iterable[tuple[str, str]] = ()) -> None:
        """``request`` is done, no longer owed; ``emitted``: (url key, content hash) of the items
        it emitted."""
        pending_id = request.meta.get(META_PENDING) if request is not None else None
        emitted = list(emitted)
        if pending_id is None and not emitted:
            return
        # lost only with the process: the request is still owed then, fetched again and found
        # unchanged, and its item emitted again if the emitted record was lost with it
        with self.store.batch_soon() as batch:
            for key, content_hash in emitted:
                batch.put_emitted(key, content_hash)
            if pending_id is not None:
                batch.settle_pending(pending_id)

    def close_ids(self, pending_ids: Iterable[str]) -> None:
        with self.store.batch() as batch:
            for pending_id in pending_ids:
                batch.settle_pending(pending_id)

    def _serialize(self, request: Request) -> bytes | None:
        try:
            return pickle.dumps(self._request_dict(request), protocol=_PICKLE_PROTOCOL)
        except Exception as exc:
            self.state.inc("frontier/unserializable")
            if not self._warned_unserializable:
                self._warned_unserializable = True
                logger.warning(
                    "Unable to keep request %s in the dedup store for a resumed run (%s: %s); "
                    "it is crawled, but an interrupted run would not issue it again. "
                    "Further ones are only counted in dedup/frontier/unserializable",
                    request,
                    type(exc).__name__,
                    exc,
                )
            return None

    def _request_dict(self, request: Request) -> dict[str, Any]:
        """What ``Request.to_dict(spider=...)`` returns, with callback names looked up once.

        ``to_dict`` scans the spider's members for each callback (about 150 µs a request);
        the name of a bound method of the spider is checked directly instead.
        """
        spider = self.state.crawler.spider
        callback, errback = request.callback, request.errback
        d: dict[str, Any] = {
            "url": request.url,
            "callback": self._method_name(spider, callback) if callable(callback) else callback,
            "errback": self._method_name(spider, errback) if callable(errback) else errback,
            "headers": dict(request.headers),
        }
        for attr in request.attributes:
            d.setdefault(attr, getattr(request, attr))
        if type(request) is not Request:
            d["_class"] = f"{type(request).__module__}.{type(request).__name__}"
        return d

    def _method_name(self, spider: Any, func: Any) -> str:
        method = getattr(func, "__func__", None)
        if method is None or getattr(func, "__self__", None) is not spider:
            raise ValueError(f"{func!r} is not a method of the spider")
        name = self._method_names.get(method)
        if name is None:
            name = method.__name__
            if getattr(getattr(spider, name, None), "__func__", None) is not method:
                raise ValueError(f"{func!r} is not reachable by name on the spider")
            self._method_names[method] = name
        return name

    # -- emissions ----------------------------------------------------------
    def emission(self, item: Any) -> tuple[str, str] | None:
        """(url key, content hash) of a decided item that left the pipelines, or None."""
        adapter = ItemAdapter(item)
        dedup = adapter.get(ITEM_FIELD) if ITEM_FIELD in adapter else None
        url = adapter.get(self.state.config.url_field)
        if not isinstance(dedup, dict) or not dedup.get("content_hash") or not url:
            return None
        return self.state.key(str(url)), dedup["content_hash"]

    def replay(self, decision: Any, key: str, resumed: bool = False) -> None:
        """A document decided in this crawl, before an interruption, and fetched again.

        Its decision is durable but its emission may have been cut off (between the two
        lie a few turns of the event loop, a sizeable fraction of a second under load): a
        representative first seen in this crawl and not emitted with this content goes on
        as ``new``, once.  A document of an earlier, finished crawl stays ``unchanged``.
        ``resumed``: the page's request was issued again from the store.
        """
        if decision.status != "unchanged":
            return
        record = self.store.get_url(key)
        if record is None or record.first_run != self.state.first_run:
            return
        if self.store.shared and not resumed:
            # a shared store: decided by another process of this crawl, which emits it itself,
            # whether it decided before or after this one opened the store (a request taken
            # over from a process that died is the one replayed)
            return
        if self.store.get_emitted(key) == record.content_hash:
            return
        cluster = self.store.get_cluster(record.cluster_id) if record.cluster_id else None
        if cluster is None or cluster.representative != key:
            return
        self.state.inc("frontier/replayed")
        decision.status, decision.is_representative = "new", True
        decision.canonical_url = decision.url

    # -- resuming -----------------------------------------------------------
    def resume(self) -> Iterator[Request]:
        """The requests owed by an earlier run (or by a process of this one that died), issued again."""
        state = self.state
        count = state.pending_at_start
        if not count:
            return
        if self.store.shared:
            logger.info(
                "taking over the pending requests no live process holds (%s owed in the shared store)", f"{count:,}"
            )
        else:
            logger.info("resuming %s pending requests from an interrupted run", f"{count:,}")
        yield from self._reissue(self.store.claim_pending())

    def take_over_abandoned(self) -> list[Request]:
        """Requests owed by a process of a shared store that died (its leases ran out), now
        this process's to fetch."""
        return list(self._reissue(self.store.claim_pending()))

    def _reissue(self, claimed: Iterable[tuple[str, bytes]], stat: str = "frontier/resumed") -> Iterator[Request]:
        state = self.state
        spider = state.crawler.spider
        for pending_id, blob in claimed:
            try:
                request = request_from_dict(pickle.loads(blob), spider=spider)
            except Exception as exc:
                state.inc("frontier/unresumable")
                if not self._warned_unresumable:
                    self._warned_unresumable = True
                    logger.warning(
                        "A pending request of an interrupted run cannot be issued again (%s: %s); "
                        "it is dropped from the store. Further ones are only counted in "
                        "dedup/frontier/unresumable",
                        type(exc).__name__,
                        exc,
                    )
                self.close_ids([pending_id])
                continue
            owed_in = request.meta.get(META_RUN)
            request.meta[META_PENDING] = pending_id
            request.meta[META_RESUMED] = request.meta[META_RUN] = state.store.run
            if self.store.shared:
                # this copy is the one owed: the dupefilter lets it through (is_owed_copy), and
                # checks the requests a redirect of it makes, as it would any other
                if owed_in != state.store.run:
                    # owed by a process of an earlier run: marked in this one, so that a page
                    # of this run that links to it does not fetch it a second time (a process
                    # of this run that died marked it already)
                    state.frontier.mark(request.url, state.key(request.url))
            state.inc(stat)
            yield request


class PendingSpiderMiddleware:
    """Issues owed requests after the start requests; closes a response's request."""

    def __init__(self, crawler: Crawler) -> None:
        self.state = DedupState.of(crawler)
        self.pending = self.state.pending
        #: id(response) -> [response, outputs still running, items in the pipelines, keep owed,
        #: (url key, content hash) of the items emitted]
        self._open: dict[int, list] = {}
        crawler.signals.connect(self._item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(self._item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(self._item_error, signal=signals.item_error)
        # a shared store: requests of a process that died are taken over while the crawl runs
        self._take_over: task.LoopingCall | None = None
        self._held_when_idle: set[str] = set()
        self._reissued: set[str] = set()
        #: whether this is the outermost spider middleware (known once the crawl runs)
        self._outermost: bool | None = None
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._idle, signal=signals.spider_idle)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    def _opened(self, spider=None) -> None:
        store = self.state.store
        if store is None or not store.shared:
            return
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
            elsewhere = 0
            if store.shared:
                self._take_over_abandoned()
                elsewhere = store.pending_held_elsewhere()
        except Exception:
            state.failed("resume", "could not count the pending requests of the store")
            return
        if waiting or elsewhere:
            # other processes still owe requests: if one of them dies, its requests are ours
            # to fetch once its leases run out
            raise DontCloseSpider(f"{waiting} requests owed here, {elsewhere} by other processes")

    def _close_left(self, store: Any) -> int:
        """Settle the owed requests that left the crawl without an outcome; returns how many
        this process still holds, to look at again at its next idle moment.

        An idle process has nothing in flight: a request it holds now was dropped on its way
        (off-site, robots.txt, an ``IgnoreRequest`` or an exception anywhere, a middleware that
        swallowed it) without its outcome being recorded, and nothing will fetch it.  A shared
        queue (scrapy-redis) is the exception: it hands a request to whichever process pops it,
        which holds it a moment later.  So on a shared store a request left only when this
        process held it at two idle moments in a row; it is issued once more first, in case the
        process that popped it died before holding it, and closed when held again after that.
        """
        if not self.state.crawler.engine.spider_is_idle():
            return 0  # another handler of this idle moment issued requests: not idle any more
        held = set(store.held_pending())
        if store.shared:
            twice = held & self._held_when_idle
            left = twice & self._reissued
            again = twice - self._reissued
            self._held_when_idle = held - left
            self._reissued |= again
        else:
            left, again = held, set()
        if left:
            self.pending.close_ids(sorted(left))
            self.state.inc("frontier/left", len(left))
            logger.info(
                "closed %d owed requests that left the crawl without a response "
                "(dropped by a middleware, or lost by the spider); see dedup/frontier/left",
                len(left),
            )
        if again:
            claimed = [(i, blob) for i in sorted(again) if (blob := store.get(PENDING, i)) is not None]
            self._issue(list(self.pending._reissue(claimed, "frontier/reissued")),
                        "issuing again %d pending requests this process holds and no process fetches")
        return len(held - left)

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
                element.meta.setdefault(META_RUN, self.state.store.run)
            yield element
        try:
            resumed = self.pending.resume()
            for request in resumed:
                yield request
        except Exception:
            self.state.failed("resume", "could not read the pending requests of the store")

    def process_spider_output(self, response: Response, result: Iterable[Any], spider=None) -> Iterator[Any]:
        state = self._begin(response)
        try:
            yield from held_back(result, lambda element: self._count(state, element), self._flush())
        finally:
            self._end(response, state)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider=None
    ) -> AsyncIterator[Any]:
        state = self._begin(response)
        try:
            async for element in held_back_async(result, lambda element: self._count(state, element), self._flush()):
                yield element
        finally:
            self._end(response, state)

    def _flush(self) -> Callable[[list[Any]], list[Any]] | None:
        """What a page's held-back output goes through: the mark-ahead, when it applies."""
        return self._mark_ahead if self._marks_ahead() else None

    def _marks_ahead(self) -> bool:
        """On a shared store, a page's new links are marked and owed together, in one round
        trip, when nothing can drop them between this middleware and the scheduler's
        dupefilter: this is the outermost spider middleware."""
        if self._outermost is None:
            order = build_component_list(self.state.crawler.settings.getwithbase("SPIDER_MIDDLEWARES"))
            first = load_object(order[0]) if order else None
            self._outermost = isinstance(first, type) and issubclass(first, PendingSpiderMiddleware)
        store = self.state.store
        return self._outermost and store is not None and store.shared and not self.state.store_broken

    def _mark_ahead(self, elements: list[Any]) -> list[Any]:
        """Mark the new links among ``elements`` ahead of their checks; returns ``elements``."""
        state, frontier = self.state, self.state.frontier
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
                state.failed("mark ahead", "could not mark the links of a page ahead of their checks")
        return elements

    def _count(self, state: list, element: Any) -> Any:
        if isinstance(element, Request):
            # A page issued again after its process died: that process may have marked this
            # link in the frontier and died before owing it, so the dupefilter checks again.
            store = self.state.store
            request = getattr(state[0], "request", None)
            resumed = request.meta.get(META_RESUMED) if request is not None else None
            if resumed is not None and store is not None and store.shared and resumed == store.run:
                element.meta[META_RECHECK] = True
        elif element is not None:
            state[2] += 1  # an item: its request closes only once the item left the pipelines
        return element

    def _end(self, response: Response, state: list) -> None:
        state[1] -= 1
        self._maybe_close(response, state)

    def _begin(self, response: Response) -> list:
        state = self._open.get(id(response))
        if state is None:
            state = self._open[id(response)] = [response, 0, 0, False, []]
        state[1] += 1
        return state

    def _item_scraped(self, item: Any, response: Any = None, spider=None) -> None:
        # Remember what was emitted, so that a resumed run re-emits only what was cut off;
        # written with the closing when this is the response's last item.
        try:
            emitted = self.pending.emission(item)
        except Exception:
            self.state.failed("settle", "could not read an emitted item")
            emitted = None
        self._item_done(response, keep=False, emitted=emitted)

    def _item_dropped(self, item: Any, response: Any = None, exception: Any = None, spider=None) -> None:
        self._item_done(response, keep=isinstance(exception, LeftPending))

    def _item_error(self, item: Any, response: Any = None, spider=None, failure: Any = None) -> None:
        self._item_done(response, keep=False)

    def _item_done(self, response: Any, keep: bool, emitted: tuple[str, str] | None = None) -> None:
        state = self._open.get(id(response)) if response is not None else None
        if state is None or state[0] is not response:
            if emitted is not None:  # an item of no tracked response (an errback's)
                self._close(None, [emitted], getattr(response, "url", "an item"))
            return
        state[2] -= 1
        if emitted is not None:
            if state[1] > 0 or state[2] > 0:
                self._close(None, [emitted], response.url)  # now: the request is not done yet
            else:
                state[4].append(emitted)  # with the closing, in one batch
        state[3] = state[3] or keep
        self._maybe_close(response, state)

    def _maybe_close(self, response: Response, state: list) -> None:
        if state[1] > 0 or state[2] > 0:
            return
        self._open.pop(id(response), None)
        # an item left undecided by a stop keeps the request owed: the next run decides it
        self._close(None if state[3] else response.request, state[4], response.url)

    def _close(self, request: Request | None, emitted: list, url: str) -> None:
        try:
            self.pending.close_request(request, emitted)
        except Exception:
            # a store that cannot be written stops the crawl once; the request stays owed
            self.state.failed("settle", "could not close the request of %s", url)


class PendingDownloaderMiddleware:
    """Settles requests that failed for good; drops stale copies from a persisted queue."""

    def __init__(self, crawler: Crawler) -> None:
        self.state = DedupState.of(crawler)
        self.pending = self.state.pending

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PendingDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider=None) -> None:
        meta = request.meta
        owed_in, run = meta.get(META_RUN), self.state.store.run
        if owed_in is None or owed_in == run:
            if self.state.store.shared and META_PENDING in meta:
                try:
                    # fetched here, whoever owed it: if this process dies, others take it over
                    owed = self.state.store.hold_pending(meta[META_PENDING])
                except Exception:
                    self.state.failed("settle", "could not hold the request of %s", request.url)
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
            self.state.failed("settle", "could not close the failed request %s", request.url)
        return None
