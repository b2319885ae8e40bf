"""scrapy-dedup: remove duplicate pages during a Scrapy crawl for RAG ingestion.

Enable it in a Scrapy project with one line::

    ADDONS = {"scrapy_dedup.Addon": 500}

The pure functions of the core are importable from here without loading
Scrapy: ``normalize_url``, ``url_key``, ``canonical_text``, ``content_hash``,
``simhash``, ``hamming``; and, at query time, ``diversify`` (remove copies from retrieved hits
before they reach a model; the query side lives in :mod:`scrapy_dedup.query`).
"""

from __future__ import annotations

import sys
import types
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from scrapy_dedup._moved import moved
from scrapy_dedup.core.fingerprints import content_hash, hamming, simhash
from scrapy_dedup.core.text import canonical_text
from scrapy_dedup.core.urls import normalize_url, url_key
from scrapy_dedup.query.diversifier import diversify

# ``scrapy_dedup.diversify`` is the function. Its module, once of the same name, is now
# scrapy_dedup.query.diversifier; the old module path still works, with a DeprecationWarning,
# through a stand-in registered here. A file of that name could not be one: importing it would
# rebind the package's attribute to the module.
_old_diversify = types.ModuleType(__name__ + ".diversify", "Deprecated: moved to scrapy_dedup.query.diversifier.")
vars(_old_diversify)["__getattr__"] = moved(_old_diversify.__name__, "scrapy_dedup.query.diversifier")
sys.modules.setdefault(_old_diversify.__name__, _old_diversify)

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
