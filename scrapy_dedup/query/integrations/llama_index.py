"""LlamaIndex: ``DiversifyPostprocessor``, a node postprocessor around :func:`scrapy_dedup.diversify`.

    query_engine = index.as_query_engine(similarity_top_k=20,
                                         node_postprocessors=[DiversifyPostprocessor(k=5)])
"""

from __future__ import annotations

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from scrapy_dedup.query.integrations.options import DiversifyOptions

__all__ = ["DiversifyPostprocessor"]


class DiversifyPostprocessor(DiversifyOptions, BaseNodePostprocessor):
    """Removes exact and near copies from retrieved nodes, merges overlapping chunks of one
    document, and keeps at most ``k``, using the nodes' scores and embeddings when they have them.

    Added fields go to ``node.metadata`` (``also_in``, ``semantic_duplicate_of``,
    ``semantic_similarity``) and are excluded from the text sent to the LLM and the embedder.
    ``text``/``score``/``embedding``/``source`` name metadata keys to read instead. With
    ``explain=True`` each dropped or flagged node is logged at INFO.
    """

    @classmethod
    def class_name(cls) -> str:
        return "DiversifyPostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return self._diversify(nodes)
