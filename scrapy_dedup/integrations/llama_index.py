"""Deprecated: moved to ``scrapy_dedup.query.integrations.llama_index``."""

from scrapy_dedup._moved import moved

__getattr__ = moved(__name__, "scrapy_dedup.query.integrations.llama_index")
