"""Retrieved hits as each framework shapes them: read a hit's text, score, embedding, source and
span, and make a copy of it with fields added.

Duck typed: plain strings, dicts, LangChain ``Document``, LlamaIndex ``NodeWithScore`` and
Haystack ``Document`` are recognised by their attributes, and none of those packages is imported.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Accessor", "HitKind", "kind_of", "resolve"]

#: Where a hit says which page or file it came from, in the order they are tried. LangChain's
#: loaders write ``source``, LlamaIndex's readers ``file_path``/``file_name``, crawled items ``url``.
SOURCE_KEYS = ("source", "url", "file_path", "file_name")
#: Where a chunk names the document it was cut from (a splitter's parent id), before the source.
DOCUMENT_KEYS = ("document_id", "doc_id", "ref_doc_id", "source_id")
#: Where a chunk says at which character of its document it starts: LangChain's splitters
#: (``add_start_index=True``), LlamaIndex nodes, Haystack's DocumentSplitter.
START_KEYS = ("start_index", "start_char_idx", "split_idx_start")
END_KEYS = ("end_index", "end_char_idx")

Accessor = Callable[[Any], Any]


def _first(meta: Mapping[str, Any] | None, keys: tuple[str, ...]) -> Any:
    if not meta:
        return None
    get = meta.get
    for key in keys:
        value = get(key)
        if value is not None:
            return value
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _span_of(meta: Mapping[str, Any] | None, length: int) -> tuple[int, int] | None:
    start = _first(meta, START_KEYS)
    if not _is_int(start):
        return None
    end = _first(meta, END_KEYS)
    return start, end if _is_int(end) else start + length


class HitKind:
    """How to read and copy one kind of hit. ``meta`` is where added fields go (None: nowhere)."""

    name = "object"

    def meta(self, hit: Any) -> Mapping[str, Any] | None:
        return None

    def text(self, hit: Any) -> Any:
        raise NotImplementedError

    def score(self, hit: Any) -> Any:
        meta = self.meta(hit)
        return meta.get("score") if meta else None

    def embedding(self, hit: Any) -> Any:
        meta = self.meta(hit)
        return meta.get("embedding") if meta else None

    def ident(self, hit: Any) -> Any:
        """The chunk's id, when the framework gives one."""
        return None

    def source(self, hit: Any) -> Any:
        return _first(self.meta(hit), SOURCE_KEYS)

    def document(self, hit: Any) -> Any:
        return _first(self.meta(hit), DOCUMENT_KEYS)

    def span(self, hit: Any, length: int) -> tuple[int, int] | None:
        """``(start, end)`` of the chunk in its document, in characters, when it says."""
        return _span_of(self.meta(hit), length)

    def place(self, hit: Any, length: int) -> tuple[Any, Any, Any, tuple[int, int] | None]:
        """``(source, ident, document, span)`` at once (kinds may read them faster together)."""
        return self.source(hit), self.ident(hit), self.document(hit), self.span(hit, length)

    def lookup(self, hit: Any, key: str) -> Any:
        """A user-named field: the hit's metadata first, then an attribute."""
        meta = self.meta(hit)
        if meta is not None and key in meta:
            return meta[key]
        return getattr(hit, key, None)

    def replace(self, hit: Any, fields: dict[str, Any], drop: tuple[str, ...], text: str | None,
                span: tuple[int, int] | None) -> Any:
        raise NotImplementedError

    @staticmethod
    def _new_meta(meta: Mapping[str, Any] | None, fields: dict[str, Any], drop: tuple[str, ...],
                  span: tuple[int, int] | None) -> dict[str, Any]:
        new = {k: v for k, v in (meta or {}).items() if k not in drop}
        new.update(fields)
        if span is not None:
            for key in START_KEYS:
                if key in new:
                    new[key] = span[0]
            for key in END_KEYS:
                if key in new:
                    new[key] = span[1]
        return new


class _Str(HitKind):
    name = "str"

    def text(self, hit: str) -> str:
        return hit

    def score(self, hit: str) -> None:
        return None

    def embedding(self, hit: str) -> None:
        return None

    def lookup(self, hit: str, key: str) -> None:
        return None

    def replace(self, hit, fields, drop, text, span):
        return hit if text is None else text  # a string has nowhere to carry fields


