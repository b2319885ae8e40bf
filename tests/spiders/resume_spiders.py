"""The spider and the durable item log of the interrupted-crawl tests.

``docs`` follows every same-site link and yields one item per HTML page.
``SenderPid`` names the crawl process in a header of every request it sends, so that the
site counts fetches per run whenever it gets to answer them.
``EmittedLog`` appends every item that leaves the pipelines to ``EMITTED_LOG`` with one
unbuffered ``write`` on an ``O_APPEND`` descriptor, so a SIGKILL loses no line that was
written: it is the downstream index the tests check for lost and repeated documents.
"""

from __future__ import annotations

import json
import os
import time
from urllib.parse import urlsplit

import scrapy
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse


class DocsSpider(scrapy.Spider):
    name = "docs"

    def __init__(self, start_url: str, lambdas: str = "", **kwargs):
        super().__init__(**kwargs)
        self.start_url = start_url
        self.netloc = urlsplit(start_url).netloc
        #: links under this path get a lambda callback, which no queue can store
        self.lambdas = lambdas

    async def start(self):
        yield scrapy.Request(self.start_url, dont_filter=True)

    def parse(self, response):
        if not isinstance(response, HtmlResponse):
            return
        title = response.css("title::text").get(default="")
        if response.css("article"):
            yield {"url": response.url, "title": title}
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if urlsplit(url).netloc != self.netloc:
                continue
            if self.lambdas and urlsplit(url).path.startswith(self.lambdas):
                yield scrapy.Request(url, callback=lambda r: self.parse(r))
            else:
                yield scrapy.Request(url, callback=self.parse)


class SenderPid:
    """Last of the downloader middlewares: the header names the process that sends the
    request (a request issued again from the store carries the headers it was owed with)."""

    def process_request(self, request, spider=None) -> None:
        request.headers["X-Crawl-Pid"] = str(os.getpid())  # test_resume.SENDER_HEADER


class EmittedLog:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.pid = os.getpid()

    @classmethod
    def from_crawler(cls, crawler):
        path = crawler.settings.get("EMITTED_LOG")
        if not path:
            raise NotConfigured
        log = cls(path)
        crawler.signals.connect(log.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(log.close, signal=signals.engine_stopped)
        return log

    def item_scraped(self, item, response, spider=None) -> None:
        dedup = item.get("dedup") or {}
        line = {
            "pid": self.pid,
            "t": time.time(),
            "url": item.get("url"),
            "status": dedup.get("status"),
            "supersedes": dedup.get("supersedes") or [],
        }
        os.write(self.fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        os.close(self.fd)
