"""The spider of Scrapy's tutorial, as a new user writes it, and two downloader middlewares a
user might add.

``tutorial`` is a ``CrawlSpider`` that follows every link it extracts and yields every page as
an item ``{url, title, html}``. It takes its start URL (``-a start_url=``) and allows that URL's
host name only (``allowed_domains``), so a link to another host is off-site (``-a allowed=`` allows another host instead); ``-a raise_on=``
makes its callback raise on the pages whose URL contains that text.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class TutorialSpider(CrawlSpider):
    name = "tutorial"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, start_url: str, raise_on: str = "", allowed: str = "", **kwargs):
        self.start_urls = [start_url]
        self.allowed_domains = [allowed or urlsplit(start_url).hostname]
        self.raise_on = raise_on
        super().__init__(**kwargs)

    def parse_page(self, response):
        if self.raise_on and self.raise_on in response.url:
            raise ValueError(f"a bug in the spider, on {response.url}")
        yield {"url": response.url, "title": response.css("title::text").get(), "html": response.text}


class IgnoreAfterResponse:
    """Drops the responses of ``/ignored/`` pages after their download (``IgnoreRequest`` from
    ``process_response``, which no ``process_exception`` sees)."""

    def __init__(self, crawler):
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_response(self, request, response, spider=None):
        if "/ignored/" in request.url:
            self.stats.inc_value("tutorial/ignored")
            raise IgnoreRequest(f"not wanted: {request.url}")
        return response


class ReplaceOld:
    """Sends a request for ``/old/X`` to ``/new/X`` instead: a copy with the new URL goes back to
    the scheduler in its place, and the old request is never answered."""

    def __init__(self, crawler):
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_request(self, request, spider=None):
        if "/old/" in request.url:
            self.stats.inc_value("tutorial/replaced")
            return request.replace(url=request.url.replace("/old/", "/new/"))
        return None
