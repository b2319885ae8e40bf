"""Deprecated: moved to :mod:`scrapy_dedup.query.hits`."""

from scrapy_dedup._moved import moved

__getattr__ = moved(__name__, "scrapy_dedup.query.hits")
