"""The index side of bench_index_sync.py: run in ``.venv-index`` (LangChain and LlamaIndex, pinned there).

    .venv-index/bin/python benchmarks/index_sync_apply.py BEFORE.jsonl CHANGES.jsonl AFTER.jsonl

BEFORE and AFTER are full exports (``scrapy dedup export``) before and after a re-crawl, CHANGES
the export ``--changes-since`` the token BEFORE printed. Each index is built from BEFORE, then
brought up to date two ways: with the changes (upsert the changed documents, delete the gone
ones), and without them (the whole of AFTER given to the framework's own sync). Prints, as JSON,
the texts embedded each way (LangChain: one per document; LlamaIndex: one per node of
256 words) and whether the index then holds exactly AFTER.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def read(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines()]


def settled(records: list[dict]) -> dict[str, str]:
    return {r["document_id"]: r["text"] for r in records}


def langchain(before: list[dict], changes: list[dict], after: list[dict]) -> dict:
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.indexing import InMemoryRecordManager, index
    from langchain_core.vectorstores import InMemoryVectorStore

    embedded = [0]

    class Counting(DeterministicFakeEmbedding):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            embedded[0] += len(texts)
            return super().embed_documents(texts)

    def documents(records: list[dict]) -> list[Document]:
        return [
            Document(r["text"], metadata={"document_id": r["document_id"], "url": r["url"], "title": r["title"]})
            for r in records
        ]

    def built() -> tuple:
        manager = InMemoryRecordManager("scrapy-dedup")
        manager.create_schema()
        store = InMemoryVectorStore(Counting(size=16))
        index(documents(before), manager, store, cleanup="full", source_id_key="document_id", key_encoder="sha256")
        return manager, store

    def holds(store) -> bool:
        return {v["metadata"]["document_id"]: v["text"] for v in store.store.values()} == settled(after)

    out: dict = {}
    embedded[0] = 0
    manager, store = built()
    out["initial_embedded"] = embedded[0]
    # with the changes: the record manager's keys of each document deleted, the changed ones indexed
    embedded[0], start = 0, time.perf_counter()
    gone = [c["document_id"] for c in changes if c["op"] == "delete"]
    keys = manager.list_keys(group_ids=gone) if gone else []
    if keys:
        store.delete(keys)
        manager.delete_keys(keys)
    upserts = [c for c in changes if c["op"] == "upsert"]
    result = index(documents(upserts), manager, store, cleanup="incremental", source_id_key="document_id", key_encoder="sha256")
    out["with_changes"] = {
        "embedded": embedded[0], "seconds": round(time.perf_counter() - start, 3), "deleted": len(keys) + result["num_deleted"],
        "holds_the_settled_export": holds(store),
    }  # fmt: skip
    # without them: the whole new export through index() with full cleanup
    manager, store = built()
    embedded[0], start = 0, time.perf_counter()
    result = index(documents(after), manager, store, cleanup="full", source_id_key="document_id", key_encoder="sha256")
    out["full_export_through_index"] = {
        "embedded": embedded[0], "seconds": round(time.perf_counter() - start, 3), "deleted": result["num_deleted"],
        "skipped": result["num_skipped"], "holds_the_settled_export": holds(store),
    }  # fmt: skip
    return out


def llamaindex(before: list[dict], changes: list[dict], after: list[dict]) -> dict:
    from llama_index.core import Document
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores import SimpleVectorStore

    embedded = [0]

    class Counting(MockEmbedding):
        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            embedded[0] += len(texts)
            return super()._get_text_embeddings(texts)

    def documents(records: list[dict]) -> list[Document]:
        return [Document(text=r["text"], id_=r["document_id"], metadata={"url": r["url"], "title": r["title"]}) for r in records]

    def built() -> IngestionPipeline:
        # a splitter makes nodes of each document: the vector store knows them by document id
        splitter = SentenceSplitter(chunk_size=256, chunk_overlap=0, tokenizer=str.split)
        p = IngestionPipeline(
            transformations=[splitter, Counting(embed_dim=16)],
            docstore=SimpleDocumentStore(),
            vector_store=SimpleVectorStore(),
            docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE,
        )
        p.run(documents=documents(before))
        return p

    def holds(p: IngestionPipeline) -> bool:
        expected = {d.id_: d.hash for d in documents(after)}
        vectors = set(p.vector_store.data.text_id_to_ref_doc_id.values())
        return p.docstore.get_all_document_hashes() == {h: i for i, h in expected.items()} and vectors == set(expected)

    out: dict = {}
    embedded[0] = 0
    p = built()
    out["initial_embedded"] = embedded[0]
    # with the changes: each gone document deleted from the docstore and the vector store,
    # the changed ones upserted
    embedded[0], start = 0, time.perf_counter()
    for change in changes:
        if change["op"] == "delete":
            p.vector_store.delete(change["document_id"])
            p.docstore.delete_document(change["document_id"], raise_error=False)
    p.docstore_strategy = DocstoreStrategy.UPSERTS
    p.run(documents=documents([c for c in changes if c["op"] == "upsert"]))
    out["with_changes"] = {
        "embedded": embedded[0], "seconds": round(time.perf_counter() - start, 3), "holds_the_settled_export": holds(p),
    }  # fmt: skip
    # without them: the whole new export through the pipeline's upserts-and-delete
    p = built()
    embedded[0], start = 0, time.perf_counter()
    p.run(documents=documents(after))
    out["full_export_through_upserts_and_delete"] = {
        "embedded": embedded[0], "seconds": round(time.perf_counter() - start, 3), "holds_the_settled_export": holds(p),
    }  # fmt: skip
    return out


def main() -> None:
    before, changes, after = (read(path) for path in sys.argv[1:4])
    import langchain_core
    import llama_index.core

    print(json.dumps({
        "versions": {"langchain-core": langchain_core.__version__, "llama-index-core": llama_index.core.__version__},
        "langchain": langchain(before, changes, after),
        "llama_index": llamaindex(before, changes, after),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
