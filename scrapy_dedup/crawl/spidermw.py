"""Spider middleware: normalized requests, rel=canonical, and items' sources.

- every request a spider yields (start requests included) is rewritten to its
  ``normalize_url`` form before it is scheduled, so the scheduler, the
  dupefilter and the downloader all see one identity;
- a page's ``rel=canonical`` (HTML head or ``Link`` header) is read once; an
  in-scope target is requested (once, at a higher priority) so that the
  pipeline can verify the page against it (:mod:`scrapy_dedup.crawl.canonical`);
- each item is linked to the response that produced it, so the pipeline can
  extract text from a spider that yields plain items;
- a page that produced no item is a hub, and one that produced items and requests for other
  pages (not its own #anchors) links: both are fetched again on every run, as new pages appear
  among their links.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_dedup.core.urls import InvalidURL
from scrapy_dedup.crawl.canonical import canonical_of, canonical_request
from scrapy_dedup.crawl.downloadermw import META_LINKS
from scrapy_dedup.crawl.responses import content_kind
from scrapy_dedup.crawl.sources import ItemSource
from scrapy_dedup.crawl.state import DedupState

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

class DedupSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.state = DedupState.of(crawler)
        self._warned_invalid = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupSpiderMiddleware:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for element in start:
            yield self._start(element)

    def _start(self, element: Any) -> Any:
        if not isinstance(element, Request):
            return element
        # start pages are hubs: always fetched in full, whatever they yield; one is seen once it
        # yields an item (_Page._start_seen)
        element.meta.setdefault("dedup_start", True)
        return self._request(element)

    def process_spider_output(self, response: Response, result: Iterable[Any], spider=None) -> Iterator[Any]:
        page = _Page(self, response)
        yield from page.prologue()
        for element in result:
            yield page.element(element)
        page.epilogue()

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider=None
    ) -> AsyncIterator[Any]:
        page = _Page(self, response)
        for element in page.prologue():
            yield element
        async for element in result:
            yield page.element(element)
        page.epilogue()

    def _request(self, request: Request) -> Request:
        if request.meta.get("dont_dedup"):
            return request
        state = self.state
        if request.url.partition(":")[0].lower() not in ("http", "https"):
            # ftp:, file:, mailto: ...: nothing to normalize, and nothing wrong with them
            state.inc("url/other_scheme")
            return request
        try:
            url = state.config.url_rules.normalize(request.url, strict=True)
        except InvalidURL as exc:
            state.inc("url/invalid")
            if not self._warned_invalid:
                self._warned_invalid = True
                logger.warning(
                    "URL left as it is (%s): %s; further ones are only counted in dedup/url/invalid",
                    exc,
                    request.url,
                )
            return request
        except Exception:
            state.failed("normalize", "could not normalize %r; passing it through", request.url)
            return request
        if url == request.url:
            return request
        state.inc("url/normalized")
        normalized = request.replace(url=url)
        # the URL as the page wrote it, for the aliases report
        normalized.meta.setdefault("dedup_original_url", request.url)
        return normalized


class _Page:
    """The output of one response as it passes through the middleware."""

    def __init__(self, mw: DedupSpiderMiddleware, response: Response) -> None:
        self.mw = mw
        self.response = response
        self.items = 0
        #: the page yielded a request for another page (not one of its own #anchors)
        self.links = False
        canonical = canonical_of(mw.state, response)
        self.source = ItemSource(response, *(canonical or ()))

    def prologue(self) -> Iterator[Request]:
        if self.source.canonical_url is not None:
            yield canonical_request(self.mw.state, self.response, self.source.canonical_url)

    def element(self, element: Any) -> Any:
        if isinstance(element, Request):
            request = self.mw._request(element)
            if not self.links:
                self.links = self._elsewhere(request.url)
            return request
        if element is not None:
            self.items += 1
            if self.items == 1 and self.response.meta.get("dedup_start"):
                self._start_seen()
            self.mw.state.sources.link(element, self.source)
        return element

    def _start_seen(self) -> None:
        """A start page that yields an item is seen: links back to it are dropped from here on.
        One that yields none is left unmarked, so that a link back fetches it once more: a
        ``CrawlSpider``'s start page is an item only through its rules, as in plain Scrapy."""
        state = self.mw.state
        try:
            assert state.frontier is not None  # open while the crawl runs
            state.frontier.mark(self.response.url, state.key(self.response.url))
        except Exception:
            state.failed("start", "could not mark start page %s seen", self.response.url)

    def _elsewhere(self, url: str) -> bool:
        """``url`` is another page than this one: a link to one of its own #anchors (a table
        of contents) or another spelling of its URL has the same url key."""
        key = self.mw.state.key
        try:
            return key(url) != key(self.response.url)
        except Exception:  # noqa: BLE001 -- a link all the same (the dupefilter reports it)
            return True

    def epilogue(self) -> None:
        response = self.response
        if response.meta.get("dont_dedup") or response.status >= 400:
            # an error response (its errback's output) tells nothing of the page: a gone
            # document stays deleted, never a hub
            return
        state = self.mw.state
        if self.items:
            # the downloader middleware read the record: recorded again only when that changed
            if response.meta.get(META_LINKS) == self.links:
                return
            links = self.links

            def mark_links() -> None:
                try:
                    assert state.frontier is not None  # open while the crawl runs
                    state.frontier.mark_links(state.key(response.url), links)
                except Exception:
                    state.failed("links", "could not record the links of %s", response.url)

            try:
                # not in between the reads and the writes of its item's decision (its record)
                state.decisions.after(state.key(response.url), mark_links)
            except Exception:
                state.failed("links", "could not record the links of %s", response.url)
            return
        try:
            key = state.key(self.response.url)
            # an HTML page without items is a hub (links); anything else is an asset
            kind = "hub" if content_kind(self.response) == "html" else "asset"
            assert state.frontier is not None  # open while the crawl runs
            state.frontier.mark_without_document(self.response.url, key, kind)
            state.canonical_waits.release(key)
        except Exception:
            state.failed("hub", "could not record hub page %s", self.response.url)
