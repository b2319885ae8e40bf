"""A spider that follows every href, however broken, to test the URL layer's tolerance."""

import scrapy


class JunkLinksSpider(scrapy.Spider):
    name = "junk_links"

    def __init__(self, start_url: str, **kwargs):
        super().__init__(**kwargs)
        self.start_url = start_url

    async def start(self):
        yield scrapy.Request(self.start_url, dont_filter=True)

    def parse(self, response):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            try:
                yield scrapy.Request(response.urljoin(href), errback=self.ignore)
            except ValueError:
                continue  # Scrapy itself refuses it (no scheme, bad IPv6...)

    def ignore(self, failure):
        self.logger.debug("failed: %s", failure.value)
