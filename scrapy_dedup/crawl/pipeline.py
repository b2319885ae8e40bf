"""Item pipeline: the content layer of the funnel.

For each item: find its text (the item's text field, else its html field,
else the response it came from), fingerprint it in a worker process, ask the
content index for a decision, then annotate the item with a ``dedup`` field
and drop it when it duplicates a document already emitted.  A byte-identical
body seen before skips extraction entirely.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import DropItem
from twisted.internet import task

from scrapy_dedup.core.body import CutBody, cut_body
from scrapy_dedup.core.fingerprints import Fingerprint, raw_hash
from scrapy_dedup.crawl.busy import WaitStopped, when_free
from scrapy_dedup.crawl.canonical import CanonicalWaitStopped, await_canonical
from scrapy_dedup.crawl.pending import META_RESUMED, LeftPending
from scrapy_dedup.crawl.responses import content_kind
from scrapy_dedup.crawl.sources import ItemSource
from scrapy_dedup.crawl.state import DedupState
from scrapy_dedup.crawl.workers import ExtractionPool, PoolClosed
from scrapy_dedup.decide.index import Decision, Document
from scrapy_dedup.extraction.analysis import (
    analyse_chunks,
    analyse_html,
    analyse_text,
    analysed_and_packed,
)
from scrapy_dedup.extraction.main_text import page_title
from scrapy_dedup.store.base import StoreWriteError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Name of the field added to each item.
ITEM_FIELD = "dedup"

#: The ``dedup`` field of an undecided item: these are None, ``status`` is ``undecided``.
UNDECIDED_FIELDS = ("content_hash", "simhash", "cluster_id", "canonical_url", "duplicate_of", "distance")

#: Counts shown in the periodic log line.
LOGGED_STATS = ("new", "updated", "unchanged", "exact_duplicate", "near_duplicate")


class _Content(NamedTuple):
    """What an item's page is compared by."""

    #: its text; None when not extracted (a binary, or a body recalled by its raw hash)
    text: str | None
    #: None for a binary
    fingerprint: Fingerprint | None
    raw_hash: str
    #: the text as the store keeps it, when it is kept (DEDUP_KEEP_TEXT)
    packed: bytes | None = None
    #: the page is plain text
    plain: bool = False
    #: the markup its text was extracted from (its headings make the chunks' spans), when it was
    markup: str | bytes | None = None


