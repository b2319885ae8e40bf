"""The owed requests, seen from the crawl: what the store keeps of a request that passed the
frontier until its outcome is durable, how it is closed, and how it is issued again
(:class:`PendingRequests`, ``DedupState.pending``). The components that carry the hooks are in
:mod:`scrapy_dedup.crawl.pending`.

Below :mod:`~scrapy_dedup.crawl.state`, which builds the book: what it reads of the crawl is
:class:`Crawl`.
"""

from __future__ import annotations

import logging
import pickle
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from itemadapter import ItemAdapter
from scrapy import Request
from scrapy.utils.request import request_from_dict

from scrapy_dedup.store.base import OweOffer
from scrapy_dedup.store.records import get_cluster, get_emitted, get_url, put_emitted, put_pending, settle_pending

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_dedup.crawl.settings import DedupConfig
    from scrapy_dedup.decide.frontier import Frontier
    from scrapy_dedup.store.base import DedupStore

logger = logging.getLogger(__name__)

#: the item field the pipeline adds (see pipeline.ITEM_FIELD)
ITEM_FIELD = "dedup"

#: request meta: the id the request is owed under, the run that owed it (or issued it
#: again), and the run that issued it again from the store
META_PENDING = "dedup_pending"
META_RUN = "dedup_run"
META_RESUMED = "dedup_resumed"
#: request meta: a link of a page issued again from the store in this run; the frontier may
#: have marked it in this run for a process that died before owing it
META_RECHECK = "dedup_recheck"

_PICKLE_PROTOCOL = 4



class Crawl(Protocol):
    """What the book reads of the crawl's state (:class:`~scrapy_dedup.crawl.state.DedupState`)."""

    crawler: Crawler
    config: DedupConfig
    store: DedupStore | None
    frontier: Frontier | None
    first_run: int
    pending_at_start: int

    def key(self, url: str) -> str: ...

    def inc(self, key: str, count: int = 1) -> None: ...


def is_owed_copy(request: Request, run: int) -> bool:
    """Whether ``request`` is the copy of an owed request that the store issued again in ``run``
    (resumed, or taken over from a process that stopped), and not a redirect it made."""
    meta = request.meta
    return meta.get(META_RESUMED) == run and META_PENDING in meta and not meta.get("redirect_urls")


def promoted_id(key: str) -> str:
    """The id a take-over fetch is owed under (its URL key may be owed as well)."""
    return key + "\0promoted"


class PendingRequests:
    """What the store owes, seen from the crawl."""

    def __init__(self, state: Crawl) -> None:
        self.state = state
        self._warned_unserializable = False
        self._warned_unresumable = False
        self._method_names: dict[Any, str] = {}
        #: requests found unserializable: tried (and counted) once, whether marked ahead,
        #: offered with their check or owed after it
        self._unkept: weakref.WeakSet[Request] = weakref.WeakSet()

    @property
    def store(self) -> DedupStore:
        """The crawl's store: the book is used only while it is open."""
        store = self.state.store
        if store is None:
            raise RuntimeError("the dedup store is not open")
        return store

    # -- owing and settling -------------------------------------------------
    def owe(
        self, request: Request, pending_id: str, closes: str | None = None, offer: OweOffer | None = None
    ) -> None:
        """``request`` passed the frontier: keep it until its outcome is durable.

        ``closes``: the id of a request this one replaces (a redirect's source), closed
        in the same batch.  ``offer``: what :meth:`offer` made for the frontier's mark of its
        URL key, which may have owed it already.
        """
        if offer is not None:
            blob = None if offer.owed else offer.blob
            # The offer may have been made for another request of the key: a link marked ahead
            # with one page, whose copy on another page reached the dupefilter first. This one
            # is fetched, so it carries the id the key is owed under, and its outcome settles it.
            request.meta[META_PENDING], request.meta[META_RUN] = offer.pending_id, self.store.run
        else:
            blob = self._blob(request, pending_id)
        if blob is None and (closes is None or closes == pending_id):
            return
        with self.store.batch() as batch:
            if blob is not None:
                put_pending(batch, pending_id, blob)
            if closes is not None and closes != pending_id:
                settle_pending(batch, closes)

    def offer(self, request: Request, pending_id: str) -> OweOffer | None:
        """``request`` serialized to be owed under ``pending_id`` with its URL key's mark in
        the frontier (:meth:`DedupStore.frontier_mark_many`); then :meth:`owe` it with this
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
        run = self.store.run
        if meta.get(META_RESUMED) == run and meta.get(META_PENDING) == pending_id:
            meta[META_RUN] = run  # already in the store
            return None
        if request in self._unkept:
            return None
        meta[META_PENDING], meta[META_RUN] = pending_id, run
        blob = self._serialize(request)
        if blob is None:
            del meta[META_PENDING], meta[META_RUN]
            self._unkept.add(request)
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
        with self.store.batch(later=True) as batch:
            for key, content_hash in emitted:
                put_emitted(batch, key, content_hash)
            if pending_id is not None:
                settle_pending(batch, pending_id)

    def close_ids(self, pending_ids: Iterable[str]) -> None:
        with self.store.batch() as batch:
            for pending_id in pending_ids:
                settle_pending(batch, pending_id)

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
        record = get_url(self.store, key)
        if record is None or record.first_run != self.state.first_run:
            return
        if not resumed:
            # fetched through a link: a request closes only once its items left the pipelines,
            # with what they emitted, so an emission an interruption cut off belongs to a
            # request still owed, issued again (resumed, or taken over from a process that
            # died); any other fetch is of a page emitted already, or decided by another
            # process of this crawl, which emits it itself
            return
        if get_emitted(self.store, key) == record.content_hash:
            return
        cluster = get_cluster(self.store, record.cluster_id) if record.cluster_id else None
        if cluster is None or cluster.representative != key:
            return
        self.state.inc("frontier/replayed")
        decision.status, decision.is_representative = "new", True
        decision.canonical_url = decision.url

    # -- resuming -----------------------------------------------------------
    def resume(self) -> Iterator[Request]:
        """The requests owed by an earlier run (or by a process of this one that died), issued again.

        Said in the log only when there is one: a process that joins a running crawl finds the
        requests its other processes owe, which are theirs, not an interrupted run's."""
        count = self.state.pending_at_start
        if not count:
            return
        for n, request in enumerate(self._reissue(self.store.claim_pending())):
            if not n:
                logger.info(
                    "resuming the pending requests from an interrupted run or a process that stopped that no "
                    "live process holds (%s owed in the store)",
                    f"{count:,}",
                )
            yield request

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
            request.meta[META_RESUMED] = request.meta[META_RUN] = self.store.run
            # this copy is the one owed: the dupefilter lets it through (is_owed_copy), and
            # checks the requests a redirect of it makes, as it would any other
            if owed_in != self.store.run and state.frontier is not None:
                # owed by an earlier run: marked in this one, so that a page of this run that
                # links to it does not fetch it a second time (a process of this run that died
                # marked it already)
                state.frontier.mark(request.url, state.key(request.url))
            state.inc(stat)
            yield request
