"""``scrapy_dedup.downloadermw.DedupDownloaderMiddleware``: the downloader middleware, under the path the manual gives.

It lives in :mod:`scrapy_dedup.crawl.downloadermw`; this path stays for settings that name it.
"""

from scrapy_dedup.crawl.downloadermw import DedupDownloaderMiddleware

__all__ = ["DedupDownloaderMiddleware"]