class DedupPipeline:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.state = DedupState.of(crawler)
        config = self.state.config
        self.options = config.extract_options
        self.pool = ExtractionPool(config.workers)
        self._logstats: task.LoopingCall | None = None
        crawler.signals.connect(self.state.sources.forget, signal=signals.item_dropped)
        crawler.signals.connect(self.state.sources.forget, signal=signals.item_error)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupPipeline:
        return cls(crawler)

    def open_spider(self, spider=None) -> None:
        self.state.open()
        self.pool.start()
        from twisted.internet import reactor

        # a forced stop (a second Ctrl-C) stops the reactor without closing the spider:
        # terminate the workers then, so that the process never waits on them at exit
        reactor.addSystemEventTrigger("before", "shutdown", self.pool.close, False)  # type: ignore[arg-type]  # zope-typed reactor
        reactor.addSystemEventTrigger("before", "shutdown", self.state.decisions.close)  # type: ignore[arg-type]
        interval = self.state.config.logstats_interval
        if interval > 0:
            self._logstats = task.LoopingCall(self.log_stats)
            self._logstats.start(interval, now=False)

    def close_spider(self, spider=None) -> None:
        if self._logstats is not None and self._logstats.running:
            self._logstats.stop()
        self.pool.close()
        self.state.decisions.close()
        self.state.canonical_waits.release_all()
        self.log_stats()

    def log_stats(self) -> None:
        stats = self.state.stats
        dropped = sum(v for k, v in stats.get_stats().items() if k.startswith("dedup/url/dropped/"))
        counts = ", ".join(f"{stats.get_value(f'dedup/doc/{s}', 0)} {s}" for s in LOGGED_STATS)
        logger.info("dedup: %d requests dropped before fetch; documents: %s", dropped, counts)

    # -- the item -----------------------------------------------------------
    async def process_item(self, item: Any, spider=None) -> Any:
        source = self.state.sources.take(item)
        response = source.response if source is not None else None
        if response is not None and response.meta.get("dont_dedup"):
            return item
        adapter = ItemAdapter(item)
        config = self.state.config
        url = adapter.get(config.url_field) or (response.url if response is not None else None)
        if not url:
            self.state.inc("doc/no_url")
            return item
        try:
            decision, content = await self._decide(adapter, str(url), source, response)
            text, markup = content.text, content.markup
            # a document decided before an interruption, whose emission it may have cut off
            resumed = response is not None and META_RESUMED in response.meta
            self.state.pending.replay(decision, self.state.key(str(url)), resumed)
            self._count(decision)
            # this URL's old content now lives on in another member: emit that one too
            gone = [] if decision.status == "updated" else [decision.url]
            self.state.take_over(decision.promoted, gone, like=getattr(response, "request", None))
            chunking = self.state.chunks is not None and config.chunks
            if chunking and decision.status == "unchanged" and decision.is_representative and text is not None:
                # extracted again (its markup or the extraction changed) and its text kept anew:
                # its chunks' spans point into that text
                await self._safe_chunks(decision, str(url), text, markup, adapter)
            self._settle(decision)
            if text is None and (chunking or self._wants_text(item, adapter)) and _kind(response) == "html":
                # a body recalled by its raw hash skipped extraction; the item still wants its text
                markup = self._markup(adapter, response)
                text, _ = await self.pool.run(analyse_html, markup, url, self.options)
            chunks = await self._safe_chunks(decision, str(url), text, markup, adapter) if chunking else False
        except DropItem:
            raise
        except (PoolClosed, CanonicalWaitStopped, WaitStopped):
            # the crawl is stopping: the item is not passed on, its request stays owed
            self.state.inc("doc/left_pending")
            raise LeftPending(f"the crawl stopped before {url} was decided; the next run decides it") from None
        except StoreWriteError as exc:
            # no record was written: the item is not emitted, its request stays owed
            self.state.store_failed(exc)
            self.state.inc("doc/left_pending")
            raise LeftPending(f"the store could not record {url}; the next run decides it") from exc
        except Exception as exc:
            self.state.failed("pipeline", "could not decide the item of %s; passing it on as undecided", url)
            return self._undecided(item, adapter, exc)
        return self._annotate(item, adapter, decision, text, chunks)

    def _scope_of(self, adapter: ItemAdapter) -> str:
        field = self.state.config.scope_field
        return str(adapter.get(field)) if field and adapter.get(field) is not None else ""

    async def _safe_chunks(
        self, decision: Decision, url: str, text: str | None, markup: str | bytes | None, adapter: ItemAdapter
    ) -> list | None:
        """The item's chunks; None when they could not be made (counted and logged: the page's
        decision stands, and the end of the crawl chunks it from its kept text)."""
        try:
            return await self._chunks(decision, url, text, self._scope_of(adapter), markup)
        except (PoolClosed, StoreWriteError):
            raise
        except Exception:
            self.state.failed("chunks", "could not chunk %s; its item goes on with chunks = None", url)
            return None

    def _markup(self, adapter: ItemAdapter, response: Any) -> str | bytes:
        """The HTML of a page whose extraction its raw hash skipped, cut as the crawl cuts it."""
        html = _html_field(adapter, self.state.config.html_field)
        return _markup_of(html, response, _body(html, response, self.state.config.max_body_bytes))

    async def _chunks(
        self, decision: Decision, url: str, text: str | None, scope: str, markup: str | bytes | None
    ) -> list[dict[str, Any]]:
        """The item's chunks with their statuses; a representative's are kept in the store."""
        layer, config = self.state.chunks, self.state.config
        assert layer is not None  # called only when chunking
        for gone in decision.supersedes:
            layer.forget(self.state.key(gone))
        if text is None:
            return []
        text = text[: config.max_text_chars]  # the text the store keeps: offsets point into it
        key = self.state.key(url)
        # headings from the page's h1..h6 (text given by the spider: its Markdown '#' lines)
        page = await self.pool.run(partial(analyse_chunks, text, markup, **layer.chunk_args(key, url)))
        if decision.is_representative:
            rows = layer.record(key, url, scope, page)
        else:
            rows = layer.lookup(key, scope, page)
        self.state.inc("chunks/chunks", len(rows))
        for row in rows:
            self.state.inc(f"chunks/{row.status}")
        return [row.as_item(text) for row in rows]

    async def _decide(
        self, adapter: ItemAdapter, url: str, source: ItemSource | None, response: Any
    ) -> tuple[Decision, _Content]:
        state, config = self.state, self.state.config
        key = state.key(url)
        scope = self._scope_of(adapter)
        content = await self._content(adapter, url, response)
        text = content.text
        meta = response.meta if response is not None else {}
        doc = Document(
            key=key,
            url=url,
            fingerprint=content.fingerprint,
            raw_hash=content.raw_hash,
            scope=scope,
            promoted=bool(meta.get("dedup_promoted")),
            supersedes=tuple(meta.get("dedup_supersedes", ())),
            recalled=text is None and content.fingerprint is not None,
            title=_title(adapter, config.title_field, config.html_field, response),
            plain_text=content.plain,
        )
        if config.keep_text and text is not None:
            doc.text, doc.packed_text = text[: config.max_text_chars], content.packed
        if source is not None and source.canonical_key is not None:
            doc.canonical_key, doc.canonical_url = source.canonical_key, source.canonical_url
            await await_canonical(state, key, source.canonical_key)
        try:
            decision = await self._ingest(doc)
        finally:
            state.canonical_waits.release(key)
        return decision, content

    async def _ingest(self, doc: Document) -> Decision:
        """Decide ``doc`` on the decision thread. While another holder decides the same URL key
        (another process of a shared store, most often one that died holding it, until its
        lease runs out), wait without blocking the reactor: the crawl fetches and decides other
        pages meanwhile."""
        state, index = self.state, self.state.index
        assert index is not None  # the store is open
        return await when_free(state, lambda: state.decisions.decide(doc.key, index.ingest, doc), doc.key)

    async def _content(self, adapter: ItemAdapter, url: str, response: Any) -> _Content:
        config = self.state.config
        text = adapter.get(config.text_field) if config.text_field in adapter else None
        if isinstance(text, str):
            _, fp, packed = await self._analyse(analyse_text, text, self.options)
            return _Content(text, fp, raw_hash(text.encode("utf-8", "surrogatepass")), packed)
        html = _html_field(adapter, config.html_field)
        if html is None and response is None:
            raise ValueError(f"no {config.text_field!r}, {config.html_field!r} or response for {url}")
        body = _body(html, response, config.max_body_bytes)
        if body.cut:
            # the page's text is that of its first DEDUP_MAX_BODY_BYTES: said, not left silent
            self.state.inc("doc/body_cut")
            logger.warning(
                "%s: its body of %d bytes is cut at DEDUP_MAX_BODY_BYTES = %d before extraction: "
                "its text ends there",
                url,
                body.size,
                config.max_body_bytes,
            )
        body_hash = raw_hash(body.body)
        kind = content_kind(response) if response is not None else "html"
        if html is not None and kind != "text":
            kind = "html"  # markup the spider gives is extracted, whatever its response was
        if kind == "binary":
            self.state.inc("doc/binary")
            return _Content(None, None, body_hash)
        assert self.state.index is not None  # the store is open
        known = await self.state.decisions.run(self.state.index.recall, body_hash)
        if known is not None:
            self.state.inc("doc/extraction_skipped")
            return _Content(None, known, body_hash, plain=kind == "text")
        markup = _markup_of(html, response, body)
        if kind == "text":
            # a text/plain page (in the item's HTML field too, as a spider yielding
            # response.text for every page gives it) is its own text
            plain = body.text("utf-8", "replace") if isinstance(markup, bytes) else markup
            text, fp, packed = await self._analyse(analyse_text, plain, self.options)
            return _Content(text, fp, body_hash, packed, plain=True)
        self.state.inc("doc/extracted")
        text, fp, packed = await self._analyse(analyse_html, markup, url, self.options)
        return _Content(text, fp, body_hash, packed, markup=markup)

    async def _analyse(self, analyse, *args) -> tuple[str, Fingerprint, bytes | None]:
        """``analyse(*args)`` in a worker; with DEDUP_KEEP_TEXT the worker packs the text too."""
        if self.state.config.keep_text:
            return await self.pool.run(analysed_and_packed, analyse, *args)
        text, fp = await self.pool.run(analyse, *args)
        return text, fp, None

    # -- the outcome --------------------------------------------------------
    def _count(self, decision: Decision) -> None:
        self.state.inc(f"doc/{decision.status}")
        if decision.canonical is not None:
            self.state.inc(f"canonical/{decision.canonical}")
        if decision.supersedes:
            self.state.inc("doc/superseded", len(decision.supersedes))

    def _settle(self, decision: Decision) -> None:
        """Raise DropItem unless the item goes on."""
        if decision.status == "skipped_empty":
            raise _drop(f"no text to deduplicate in {decision.url}")
        if decision.status == "unchanged":
            raise _drop(f"unchanged since the last crawl: {decision.url}")
        if not decision.is_representative and self.state.config.drop_duplicates:
            self.state.inc("doc/dropped")
            raise _drop(f"{decision.status} of {decision.duplicate_of} ({decision.reason}): {decision.url}")

    def _wants_text(self, item: Any, adapter: ItemAdapter) -> bool:
        field = self.state.config.text_field
        return field not in adapter and (isinstance(item, dict) or field in adapter.field_names())

    @staticmethod
    def _undecided(item: Any, adapter: ItemAdapter, exc: Exception) -> Any:
        """An item the extension could not decide goes on saying so, never looking decided."""
        if isinstance(item, dict) or ITEM_FIELD in adapter.field_names():
            adapter[ITEM_FIELD] = {
                **{name: None for name in UNDECIDED_FIELDS},
                "status": "undecided",
                "supersedes": [],
                "error": f"{type(exc).__name__}: {exc}",
            }
        return item

    def _annotate(
        self, item: Any, adapter: ItemAdapter, decision: Decision, text: str | None, chunks: list | None | bool = False
    ) -> Any:
        if isinstance(item, dict) or ITEM_FIELD in adapter.field_names():
            adapter[ITEM_FIELD] = decision.as_item_field()
            if chunks is not False:  # DEDUP_CHUNKS
                adapter[ITEM_FIELD]["chunks"] = chunks
        config = self.state.config
        if text is not None and self._wants_text(item, adapter):
            adapter[config.text_field] = text
        if config.drop_html and config.html_field in adapter and adapter.get(config.text_field) is not None:
            # the text stands for the page now; an item without its text keeps its HTML
            del adapter[config.html_field]
        return item


