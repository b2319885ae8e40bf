"""Texts of stored documents, for word-level diffs.

The store keeps each document's extracted text when ``DEDUP_KEEP_TEXT`` is
on (``get_text(key)``).  For a store without them (the setting off, or a page
whose extraction was skipped), ``--fetch-text`` fetches the page again and
extracts its main text the way the crawl did; that is today's version of the
page, and the report says where its texts came from.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial

from scrapy_dedup.store.base import DedupStore
from scrapy_dedup.store.records import get_text

#: largest body read when fetching a page again
MAX_BODY = 10 * 1024 * 1024


class Texts:
    def __init__(
        self,
        store: DedupStore,
        *,
        fetch: bool = False,
        timeout: float = 10.0,
        user_agent: str | None = None,
        limit: int = 200,
    ) -> None:
        self._stored: Callable[[str], str | None] | None = partial(get_text, store)
        self.fetch = fetch
        self.timeout = timeout
        self.user_agent = user_agent or "scrapy-dedup report"
        self.limit = limit
        self.fetched = 0
        self.failed = 0
        self.found = 0
        self.missing = 0
        self._cache: dict[str, str | None] = {}

    @property
    def available(self) -> bool:
        return self._stored is not None or self.fetch

    @property
    def source(self) -> str:
        """Where the diffs' texts came from, in words."""
        sources = []
        if self.found or (self._stored is not None and not self.missing):
            sources.append("the store")
        if self.fetch:
            sources.append("the pages fetched again now (--fetch-text)")
        if sources:
            return " and ".join(sources)
        return (
            "none: the store keeps no text for these pages (DEDUP_KEEP_TEXT); "
            "add --fetch-text to fetch them again"
        )

    def get(self, key: str, url: str) -> str | None:
        if self._stored is not None:
            text = self._stored(key)
            if text is not None:
                self.found += 1
                return text
            self.missing += 1
        if not self.fetch:
            return None
        if url not in self._cache:
            self._cache[url] = self.fetch_text(url) if len(self._cache) < self.limit else None
        return self._cache[url]

    def fetch_text(self, url: str) -> str | None:
        """The main text of ``url`` as it is served now (None if it cannot be fetched)."""
        if not url.lower().startswith(("http://", "https://")):
            return None
        from scrapy_dedup.extraction.main_text import extract_text

        request = urllib.request.Request(url, headers={"User-Agent": self.user_agent})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) only
                body = response.read(MAX_BODY)
        except (urllib.error.URLError, OSError, ValueError):
            self.failed += 1
            return None
        self.fetched += 1
        return extract_text(body, url) or None
