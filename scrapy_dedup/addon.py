"""``scrapy_dedup.addon.Addon``: the add-on, under the path the manual gives.

It lives in :mod:`scrapy_dedup.crawl.addon`; this path stays for settings that name it.
"""

from scrapy_dedup.crawl.addon import Addon

__all__ = ["Addon"]