def _title(adapter: ItemAdapter, field: str, html_field: str, response: Any) -> str | None:
    """The item's title field, else the ``<title>`` of its HTML (its html field, or the HTML
    response it came from)."""
    markup = adapter.get(html_field) if html_field in adapter else None
    if not isinstance(markup, (str, bytes)):
        markup = response.text if response is not None and _kind(response) == "html" else None
    return page_title(adapter.get(field) if field in adapter else None, markup)


def _html_field(adapter: ItemAdapter, field: str) -> str | bytes | None:
    html = adapter.get(field) if field in adapter else None
    return html if isinstance(html, (str, bytes)) else None


def _body(html: str | bytes | None, response: Any, limit: int) -> CutBody:
    """The page's body (its item's html field, else its response's) cut at DEDUP_MAX_BODY_BYTES."""
    return cut_body(html if html is not None else response.body, limit)


def _markup_of(html: str | bytes | None, response: Any, body: CutBody) -> str | bytes:
    """What extraction reads of the kept bytes: the item's html field (bytes stay bytes, the
    extraction finds their encoding), else the response's text, decoded as ``response.text`` is."""
    if isinstance(html, bytes):
        return body.body
    if isinstance(html, str):
        return body.text()
    if not body.cut:
        return response.text
    # response.text leaves out a byte order mark
    return body.text(response.encoding, "replace").removeprefix("\ufeff")


def _kind(response: Any) -> str | None:
    return content_kind(response) if response is not None else None


def _drop(message: str) -> DropItem:
    exc = DropItem(message)
    exc.log_level = "DEBUG"  # duplicates are routine; the stats count them
    return exc
