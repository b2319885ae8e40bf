"""The add-on: ``ADDONS = {"scrapy_dedup.Addon": 500}`` enables everything."""

from __future__ import annotations

from scrapy.settings import BaseSettings

#: Components and their priorities.  The spider middleware sits next to the
#: spider (after DepthMiddleware, 900) so that every later component sees
#: normalized URLs; the downloader middleware sits just inside
#: RedirectMiddleware (600) so it sees final responses, 304s and 404s; the
#: pipeline runs early so that later pipelines only see kept documents.
SPIDER_MIDDLEWARE = ("scrapy_dedup.spidermw.DedupSpiderMiddleware", 950)
DOWNLOADER_MIDDLEWARE = ("scrapy_dedup.downloadermw.DedupDownloaderMiddleware", 590)
PIPELINE = ("scrapy_dedup.pipeline.DedupPipeline", 200)
DUPEFILTER = "scrapy_dedup.dupefilter.DedupDupeFilter"
#: The resumable frontier's hooks sit at the engine end of each chain: the spider
#: middleware sees exactly what reaches the engine (after HttpErrorMiddleware, 50, and
#: the start middleware, 25); the downloader middleware sees only final exceptions.
PENDING_SPIDER_MIDDLEWARE = ("scrapy_dedup.pending.PendingSpiderMiddleware", 10)
PENDING_DOWNLOADER_MIDDLEWARE = ("scrapy_dedup.pending.PendingDownloaderMiddleware", 10)


class Addon:
    def update_settings(self, settings: BaseSettings) -> None:
        if not settings.getbool("DEDUP_ENABLED", True):
            return
        settings.set("DUPEFILTER_CLASS", DUPEFILTER, "addon")
        for name, (path, priority) in (
            ("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARE),
            ("SPIDER_MIDDLEWARES", PENDING_SPIDER_MIDDLEWARE),
            ("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARE),
            ("DOWNLOADER_MIDDLEWARES", PENDING_DOWNLOADER_MIDDLEWARE),
            ("ITEM_PIPELINES", PIPELINE),
        ):
            components = settings[name]
            if path not in components:
                components[path] = priority
