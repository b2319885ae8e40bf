"""The adapters in scrapy_dedup.query.integrations, against the real LangChain, LlamaIndex and Haystack
classes (installed by the ``integrations`` extra that ``make test`` installs)."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no usage reports from a test run

from scrapy_dedup import diversify  # noqa: E402

WORDS = [f"w{i}" for i in range(2000)]


def passage(seed: int, n: int = 120) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


def edited(text: str, position: int) -> str:
    words = text.split()
    words[position] = "edited"
    return " ".join(words)


# -- LangChain --------------------------------------------------------------------------------


def test_langchain_compressor():
    from langchain_core.documents import BaseDocumentCompressor, Document

    from scrapy_dedup.query.integrations.langchain import DiversifyCompressor

    a, b = passage(1), passage(2)
    docs = [
        Document(page_content=a, metadata={"source": "https://docs/a", "score": 0.9}, id="1"),
        Document(page_content=a.upper(), metadata={"source": "https://mirror/a", "score": 0.8}, id="2"),
        Document(page_content=edited(a, 60), metadata={"source": "https://old/a", "score": 0.7}, id="3"),
        Document(page_content=b, metadata={"source": "https://docs/b", "score": 0.6}, id="4"),
    ]
    compressor = DiversifyCompressor(k=5)
    assert isinstance(compressor, BaseDocumentCompressor)
    out = compressor.compress_documents(docs, "query")
    assert all(isinstance(d, Document) for d in out)
    assert [d.id for d in out] == ["1", "4"]
    assert out[0].metadata["also_in"] == ["https://mirror/a", "https://old/a"]
    assert "also_in" not in docs[0].metadata  # the retriever's documents are left as they were
    assert asyncio.run(compressor.acompress_documents(docs, "query")) == out
    assert len(DiversifyCompressor(k=1).compress_documents(docs, "query")) == 1


def test_langchain_documents_with_start_index_are_merged(caplog):
    from langchain_core.documents import Document

    from scrapy_dedup.query.integrations.langchain import DiversifyCompressor

    doc = passage(3, 200)
    # what a text splitter with add_start_index=True and an overlap produces
    chunks = [Document(page_content=doc[i : i + 500], metadata={"source": "guide.html", "start_index": i})
              for i in (0, 400, 800)]
    caplog.set_level("INFO", logger="scrapy_dedup.query.integrations.langchain")
    out = DiversifyCompressor(explain=True).compress_documents([chunks[1], chunks[0], chunks[2]], "q")
    assert len(out) == 1 and out[0].page_content == doc[:1300] and out[0].metadata["start_index"] == 0
    assert sum("overlapping span" in r.getMessage() for r in caplog.records) == 2


# -- LlamaIndex -------------------------------------------------------------------------------


def test_llama_index_postprocessor_in_a_query_pipeline():
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

    from scrapy_dedup.query.integrations.llama_index import DiversifyPostprocessor

    a, b = passage(4), passage(5)
    e1 = np.eye(8)[0]
    nodes = [
        NodeWithScore(node=TextNode(text=a, id_="n1", metadata={"file_path": "a.md"}, embedding=list(e1)), score=0.9),
        NodeWithScore(node=TextNode(text=a, id_="n2", metadata={"file_path": "copy/a.md"}, embedding=list(e1)),
                      score=0.8),
        NodeWithScore(node=TextNode(text=b, id_="n3", metadata={"file_path": "b.md"},
                                    embedding=list(e1 + 0.01 * np.eye(8)[1])), score=0.7),
        NodeWithScore(node=TextNode(text=passage(6), id_="n4", metadata={"file_path": "c.md"},
                                    embedding=list(np.eye(8)[2])), score=0.6),
    ]
    post = DiversifyPostprocessor(k=3)
    assert isinstance(post, BaseNodePostprocessor)
    out = post.postprocess_nodes(nodes, query_bundle=QueryBundle("query"))
    assert all(isinstance(n, NodeWithScore) for n in out)
    assert [n.node.node_id for n in out] == ["n1", "n3", "n4"]
    assert [n.score for n in out] == [0.9, 0.7, 0.6]
    first, second = out[0].node, out[1].node
    assert first.metadata["also_in"] == ["copy/a.md"]
    assert second.metadata["semantic_duplicate_of"] == 0 and second.metadata["semantic_similarity"] > 0.99
    # the added fields stay out of what the LLM reads
    assert "also_in" not in first.get_content(metadata_mode=MetadataMode.LLM)
    assert "file_path: a.md" in first.get_content(metadata_mode=MetadataMode.LLM)
    assert "also_in" not in nodes[0].node.metadata
    dropped = DiversifyPostprocessor(drop_semantic=True).postprocess_nodes(nodes, query_str="query")
    assert [n.node.node_id for n in dropped] == ["n1", "n4"]
    assert dropped[0].node.metadata["also_in"] == ["copy/a.md", "b.md"]


def test_llama_index_overlapping_nodes_of_a_real_splitter_are_merged():
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.schema import NodeWithScore

    from scrapy_dedup.query.integrations.llama_index import DiversifyPostprocessor

    text = ". ".join(passage(7 + i, 12) for i in range(40)) + "."
    document = Document(text=text, id_="guide")
    nodes = SentenceSplitter(chunk_size=120, chunk_overlap=40).get_nodes_from_documents([document])
    assert len(nodes) >= 3 and all(n.ref_doc_id == "guide" for n in nodes)
    assert nodes[1].start_char_idx < nodes[0].end_char_idx  # the splitter's overlap
    hits = [NodeWithScore(node=n, score=1.0 - i / 100) for i, n in enumerate(nodes[:3])]
    out = DiversifyPostprocessor().postprocess_nodes(hits, query_str="q")
    assert len(out) == 1
    merged = out[0].node
    assert (merged.start_char_idx, merged.end_char_idx) == (nodes[0].start_char_idx, nodes[2].end_char_idx)
    assert merged.text == text[merged.start_char_idx : merged.end_char_idx]


# -- Haystack ---------------------------------------------------------------------------------


def test_haystack_component_after_a_real_bm25_retriever():
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from scrapy_dedup.query.integrations.haystack import DiversifyRanker

    a, b = passage(20), passage(21)
    store = InMemoryDocumentStore()
    store.write_documents([
        Document(content=a + " vacuum", meta={"url": "https://docs/a"}),
        Document(content=(a + " vacuum").upper(), meta={"url": "https://mirror/a"}),
        Document(content=edited(a, 30) + " vacuum", meta={"url": "https://old/a"}),
        Document(content=b + " vacuum", meta={"url": "https://docs/b"}),
    ])
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=10))
    pipeline.add_component("diversify", DiversifyRanker(k=3))
    pipeline.connect("retriever.documents", "diversify.documents")
    out = pipeline.run({"retriever": {"query": "vacuum"}})["diversify"]["documents"]
    assert len(out) == 2 and all(isinstance(d, Document) for d in out)
    by_url = {d.meta["url"]: d for d in out}
    assert set(by_url) <= {"https://docs/a", "https://mirror/a", "https://old/a", "https://docs/b"}
    copies = [d for d in out if "also_in" in d.meta]
    assert len(copies) == 1 and len(copies[0].meta["also_in"]) == 2
    assert out[0].score >= out[1].score
    # the component serialises like any other (loading it back is the user's allowlist decision)
    data = pipeline.to_dict()["components"]["diversify"]
    assert data["type"] == "scrapy_dedup.query.integrations.haystack.DiversifyRanker"
    restored = DiversifyRanker.from_dict(data)
    assert restored.k == 3 and restored.options == DiversifyRanker(k=3).options


def test_haystack_pipeline_saved_under_the_old_path_still_loads():
    from haystack import Pipeline

    from scrapy_dedup.query.integrations.haystack import DiversifyRanker

    pipeline = Pipeline()
    pipeline.add_component("diversify", DiversifyRanker(k=3))
    data = pipeline.to_dict()
    old = "scrapy_dedup.integrations.haystack"
    data["components"]["diversify"]["type"] = f"{old}.DiversifyRanker"
    restored = Pipeline.from_dict(data, allowed_modules=[old]).get_component("diversify")
    assert type(restored) is DiversifyRanker and restored.k == 3


def test_haystack_splits_of_one_document_are_merged():
    from haystack import Document
    from haystack.components.preprocessors import DocumentSplitter

    from scrapy_dedup.query.integrations.haystack import DiversifyRanker

    text = passage(22, 90)
    splits = DocumentSplitter(split_by="word", split_length=40, split_overlap=10).run(
        [Document(content=text)])["documents"]
    splits = [dataclasses.replace(split, score=1.0 - i / 10) for i, split in enumerate(splits)]
    assert len(splits) >= 3
    out = DiversifyRanker().run(documents=splits)["documents"]
    assert len(out) == 1 and out[0].content == text


def test_all_adapters_agree_with_the_function():
    from haystack import Document as HaystackDocument
    from langchain_core.documents import Document
    from llama_index.core.schema import NodeWithScore, TextNode

    from scrapy_dedup.query.integrations.haystack import DiversifyRanker
    from scrapy_dedup.query.integrations.langchain import DiversifyCompressor
    from scrapy_dedup.query.integrations.llama_index import DiversifyPostprocessor

    texts = [passage(30), passage(30).upper(), edited(passage(30), 9), passage(31), passage(32)]
    scores = [0.5, 0.9, 0.7, 0.7, 0.1]
    expected = [h["text"] for h in diversify([{"text": t, "score": s} for t, s in zip(texts, scores)], 2)]
    lc = DiversifyCompressor(k=2).compress_documents(
        [Document(page_content=t, metadata={"score": s}) for t, s in zip(texts, scores)], "q")
    li = DiversifyPostprocessor(k=2).postprocess_nodes(
        [NodeWithScore(node=TextNode(text=t), score=s) for t, s in zip(texts, scores)], query_str="q")
    hs = DiversifyRanker(k=2).run([HaystackDocument(content=t, score=s) for t, s in zip(texts, scores)])["documents"]
    assert [d.page_content for d in lc] == [n.node.text for n in li] == [d.content for d in hs] == expected
