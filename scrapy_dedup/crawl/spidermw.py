"""Spider middleware: normalized requests, rel=canonical, and items' sources.

- every request a spider yields (start requests included) is rewritten to its
  ``normalize_url`` form before it is scheduled, so the scheduler, the
  dupefilter and the downloader all see one identity;
- a page's ``rel=canonical`` (HTML head or ``Link`` header) is read once; an
  in-scope target is requested (once, at a higher priority) so that the
  pipeline can verify the page against it;
- each item is linked to the response that produced it, so the pipeline can
  extract text from a spider that yields plain items;
- a page that produced no item is a hub: it is fetched again on every run.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.http import TextResponse

from scrapy_dedup.core.canonical import canonical_scope_check, resolve_canonical
from scrapy_dedup.core.urls import InvalidURL, normalize_url
from scrapy_dedup.crawl.responses import content_kind
from scrapy_dedup.crawl.runtime import DedupRuntime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: priority boost of a canonical target over the page that declared it
CANONICAL_PRIORITY = 10


@dataclass(slots=True)
class ItemSource:
    """The response an item came from, as the pipeline needs it."""

    response: Response
    canonical_url: str | None = None
    canonical_key: str | None = None


class DedupSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.runtime = DedupRuntime.of(crawler)
        self._warned_invalid = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupSpiderMiddleware:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for element in start:
            yield self._start(element)

    def process_start_requests(self, start_requests: Iterable[Any], spider=None) -> Iterator[Any]:
        # Scrapy < 2.13 fallback
        for element in start_requests:
            yield self._start(element)

    def _start(self, element: Any) -> Any:
        if not isinstance(element, Request):
            return element
        # start pages are hubs: always fetched in full, whatever they yield
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

    # -- requests -----------------------------------------------------------
    def _request(self, request: Request) -> Request:
        if request.meta.get("dont_dedup"):
            return request
        config = self.runtime.config
        try:
            url = normalize_url(request.url, tracking_params=config.tracking_params, strict=True)
        except InvalidURL as exc:
            self.runtime.inc("url/invalid")
            if not self._warned_invalid:
                self._warned_invalid = True
                logger.warning(
                    "URL left as it is (%s): %s; further ones are only counted in dedup/url/invalid",
                    exc,
                    request.url,
                )
            return request
        except Exception:
            self.runtime.failed("normalize", "could not normalize %r; passing it through", request.url)
            return request
        if url == request.url:
            return request
        self.runtime.inc("url/normalized")
        normalized = request.replace(url=url)
        # the URL as the page wrote it, for the aliases report
        normalized.meta.setdefault("dedup_original_url", request.url)
        return normalized

    # -- canonical ----------------------------------------------------------
    def canonical_of(self, response: Response) -> ItemSource:
        source = ItemSource(response)
        if response.meta.get("dont_dedup") or self.runtime.config.canonical_scope == "off":
            return source
        try:
            link = resolve_canonical(
                response.url,
                response.body if isinstance(response, TextResponse) else b"",
                response.headers.getlist(b"Link"),
                response.encoding if isinstance(response, TextResponse) else "utf-8",
            )
        except Exception:
            self.runtime.failed("canonical", "could not read the canonical link of %s", response.url)
            return source
        if link is None:
            return source
        reason = canonical_scope_check(response.url, link.url, self.runtime.config.canonical_scope)
        if reason is not None:
            self.runtime.inc(f"canonical/ignored/{reason}")
            return source
        key = self.runtime.key(link.url)
        if key == self.runtime.key(response.url):
            self.runtime.inc("canonical/self")
            return source
        source.canonical_url, source.canonical_key = link.url, key
        self.runtime.inc(f"canonical/declared/{link.source}")
        return source


class _Page:
    """The output of one response as it passes through the middleware."""

    def __init__(self, mw: DedupSpiderMiddleware, response: Response) -> None:
        self.mw = mw
        self.response = response
        self.items = 0
        self.source = mw.canonical_of(response)

    def prologue(self) -> Iterator[Request]:
        source = self.source
        if source.canonical_url is None:
            return
        request = self.response.request
        self.mw.runtime.inc("canonical/requested")
        yield Request(
            source.canonical_url,
            callback=request.callback if request is not None else None,
            errback=request.errback if request is not None else None,
            priority=(request.priority if request is not None else 0) + CANONICAL_PRIORITY,
            meta={"dedup_canonical_of": self.response.url},
        )

    def element(self, element: Any) -> Any:
        if isinstance(element, Request):
            return self.mw._request(element)
        if element is not None:
            self.items += 1
            self.mw.runtime.item_sources[id(element)] = self.source
        return element

    def epilogue(self) -> None:
        if self.items or self.response.meta.get("dont_dedup"):
            return
        runtime = self.mw.runtime
        try:
            key = runtime.key(self.response.url)
            # an HTML page without items is a hub (links); anything else is an asset
            kind = "hub" if content_kind(self.response) == "html" else "asset"
            runtime.frontier.mark_without_document(self.response.url, key, kind)
            runtime.release_canonical(key)
        except Exception:
            runtime.failed("hub", "could not record hub page %s", self.response.url)
