"""The add-on: ``ADDONS = {"scrapy_dedup.Addon": 500}`` enables everything."""

from __future__ import annotations

from scrapy.settings import BaseSettings

#: Components and their priorities.  The spider middleware sits next to the
#: spider (after DepthMiddleware, 900) so that every later component sees
#: normalized URLs; the downloader middleware sits just inside
#: RedirectMiddleware (600) so it sees final responses, 304s and 404s; the
#: pipeline runs early so that later pipelines only see kept documents.
SPIDER_MIDDLEWARE = ("scrapy_dedup.crawl.spidermw.DedupSpiderMiddleware", 950)
DOWNLOADER_MIDDLEWARE = ("scrapy_dedup.crawl.downloadermw.DedupDownloaderMiddleware", 590)
PIPELINE = ("scrapy_dedup.crawl.pipeline.DedupPipeline", 200)
DUPEFILTER = "scrapy_dedup.crawl.dupefilter.DedupDupeFilter"


class Addon:
    def update_settings(self, settings: BaseSettings) -> None:
        if not settings.getbool("DEDUP_ENABLED", True):
            return
        settings.set("DUPEFILTER_CLASS", DUPEFILTER, "addon")
        for name, (path, priority) in (
            ("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARE),
            ("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARE),
            ("ITEM_PIPELINES", PIPELINE),
        ):
            components = settings[name]
            if path not in components:
                components[path] = priority
