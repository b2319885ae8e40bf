"""scrapy-dedup: remove duplicate pages during a Scrapy crawl for RAG ingestion.

Enable it in a Scrapy project with one line::

    ADDONS = {"scrapy_dedup.Addon": 500}

The pure functions of the core are importable from here without loading
Scrapy: ``normalize_url``, ``url_key``, ``canonical_text``, ``content_hash``,
``simhash``, ``hamming``.
"""

from __future__ import annotations

from typing import Any

from scrapy_dedup.core.fingerprints import content_hash, hamming, simhash
from scrapy_dedup.core.text import canonical_text
from scrapy_dedup.core.urls import normalize_url, url_key

__version__ = "0.1.0"

__all__ = [
    "Addon",
    "canonical_text",
    "content_hash",
    "hamming",
    "normalize_url",
    "simhash",
    "url_key",
]


def __getattr__(name: str) -> Any:
    # The add-on imports Scrapy; worker processes and plain users of the core need not.
    if name == "Addon":
        from scrapy_dedup.crawl.addon import Addon

        return Addon
    raise AttributeError(f"module 'scrapy_dedup' has no attribute {name!r}")
