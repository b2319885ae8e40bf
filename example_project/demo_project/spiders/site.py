"""``site``: a generic spider that crawls one site (host AND port) and yields one item per HTML page.

    scrapy crawl site -a start_url=http://127.0.0.1:8431/

HTML pages give ``{"url", "title", "status"}`` (the scrapy-dedup pipeline adds
``text`` and ``dedup``), PDFs give ``{"url", "content_type"}``, anything else
(e.g. an image linked with <a href>) gives nothing. Only ``<a href>`` and
``<area href>`` are followed; ``<img src>``, scripts and stylesheets are not.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import scrapy
from scrapy.http import HtmlResponse

DEFAULT_PORTS = {"http": 80, "https": 443}


def host_port(url: str) -> tuple[str, int] | None:
    """``(host, port)`` of an http(s) URL, host lowercased and default port filled in; None otherwise."""
    try:
        parts = urlsplit(url.strip())
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:  # e.g. a non-numeric port
        return None
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return host.lower(), port or DEFAULT_PORTS[scheme]


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url: str | None = None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not start_url:
            raise ValueError(
                "the 'site' spider needs the start_url argument: scrapy crawl site -a start_url=http://host:port/"
            )
        self.scope = host_port(start_url)
        if self.scope is None:
            raise ValueError(f"start_url must be an http(s) URL with a host, got {start_url!r}")
        self.start_url = start_url
        # Scrapy's allowed_domains ignores ports; the scope check in parse() compares host AND port.

    async def start(self):
        yield scrapy.Request(self.start_url, callback=self.parse, dont_filter=True)

    def in_scope(self, url: str) -> bool:
        return host_port(url) == self.scope

    def parse(self, response):
        if not isinstance(response, HtmlResponse):
            content_type = response.headers.get("Content-Type", b"").decode("latin-1").split(";")[0].strip().lower()
            if content_type == "application/pdf":
                yield {"url": response.url, "content_type": content_type}
            return
        title = response.css("title::text").get(default="")
        yield {"url": response.url, "title": " ".join(title.split()), "status": response.status}
        for href in response.css("a::attr(href), area::attr(href)").getall():
            try:
                url = response.urljoin(href.strip())
            except ValueError:  # e.g. "http://[::1": a broken link is not a reason to stop
                self.logger.debug("skipping unparsable link %r on %s", href, response.url)
                continue
            if self.in_scope(url):
                yield response.follow(url, callback=self.parse)
