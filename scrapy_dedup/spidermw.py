"""``scrapy_dedup.spidermw.DedupSpiderMiddleware``: the spider middleware, under the path the manual gives.

It lives in :mod:`scrapy_dedup.crawl.spidermw`; this path stays for settings that name it.
"""

from scrapy_dedup.crawl.spidermw import DedupSpiderMiddleware

__all__ = ["DedupSpiderMiddleware"]
