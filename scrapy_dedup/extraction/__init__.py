"""Main text and fingerprints of a page: what the extraction workers run.

Scrapy-free and picklable, so a spawned worker process imports only this,
trafilatura and the core.
"""
