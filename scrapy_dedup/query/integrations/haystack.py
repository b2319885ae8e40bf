"""Haystack: ``DiversifyRanker``, a component around :func:`scrapy_dedup.diversify`.

    pipeline.add_component("diversify", DiversifyRanker(k=5))
    pipeline.connect("retriever.documents", "diversify.documents")
"""

from __future__ import annotations

import logging
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from scrapy_dedup.query.diversifier import diversify

logger = logging.getLogger(__name__)

__all__ = ["DiversifyRanker"]

# the class's path in pipelines saved by scrapy-dedup 0.2 (scrapy_dedup.integrations, deprecated)
_OLD_TYPE = "scrapy_dedup.integrations.haystack.DiversifyRanker"
_OPTIONS = ("text", "score", "embedding", "source", "max_per_source", "lambda_mult",
            "semantic_threshold", "drop_semantic", "explain", "near", "merge_overlaps")


@component
class DiversifyRanker:
    """Removes exact and near copies from ``documents``, merges overlapping splits of one
    document (``meta["source_id"]``, ``meta["split_idx_start"]``) and keeps at most ``k``,
    using the documents' scores and embeddings when they have them. Added fields go to ``meta``.
    """

    def __init__(self, k: int | None = None, *, text: str | None = None, score: str | None = None,
                 embedding: str | None = None, source: str | None = None, max_per_source: int | None = None,
                 lambda_mult: float = 0.5, semantic_threshold: float = 0.95, drop_semantic: bool = False,
                 explain: bool = False, near: bool = True, merge_overlaps: bool = True) -> None:
        self.k = k
        self.options: dict[str, Any] = {
            "text": text, "score": score, "embedding": embedding, "source": source,
            "max_per_source": max_per_source, "lambda_mult": lambda_mult,
            "semantic_threshold": semantic_threshold, "drop_semantic": drop_semantic,
            "explain": explain, "near": near, "merge_overlaps": merge_overlaps,
        }

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, k=self.k, **self.options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiversifyRanker:
        if data.get("type") == _OLD_TYPE:  # saved before the module moved to scrapy_dedup.query
            data = {**data, "type": f"{cls.__module__}.{cls.__qualname__}"}
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document], k: int | None = None) -> dict[str, list[Document]]:
        kept = diversify(documents, k if k is not None else self.k, **self.options)
        for line in kept.explanation:
            logger.info("diversify: %s", line)
        return {"documents": list(kept)}
