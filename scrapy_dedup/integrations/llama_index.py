"""LlamaIndex: ``DiversifyPostprocessor``, a node postprocessor around :func:`scrapy_dedup.diversify`.

    query_engine = index.as_query_engine(similarity_top_k=20,
                                         node_postprocessors=[DiversifyPostprocessor(k=5)])
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from scrapy_dedup.diversify import diversify

logger = logging.getLogger(__name__)

__all__ = ["DiversifyPostprocessor"]


class DiversifyPostprocessor(BaseNodePostprocessor):
    """Removes exact and near copies from retrieved nodes, merges overlapping chunks of one
    document, and keeps at most ``k``, using the nodes' scores and embeddings when they have them.

    Added fields go to ``node.metadata`` (``also_in``, ``semantic_duplicate_of``,
    ``semantic_similarity``) and are excluded from the text sent to the LLM and the embedder.
    ``text``/``score``/``embedding``/``source`` name metadata keys to read instead. With
    ``explain=True`` each dropped or flagged node is logged at INFO.
    """

    k: int | None = None
    text: str | None = None
    score: str | None = None
    embedding: str | None = None
    source: str | None = None
    max_per_source: int | None = None
    lambda_mult: float = 0.5
    semantic_threshold: float = 0.95
    drop_semantic: bool = False
    explain: bool = False
    near: bool = True
    merge_overlaps: bool = True

    @classmethod
    def class_name(cls) -> str:
        return "DiversifyPostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        options: dict[str, Any] = {name: getattr(self, name) for name in (
            "text", "score", "embedding", "source", "max_per_source", "lambda_mult",
            "semantic_threshold", "drop_semantic", "explain", "near", "merge_overlaps")}
        kept = diversify(nodes, self.k, **options)
        for line in kept.explanation:
            logger.info("diversify: %s", line)
        return list(kept)
