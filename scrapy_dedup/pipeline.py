"""``scrapy_dedup.pipeline.DedupPipeline``: the item pipeline, under the path the manual gives.

It lives in :mod:`scrapy_dedup.crawl.pipeline`; this path stays for settings that name it.
"""

from scrapy_dedup.crawl.pipeline import DedupPipeline

__all__ = ["DedupPipeline"]
