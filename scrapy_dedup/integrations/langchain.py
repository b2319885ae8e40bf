"""LangChain: ``DiversifyCompressor``, a document compressor around :func:`scrapy_dedup.diversify`.

    from langchain_classic.retrievers import ContextualCompressionRetriever  # or langchain.retrievers
    retriever = ContextualCompressionRetriever(base_compressor=DiversifyCompressor(k=5),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 20}))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from scrapy_dedup.diversify import diversify

logger = logging.getLogger(__name__)

__all__ = ["DiversifyCompressor"]


class DiversifyCompressor(BaseDocumentCompressor):
    """Removes exact and near copies from retrieved documents and keeps at most ``k``.

    Sources of collapsed copies go to the kept document's ``metadata["also_in"]``. LangChain
    documents carry no score of their own: the retriever's order is the ranking unless
    ``metadata["score"]`` (or ``relevance_score``, as rerankers write) is set, or ``score`` names
    another field. With ``explain=True`` each dropped or flagged document is logged at INFO.
    """

    k: int | None = None
    text: str | Callable[[Any], str] | None = None
    score: str | Callable[[Any], float] | None = None
    embedding: str | Callable[[Any], Sequence[float]] | None = None
    source: str | Callable[[Any], Any] | None = None
    max_per_source: int | None = None
    lambda_mult: float = 0.5
    semantic_threshold: float = 0.95
    drop_semantic: bool = False
    explain: bool = False
    near: bool = True
    merge_overlaps: bool = True

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        kept = diversify(
            documents, self.k, text=self.text, score=self.score, embedding=self.embedding,
            source=self.source, max_per_source=self.max_per_source, lambda_mult=self.lambda_mult,
            semantic_threshold=self.semantic_threshold, drop_semantic=self.drop_semantic,
            explain=self.explain, near=self.near, merge_overlaps=self.merge_overlaps,
        )
        for line in kept.explanation:
            logger.info("diversify: %s", line)
        return list(kept)
