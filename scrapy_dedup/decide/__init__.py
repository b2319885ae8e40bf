"""Scrapy-free decisions on a store: the URL frontier and the content index.

They take plain values (URL keys, fingerprints) and talk to the store through
its interface only, so they run the same under a crawl, a test or a benchmark.
"""
