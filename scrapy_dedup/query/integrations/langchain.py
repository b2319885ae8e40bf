"""LangChain: ``DiversifyCompressor``, a document compressor around :func:`scrapy_dedup.diversify`.

    from langchain_classic.retrievers import ContextualCompressionRetriever  # or langchain.retrievers
    retriever = ContextualCompressionRetriever(base_compressor=DiversifyCompressor(k=5),
                                               base_retriever=vectorstore.as_retriever(search_kwargs={"k": 20}))
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from scrapy_dedup.query.integrations.options import DiversifyOptions

__all__ = ["DiversifyCompressor"]


class DiversifyCompressor(DiversifyOptions, BaseDocumentCompressor):
    """Removes exact and near copies from retrieved documents and keeps at most ``k``.

    Sources of collapsed copies go to the kept document's ``metadata["also_in"]``. LangChain
    documents carry no score of their own: the retriever's order is the ranking unless
    ``metadata["score"]`` (or ``relevance_score``, as rerankers write) is set, or ``score`` names
    another field. With ``explain=True`` each dropped or flagged document is logged at INFO.
    """

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        return self._diversify(documents)
