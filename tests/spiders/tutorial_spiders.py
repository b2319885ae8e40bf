"""The spider of Scrapy's tutorial, as a new user writes it: a ``CrawlSpider`` that follows every
link of its domain and yields ``{url, title, html}`` for every page (the project's settings add
``ADDONS = {"scrapy_dedup.Addon": 500}``)."""

from urllib.parse import urlsplit

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class TutorialSpider(CrawlSpider):
    name = "tutorial"
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

    def __init__(self, start_url: str, **kwargs):
        self.start_urls = [start_url]
        self.allowed_domains = [urlsplit(start_url).hostname]
        super().__init__(**kwargs)

    def parse_item(self, response):
        yield {"url": response.url, "title": response.css("title::text").get(), "html": response.text}
