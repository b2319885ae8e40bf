"""Thin adapters of :func:`scrapy_dedup.diversify` for retrieval frameworks.

Each lives in its own module and imports its framework there, so importing this package
imports none of them:

- ``scrapy_dedup.query.integrations.langchain``: ``DiversifyCompressor``, a LangChain document
  compressor (use it in a ``ContextualCompressionRetriever``, or call ``compress_documents``);
- ``scrapy_dedup.query.integrations.llama_index``: ``DiversifyPostprocessor``, a LlamaIndex node
  postprocessor (``node_postprocessors=[...]`` of a query engine);
- ``scrapy_dedup.query.integrations.haystack``: ``DiversifyRanker``, a Haystack component that takes
  and returns ``documents``.

Their settings are :func:`~scrapy_dedup.diversify`'s keyword arguments, with the same defaults.
"""
