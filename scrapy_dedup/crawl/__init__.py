"""The Scrapy boundary: every module here imports Scrapy or Twisted.

The add-on installs the components (dupefilter, spider and downloader
middlewares, item pipeline); they share the crawl's state and hand plain
values to the Scrapy-free decisions in :mod:`scrapy_dedup.decide`.
"""
