"""Deprecated: moved to ``scrapy_dedup.query.integrations`` (``langchain``, ``llama_index``,
``haystack``, each still importable here, with a DeprecationWarning)."""

from scrapy_dedup._moved import moved

__getattr__ = moved(__name__, "scrapy_dedup.query.integrations")
