"""The add-on: ``ADDONS = {"scrapy_dedup.Addon": 500}`` enables everything."""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

#: Components and their priorities.  The spider middleware sits next to the
#: spider (after DepthMiddleware, 900) so that every later component sees
#: normalized URLs; the downloader middleware sits just inside
#: RedirectMiddleware (600) so it sees final responses, 304s and 404s; the
#: pipeline runs early so that later pipelines only see kept documents.
SPIDER_MIDDLEWARE = ("scrapy_dedup.crawl.spidermw.DedupSpiderMiddleware", 950)
DOWNLOADER_MIDDLEWARE = ("scrapy_dedup.crawl.downloadermw.DedupDownloaderMiddleware", 590)
PIPELINE = ("scrapy_dedup.crawl.pipeline.DedupPipeline", 200)
#: the state the components share (store, frontier, content index)
STATE = ("scrapy_dedup.crawl.state.DedupState", 0)
DUPEFILTER = "scrapy_dedup.crawl.dupefilter.DedupDupeFilter"
#: The resumable frontier's hooks sit at the engine end of each chain: the spider
#: middleware sees exactly what reaches the engine (after HttpErrorMiddleware, 50, and
#: the start middleware, 25); the downloader middleware sees only final exceptions.
PENDING_SPIDER_MIDDLEWARE = ("scrapy_dedup.crawl.pending.PendingSpiderMiddleware", 10)
PENDING_DOWNLOADER_MIDDLEWARE = ("scrapy_dedup.crawl.pending.PendingDownloaderMiddleware", 10)


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
            ("EXTENSIONS", STATE),
        ):
            components = settings[name]
            if not _listed(components, load_object(path)):
                components[path] = priority


def _listed(components: Any, cls: type) -> bool:
    """Whether ``cls`` (or a subclass) is already listed, as a class or under any dotted path.

    Scrapy keys components by what the user wrote, so ``{DedupPipeline: 300}`` and
    the path ``"scrapy_dedup.pipeline.DedupPipeline"`` would be two components and
    every item would be decided twice.  A listing with priority None (disabled) counts too.
    """
    for component in components:
        try:
            obj = load_object(component)
        except (ImportError, NameError, ValueError, AttributeError):
            continue  # not ours; Scrapy reports it when it builds the component
        if isinstance(obj, type) and issubclass(obj, cls):
            return True
    return False