_TEXT_KEYS = ("text", "page_content", "content")


class _Dict(HitKind):
    """A mapping: fields at the top level; source and span also looked for under
    ``metadata``/``meta`` (a serialised Document)."""

    name = "dict"

    def meta(self, hit):
        return hit

    def _inner(self, hit) -> Mapping[str, Any] | None:
        inner = hit.get("metadata", hit.get("meta"))
        return inner if isinstance(inner, Mapping) else None

    def text(self, hit):
        for key in _TEXT_KEYS:
            if key in hit:
                return hit[key]
        raise KeyError(f"no {', '.join(map(repr, _TEXT_KEYS))} key (pass text=KEY)")

    def ident(self, hit):
        return hit.get("id", hit.get("chunk_id"))

    def source(self, hit):
        found = _first(hit, SOURCE_KEYS)
        return found if found is not None else _first(self._inner(hit), SOURCE_KEYS)

    def document(self, hit):
        found = _first(hit, DOCUMENT_KEYS)
        return found if found is not None else _first(self._inner(hit), DOCUMENT_KEYS)

    def span(self, hit, length):
        return super().span(hit, length) or _span_of(self._inner(hit), length)

    def place(self, hit, length):
        # source(), ident(), document() and span() with the nested metadata looked up once
        inner = self._inner(hit) if "metadata" in hit or "meta" in hit else None
        source = _first(hit, SOURCE_KEYS)
        if source is None and inner is not None:
            source = _first(inner, SOURCE_KEYS)
        document = _first(hit, DOCUMENT_KEYS)
        if document is None and inner is not None:
            document = _first(inner, DOCUMENT_KEYS)
        span = _span_of(hit, length)
        if span is None and inner is not None:
            span = _span_of(inner, length)
        return source, hit.get("id", hit.get("chunk_id")), document, span

    def lookup(self, hit, key):
        if key in hit:
            return hit[key]
        inner = self._inner(hit)
        return inner.get(key) if inner is not None else None

    def replace(self, hit, fields, drop, text, span):
        new = self._new_meta(hit, fields, drop, span)
        if text is not None:
            new[next(key for key in _TEXT_KEYS if key in hit)] = text
        return new


class _DocumentObject(HitKind):
    """A document object that carries its text, metadata and id as attributes."""

    meta_attr = text_attr = ""

    def meta(self, hit):
        return getattr(hit, self.meta_attr)

    def text(self, hit):
        return getattr(hit, self.text_attr)

    def ident(self, hit):
        return getattr(hit, "id", None)

    def replace(self, hit, fields, drop, text, span):
        update = {self.meta_attr: self._new_meta(getattr(hit, self.meta_attr), fields, drop, span)}
        if text is not None:
            update[self.text_attr] = text
        return _copy_with(hit, update)


class _LangChain(_DocumentObject):
    """langchain_core.documents.Document: ``page_content``, ``metadata``, ``id``."""

    name = "langchain"
    meta_attr, text_attr = "metadata", "page_content"

    def score(self, hit):
        # LangChain keeps scores beside documents; rerankers and retrievers that keep them on
        # the document write one of these.
        return _first(hit.metadata, ("score", "relevance_score"))


