"""Downloader middleware: conditional GETs, fetch records, 304s and deletions.

- a document fetched in an earlier run is asked for with ``If-None-Match`` /
  ``If-Modified-Since``; a 304 counts as unchanged and goes no further (a page that
  links is asked for in full instead: a 304 has no links to follow);
- with Scrapy's HTTP cache on, every request asks the cache to validate its copy
  (``Cache-Control: max-age=0``), so that the cache's RFC 2616 policy answers a 304 with
  the body it keeps;
- every response is recorded (status, validators, fetch count); its record's ``links``
  goes to the spider middleware (``dedup_links``), which then writes the flag only when the
  page's links change it (no second read per page);
- a 404 or 410 takes the URL out of its cluster; when it represented the
  cluster, the next member is fetched again and emitted with ``supersedes``.
  On a shared store, while another process holds that URL key's decision, the
  response waits without blocking the reactor;
- a redirected request that skipped the dupefilter (``dont_filter``) still
  has its redirect recorded as an alias;
- a redirect the dupefilter let through because another process held the
  decision of its source (``dedup_redirect_waits``) waits here, without blocking
  the reactor, and goes back to the scheduler once its redirect is recorded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest

from scrapy_dedup.crawl.busy import META_REDIRECT_WAITS, WaitStopped, when_free
from scrapy_dedup.crawl.pending import LeftOwed
from scrapy_dedup.crawl.state import DedupState
from scrapy_dedup.store.base import StoreWriteError

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_dedup.core.records import UrlRecord

logger = logging.getLogger(__name__)

GONE_STATUSES = (404, 410)
#: the response's URL record linked at its last fetch (its ``links``, read by the spider middleware)
META_LINKS = "dedup_links"


class DedupDownloaderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.state = DedupState.of(crawler)
        #: Scrapy's HTTP cache is on: every request asks it to validate its copy
        self.revalidate = crawler.settings.getbool("HTTPCACHE_ENABLED")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupDownloaderMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request, spider=None) -> Request | None:
        if _not_a_page(request):
            return None
        if request.meta.get(META_REDIRECT_WAITS):
            await self._record_redirect(request)
            # checked by the dupefilter like any request now (the redirect is recorded)
            return request.replace(meta={k: v for k, v in request.meta.items() if k != META_REDIRECT_WAITS})
        try:
            if request.dont_filter:
                if not request.meta.get("dedup_start"):
                    # the dupefilter never saw it: mark it seen so that links back to it are dropped
                    # (a start page is marked once it yields an item: see DedupSpiderMiddleware)
                    assert self.state.frontier is not None  # open while the crawl runs
                    self.state.frontier.mark(request.url, self.state.key(request.url))
                if request.meta.get("redirect_urls"):
                    await self._record_redirect(request)
            meta = request.meta
            if self.revalidate:
                # the frontier decides what is fetched again, not the cache's freshness heuristic
                # (a month for a page last modified ten months ago): RFC2616Policy then asks the
                # site, and on a 304 hands its copy, links and all, to the spider
                request.headers.setdefault("Cache-Control", "max-age=0")
            if meta.get("dedup_start") or meta.get("dedup_promoted") or "If-None-Match" in request.headers:
                return None
            assert self.state.frontier is not None  # open while the crawl runs
            headers = self.state.frontier.conditional_headers(self.state.key(request.url))
            for name, value in headers.items():
                request.headers.setdefault(name, value)
            if headers:
                request.meta["dedup_conditional"] = True
                self.state.inc("url/conditional")
        except IgnoreRequest:
            raise
        except Exception:
            self._failed("process_request", request.url)
        return None

    async def process_response(self, request: Request, response: Response, spider=None) -> Response:
        if _not_a_page(request):
            return response
        # a copy of another page's meta (a redirect, a spider passing meta on) says nothing of this one
        request.meta.pop(META_LINKS, None)
        try:
            key = self.state.key(response.url)
            assert self.state.frontier is not None  # open while the crawl runs
            record = self.state.frontier.record_fetch(
                response.url,
                key,
                response.status,
                _header(response, b"ETag"),
                _header(response, b"Last-Modified"),
            )
            request.meta[META_LINKS] = record.links
            if response.status == 304 and request.meta.get("dedup_conditional"):
                assert self.state.index is not None  # open while the crawl runs
                self.state.index.mark_unchanged(key)
                self.state.inc("url/not_modified")
                self.state.inc("doc/unchanged")
                self.state.pending.close_request(request)  # the outcome (unchanged) is recorded
                raise IgnoreRequest(f"not modified since the last run: {response.url}")
            if response.status in GONE_STATUSES:
                await self._gone(request, response, key, record)
        except IgnoreRequest:
            raise
        except Exception:
            self._failed("process_response", response.url)
        return response

    async def _record_redirect(self, request: Request) -> None:
        """Record ``request``'s redirect, waiting without blocking the reactor while another
        process holds the decision of a source that held a document."""
        state = self.state
        try:
            await when_free(state, lambda: state.record_redirect(request), request.url)
        except WaitStopped:
            # the crawl stops: its source stays owed, and the next run is redirected again
            state.inc("doc/left_pending")
            raise LeftOwed(f"the crawl stopped before the redirect to {request.url} was recorded") from None
        except StoreWriteError as exc:
            state.store_failed(exc)  # the crawl stops, as above
            raise LeftOwed(f"the store could not record the redirect to {request.url}") from None
        except Exception:
            # one bad redirect never stops a crawl: the request goes on
            self._failed("process_request", request.url)

    async def _gone(self, request: Request, response: Response, key: str, record: UrlRecord) -> None:
        state = self.state

        def retire() -> bool:
            # the record just written says whether the URL held a document: no second read
            return state.retire(key, response.url, response.status, "doc/deleted", like=request, record=record)

        try:
            retired = await when_free(state, retire, key)
        except WaitStopped:
            # the crawl stops: the request stays owed, and the next run fetches and retires it
            state.inc("doc/left_pending")
            raise LeftOwed(f"the crawl stopped before the removal of {response.url} was recorded") from None
        if retired:
            logger.info("%s is gone (%d): removed from its cluster", response.url, response.status)

    def _failed(self, where: str, url: str) -> None:
        # one bad page or URL never stops a crawl
        self.state.failed(where, "failed in %s for %s; passing it through", where, url)


def _not_a_page(request: Request) -> bool:
    """A request the extension leaves alone: ``dont_dedup``, or the ``robots.txt`` that Scrapy's
    RobotsTxtMiddleware asks for (no page of the site: it is not recorded)."""
    meta = request.meta
    return bool(meta.get("dont_dedup")) or (
        bool(meta.get("dont_obey_robotstxt")) and urlsplit(request.url).path == "/robots.txt"
    )


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None
