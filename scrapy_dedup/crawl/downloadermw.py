"""Downloader middleware: conditional GETs, fetch records, 304s and deletions.

- a document fetched in an earlier run is asked for with ``If-None-Match`` /
  ``If-Modified-Since``; a 304 counts as unchanged and goes no further;
- every response is recorded (status, validators, fetch count);
- a 404 or 410 takes the URL out of its cluster; when it represented the
  cluster, the next member is fetched again and emitted with ``supersedes``.
  On a shared store, while another process holds that URL key's decision, the
  response waits without blocking the reactor;
- a redirected request that skipped the dupefilter (``dont_filter``) still
  has its redirect recorded as an alias.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest

from scrapy_dedup.crawl.busy import WaitStopped, when_free
from scrapy_dedup.crawl.state import DedupState

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_dedup.core.records import UrlRecord

logger = logging.getLogger(__name__)

GONE_STATUSES = (404, 410)


class DedupDownloaderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.state = DedupState.of(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider=None) -> None:
        if request.meta.get("dont_dedup"):
            return None
        try:
            if request.dont_filter:
                # the dupefilter never saw it: mark it seen so that links back to it are dropped
                self.state.frontier.mark(request.url, self.state.key(request.url))
                if request.meta.get("redirect_urls"):
                    self.state.record_redirect(request)
            meta = request.meta
            if meta.get("dedup_start") or meta.get("dedup_promoted") or "If-None-Match" in request.headers:
                return None
            headers = self.state.frontier.conditional_headers(self.state.key(request.url))
            for name, value in headers.items():
                request.headers.setdefault(name, value)
            if headers:
                request.meta["dedup_conditional"] = True
                self.state.inc("url/conditional")
        except Exception:
            self._failed("process_request", request.url)
        return None

    async def process_response(self, request: Request, response: Response, spider=None) -> Response:
        if request.meta.get("dont_dedup"):
            return response
        try:
            key = self.state.key(response.url)
            record = self.state.frontier.record_fetch(
                response.url,
                key,
                response.status,
                _header(response, b"ETag"),
                _header(response, b"Last-Modified"),
            )
            if response.status == 304 and request.meta.get("dedup_conditional"):
                self.state.index.mark_unchanged(key)
                self.state.inc("url/not_modified")
                self.state.inc("doc/unchanged")
                self.state.pending.settle(request)  # the outcome (unchanged) is recorded
                raise IgnoreRequest(f"not modified since the last run: {response.url}")
            if response.status in GONE_STATUSES:
                await self._gone(request, response, key, record)
        except IgnoreRequest:
            raise
        except Exception:
            self._failed("process_response", response.url)
        return response

    async def _gone(self, request: Request, response: Response, key: str, record: UrlRecord) -> None:
        state = self.state

        def retire(wait: bool) -> bool:
            # the record just written says whether the URL held a document: no second read
            return state.retire(key, response.url, response.status, "doc/deleted", like=request, record=record,
                                wait=wait)

        try:
            retired = await when_free(state, retire, key)
        except WaitStopped:
            # the crawl stops: the request stays owed, and the next run fetches and retires it
            state.inc("doc/left_pending")
            raise IgnoreRequest(f"the crawl stopped before the removal of {response.url} was recorded") from None
        if retired:
            logger.info("%s is gone (%d): removed from its cluster", response.url, response.status)

    def _failed(self, where: str, url: str) -> None:
        # one bad page or URL never stops a crawl
        self.state.failed(where, "failed in %s for %s; passing it through", where, url)


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None
