"""``scrapy_dedup.dupefilter.DedupDupeFilter``: the store-backed DUPEFILTER_CLASS, under the path the manual gives.

It lives in :mod:`scrapy_dedup.crawl.dupefilter`; this path stays for settings that name it.
"""

from scrapy_dedup.crawl.dupefilter import DedupDupeFilter

__all__ = ["DedupDupeFilter"]
