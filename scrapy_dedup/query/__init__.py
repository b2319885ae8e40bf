"""The query side: what runs after retrieval, not during the crawl.

- :mod:`scrapy_dedup.query.diversifier`: ``diversify(hits, k)``, which removes exact and near
  copies from retrieved hits before they reach a model;
- :mod:`scrapy_dedup.query.hits`: reading the hits of each retrieval framework (duck typed);
- ``scrapy_dedup.query.integrations``: thin adapters for LangChain, LlamaIndex and Haystack.

Pure: the core, numpy and xxhash; nothing here imports Scrapy, the store or a framework (each
adapter imports its own). ``diversify`` is also ``scrapy_dedup.diversify``.
"""

from __future__ import annotations

from scrapy_dedup.query.diversifier import (
    ALSO_IN,
    REASONS,
    SEMANTIC_DUPLICATE_OF,
    SEMANTIC_SIMILARITY,
    Diversified,
    Explanation,
    diversify,
)

__all__ = ["ALSO_IN", "REASONS", "SEMANTIC_DUPLICATE_OF", "SEMANTIC_SIMILARITY",
           "Diversified", "Explanation", "diversify"]
