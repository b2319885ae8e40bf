"""scrapy-dedup: remove duplicate pages during a Scrapy crawl for RAG ingestion.

Enable it in a Scrapy project with one line::

    ADDONS = {"scrapy_dedup.Addon": 500}

The pure functions of the core are importable from here without loading
Scrapy: ``normalize_url``, ``url_key``, ``canonical_text``, ``content_hash``,
``simhash``, ``hamming``; and, at query time, ``diversify`` (remove copies from retrieved hits
before they reach a model).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from scrapy_dedup.core.fingerprints import content_hash, hamming, simhash
from scrapy_dedup.core.text import canonical_text
from scrapy_dedup.core.urls import normalize_url, url_key

# Bound after the submodule is imported, so that ``scrapy_dedup.diversify`` is the function
# while ``import scrapy_dedup.diversify`` still finds the module (in sys.modules).
from scrapy_dedup.diversify import diversify

try:
    # one version number, pyproject.toml's, as the installed metadata says
    __version__ = version("scrapy-dedup")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Addon",
    "canonical_text",
    "content_hash",
    "diversify",
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