class _LlamaIndex(HitKind):
    """llama_index.core.schema.NodeWithScore: ``score`` and a ``node`` with ``text``,
    ``metadata``, ``embedding``, ``node_id``, ``ref_doc_id``, ``start_char_idx``/``end_char_idx``."""

    name = "llama_index"

    def meta(self, hit):
        return hit.node.metadata

    def text(self, hit):
        node = hit.node
        text = getattr(node, "text", None)
        return text if isinstance(text, str) else node.get_content(metadata_mode="none")

    def score(self, hit):
        return hit.score

    def embedding(self, hit):
        return getattr(hit.node, "embedding", None)

    def ident(self, hit):
        return getattr(hit.node, "node_id", None)

    def document(self, hit):
        found = _first(hit.node.metadata, DOCUMENT_KEYS)
        return found if found is not None else getattr(hit.node, "ref_doc_id", None)

    def span(self, hit, length):
        start = getattr(hit.node, "start_char_idx", None)
        end = getattr(hit.node, "end_char_idx", None)
        if _is_int(start):
            return start, end if _is_int(end) else start + length
        return super().span(hit, length)

    def lookup(self, hit, key):
        node = hit.node
        if key in node.metadata:
            return node.metadata[key]
        return getattr(hit, key, getattr(node, key, None))

    def replace(self, hit, fields, drop, text, span):
        node = hit.node
        update: dict[str, Any] = {"metadata": self._new_meta(node.metadata, fields, drop, span)}
        # The fields describe the retrieval, not the passage: keep them out of the text that
        # LlamaIndex sends to the LLM and the embedder along with the metadata.
        for attr in ("excluded_llm_metadata_keys", "excluded_embed_metadata_keys"):
            excluded = getattr(node, attr, None)
            if isinstance(excluded, list):
                update[attr] = excluded + [key for key in fields if key not in excluded]
        if text is not None:
            update["text"] = text
        if span is not None and getattr(node, "start_char_idx", None) is not None:
            update["start_char_idx"], update["end_char_idx"] = span
        return _copy_with(hit, {"node": _copy_with(node, update)})


class _Haystack(_DocumentObject):
    """haystack.Document: ``content``, ``meta``, ``score``, ``embedding``, ``id``; splits carry
    ``source_id`` and ``split_idx_start`` in ``meta``."""

    name = "haystack"
    meta_attr, text_attr = "meta", "content"

    def score(self, hit):
        return hit.score

    def embedding(self, hit):
        return hit.embedding


def _copy_with(obj: Any, update: dict[str, Any]) -> Any:
    """A shallow copy of ``obj`` with some attributes replaced: pydantic models (LangChain,
    LlamaIndex), dataclasses (Haystack), anything else through copy.copy."""
    model_copy = getattr(obj, "model_copy", None)
    if callable(model_copy):
        return model_copy(update=update)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **update)
    new = copy.copy(obj)
    for key, value in update.items():
        setattr(new, key, value)
    return new


_KINDS = {"str": _Str(), "dict": _Dict(), "langchain": _LangChain(), "llama_index": _LlamaIndex(),
          "haystack": _Haystack()}
_BY_TYPE: dict[type, HitKind] = {}


def kind_of(hit: Any) -> HitKind:
    """The reader for ``hit``, chosen once per type by its attributes.

    >>> kind_of("a passage").name, kind_of({"text": "a passage"}).name
    ('str', 'dict')
    """
    cls = type(hit)
    kind = _BY_TYPE.get(cls)
    if kind is None:
        if isinstance(hit, str):
            kind = _KINDS["str"]
        elif isinstance(hit, Mapping):
            kind = _KINDS["dict"]
        elif hasattr(hit, "node") and hasattr(hit, "score"):
            kind = _KINDS["llama_index"]
        elif hasattr(hit, "page_content") and hasattr(hit, "metadata"):
            kind = _KINDS["langchain"]
        elif hasattr(hit, "content") and hasattr(hit, "meta"):
            kind = _KINDS["haystack"]
        else:
            raise TypeError(
                f"cannot read a hit of type {cls.__module__}.{cls.__qualname__}: expected a str, a dict, "
                "a LangChain Document, a LlamaIndex NodeWithScore or a Haystack Document"
            )
        _BY_TYPE[cls] = kind
    return kind


def resolve(spec: str | Accessor | None, default: str) -> Callable[[HitKind, Any], Any]:
    """A reader for one property: the kind's own (``spec`` None), a named field (``spec`` a
    str), or the caller's function of the hit."""
    if spec is None:
        return lambda kind, hit: getattr(kind, default)(hit)
    if isinstance(spec, str):
        return lambda kind, hit: kind.lookup(hit, spec)
    if callable(spec):
        return lambda kind, hit: spec(hit)
    raise TypeError(f"expected a field name or a function of the hit, got {type(spec).__name__}")
