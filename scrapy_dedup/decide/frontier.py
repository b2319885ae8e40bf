"""The URL layer's memory: which URL keys were scheduled, fetched or aliased.

Scrapy-free: the dupefilter and the middlewares call it with plain values.
The seen-set lives in the store, not in a Python set, so memory stays flat
and the frontier survives between runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from urllib.parse import urldefrag

from scrapy_dedup.core.records import UrlRecord, record_time
from scrapy_dedup.store.base import ALIASES, VARIANT, DedupStore, OweOffer
from scrapy_dedup.store.records import frontier_mark, get_url, has_pending, put_alias

#: reasons a request is dropped before it is fetched (stats ``dedup/url/dropped/<reason>``)
DROP_SEEN = "seen"  # the key was already scheduled in this run
DROP_ALIAS = "alias"  # the key is known to redirect to another URL
DROP_FRESH = "fresh"  # fetched in an earlier run, not yet due for a revisit
#: a variant's reason when its request went out under the normalized URL (no drop)
NORMALIZED = "normalized"

#: keys known scheduled in this run that a frontier remembers (about 300 bytes each)
SCHEDULED_KEPT = 16_384


class Frontier:
    def __init__(
        self,
        store: DedupStore,
        run: int,
        *,
        revisit_after: float | None = None,
        first_run: int | None = None,
        job_started: float | None = None,
        clock: Callable[[], float] = record_time,
    ) -> None:
        self.store = store
        self.run = run
        #: recorded as a new URL's first run (a resumed run continues the run it resumes)
        self.first_run = run if first_run is None else first_run
        #: when the job this run belongs to began (None: unknown): a resumed run is the rest of it
        self.job_started = job_started
        self.revisit_after = revisit_after
        self.clock = clock
        #: url key -> first URL ("" when it is the key) of keys known scheduled in this run,
        #: the most recently checked ones: a key scheduled in a run stays so, so they are
        #: answered without the store (bounded: the seen-set itself stays in the store)
        self._scheduled: OrderedDict[str, str] = OrderedDict()
        #: checks answered that way
        self.known_checks = 0
        #: keys this frontier found never scheduled before (the most recent ones): nothing was
        #: fetched for them, so their first request needs no validators from the store
        self._never_fetched: OrderedDict[str, None] = OrderedDict()
        #: of those, keys the store also found without a URL record when it marked them (a
        #: shared store tells): their first response is recorded without reading one
        self._recordless: OrderedDict[str, None] = OrderedDict()
        #: url key -> (what its mark answered, the offer owed with it) of keys marked ahead of
        #: their check (:meth:`mark_ahead`), until the check comes
        self._ahead: OrderedDict[str, tuple[tuple[int, str] | None, OweOffer]] = OrderedDict()

    def check(self, url: str, key: str, original: str | None = None, owe: OweOffer | None = None) -> str | None:
        """Mark ``key`` scheduled; return None to fetch ``url``, else why to drop it.

        ``original`` is the URL as the page wrote it, before normalization: when
        it differs from the URL fetched for ``key`` it is recorded as a variant.
        ``owe``: the request, owed with the mark when the key is new (``owe.owed``; see
        :func:`~scrapy_dedup.store.records.frontier_mark`), so that the caller need not owe it apart.
        """
        ahead = self._ahead.pop(key, None)
        first = self._scheduled.get(key)
        if ahead is not None:
            previous: tuple[int, str] | None = ahead[0]  # marked with its page's other links
            if previous is None:
                # new: this spelling is fetched, whichever of the key's links was marked (another
                # page's link may reach its check first); the later spellings are its variants
                self._remember(key, url)
        elif first is not None:
            # scheduled in this run already (that stays true): what frontier_mark would answer
            self._scheduled.move_to_end(key)
            self.known_checks += 1
            previous = (self.run, first or key)
        else:
            previous = frontier_mark(self.store, key, self.run, url, owe)
            self._marked(key, url, previous, owe)
        reason, recorded = self._drop_reason(key, previous)
        if previous is not None and recorded is not None and recorded != previous[1]:
            # fetched under another spelling of the key than its first URL (see respelled)
            self._remember(key, recorded)
            previous = (previous[0], recorded)
        fetched = urldefrag(url if previous is None else previous[1])[0]
        # a #fragment never reaches the server: a link to another anchor of a page is that page,
        # not a variant of it (nor a duplicate)
        variants = [v for v in dict.fromkeys(urldefrag(u)[0] for u in (url, original or url)) if v != fetched]
        if variants:
            # counted with this process's next call to the store: a page's links' variants go in
            # one round trip (lost with the process only, and then its page is fetched again)
            now = self.clock()
            with self.store.batch(later=True) as batch:
                for variant in variants:
                    batch.count_variant(variant, key, now, reason or NORMALIZED)
        return reason

    def _marked(self, key: str, url: str, previous: tuple[int, str] | None, owe: OweOffer | None) -> None:
        self._remember(key, url if previous is None else previous[1])
        if previous is None:
            _keep(self._never_fetched, key)
            if owe is not None and owe.recordless:
                _keep(self._recordless, key)

    def knows(self, key: str) -> bool:
        """Whether :meth:`check` answers ``key`` without the store (scheduled in this run, or
        marked ahead: see :meth:`offered`)."""
        return key in self._scheduled

    def mark_ahead(self, entries: Iterable[tuple[str, str, OweOffer]]) -> None:
        """Mark the (URL, url key, offer) of ``entries`` and owe their requests where new, in one
        go (:meth:`DedupStore.frontier_mark_many`), ahead of their checks; each check then
        answers from that mark.  Only for requests nothing drops before their check: the caller
        sees them last on their way to the scheduler.  A key this frontier knows scheduled, or
        one repeated, is left to its check."""
        wanted: dict[str, tuple[str, OweOffer]] = {}
        for url, key, offer in entries:
            if key not in self._scheduled and key not in wanted:
                wanted[key] = (url, offer)
        if not wanted:
            return
        answers = self.store.frontier_mark_many(self.run, [(key, url, offer) for key, (url, offer) in wanted.items()])
        for (key, (url, offer)), previous in zip(wanted.items(), answers):
            self._marked(key, url, previous, offer)
            self._ahead[key] = (previous, offer)
            if len(self._ahead) > SCHEDULED_KEPT:
                self._ahead.popitem(last=False)  # its request never came: still owed, issued again

    def offered(self, key: str) -> OweOffer | None:
        """The offer ``key`` was marked ahead with, until its check."""
        ahead = self._ahead.get(key)
        return ahead[1] if ahead is not None else None

    def mark(self, url: str, key: str) -> None:
        """Mark ``key`` scheduled in this run without deciding anything."""
        if key in self._scheduled:
            return  # scheduled in this run already
        previous = frontier_mark(self.store, key, self.run, url)
        self._remember(key, url if previous is None else previous[1])

    def _remember(self, key: str, first: str) -> None:
        self._scheduled[key] = "" if first == key else first
        self._scheduled.move_to_end(key)
        if len(self._scheduled) > SCHEDULED_KEPT:
            self._scheduled.popitem(last=False)

    def _drop_reason(self, key: str, previous: tuple[int, str] | None) -> tuple[str | None, str | None]:
        """Why to drop ``key`` (None: fetch it), and the URL its record was fetched under when
        that was read (None: not read)."""
        if previous is None:
            return None, None
        if previous[0] == self.run:
            return DROP_SEEN, None
        if has_pending(self.store, key):
            # owed by an earlier run (or a process of it), its outcome never recorded: the crawl
            # issues that request again itself, past the dupefilter (PendingRequests.resume), so
            # this copy would fetch the page a second time
            return DROP_SEEN, None
        record = get_url(self.store, key)
        # the URL fetched for the key, which is not its first URL after a redirect that only
        # spelled it otherwise (see respelled)
        return self._fetched_before(record), record.url if record is not None else None

    def respelled(self, key: str, url: str, sources: Iterable[str]) -> None:
        """``key``'s request was redirected from ``sources`` to ``url``, another spelling of the
        same key (a directory's URL with its slash): ``url`` is what is fetched for it, so the
        links to it met later in this run are no variants, nor one a link met before the
        redirect counted; the spellings it was redirected from are, as they would be had a link
        to ``url`` come first (the export does not depend on the order)."""
        self._remember(key, url)
        now = self.clock()
        with self.store.batch(later=True) as batch:
            batch.delete(VARIANT, url)
            batch.remove_from_set(ALIASES, key, url)
            for source in dict.fromkeys(urldefrag(s)[0] for s in sources):
                if source != url:
                    batch.count_variant(source, key, now, NORMALIZED)

    def _fetched_before(self, record: UrlRecord | None) -> str | None:
        """Why to drop the key of ``record``, scheduled in an earlier run, or None to fetch it again."""
        started = self.job_started
        if record is not None and record.fetched_at is not None and started is not None and record.fetched_at >= started:
            # fetched since this job began, by the interrupted run this one resumes, and not
            # owed: its outcome is recorded, its links are owed or known. A hub or a page that
            # links is fetched again by a new job, not by the rest of the one that fetched it
            return DROP_SEEN
        if record is None or record.fetched_at is None or record.kind == "hub" or record.links:
            # hubs, and documents that link, are always fetched again: that is where new links
            # appear, and where the crawl finds its way to the pages below them
            return None
        if record.http_status is not None and record.http_status >= 400:
            # an error is no page: a server error is no answer, and a page gone (404, 410) or
            # refused (403, 429) may come back
            return None
        if self.revisit_due(record):
            return None
        return DROP_ALIAS if record.status == "redirect" else DROP_FRESH

    def abandoned(self, key: str) -> bool:
        """``key`` is marked scheduled but nobody owes it and nothing was recorded for it: what a
        process that died between marking and owing a request leaves (another process of the
        run may take its requests over)."""
        return get_url(self.store, key) is None and not has_pending(self.store, key)

    def revisit_due(self, record: UrlRecord) -> bool:
        if self.revisit_after is None or record.fetched_at is None:
            return False
        return self.clock() - record.fetched_at >= self.revisit_after

    def conditional_headers(self, key: str) -> dict[str, str]:
        """Validators for a conditional GET of a document fetched in an earlier run."""
        if self._never_fetched.pop(key, 0) is None:
            return {}  # its first request since this frontier found it never scheduled
        record = get_url(self.store, key)
        if record is None or record.kind != "document" or record.fetch_count == 0 or record.links:
            # a page that links is asked for in full: a 304 carries no links, and its links lead
            # the crawl to the pages below it (an HTTP cache that keeps the body validates it)
            return {}
        headers = {}
        if record.etag:
            headers["If-None-Match"] = record.etag
        if record.last_modified:
            headers["If-Modified-Since"] = record.last_modified
        return headers

    def record_redirect(self, sources: Iterable[tuple[str, str]], target_key: str, statuses: Iterable) -> int:
        """Record each (url, key) in ``sources`` as an alias of ``target_key``.

        Returns how many sources became redirects (a hop already recorded, or a
        source re-pointed to the end of a longer chain, is not counted again).
        """
        now = self.clock()
        status_list = list(statuses)
        touched: dict[str, UrlRecord] = {}
        count = 0
        with self.store.batch() as batch:
            for i, (url, key) in enumerate(sources):
                if key == target_key or key in touched:
                    continue
                record = get_url(self.store, key) or UrlRecord(
                    key=key, url=url, first_seen=now, first_run=self.first_run
                )
                touched[key] = record
                if record.status == "redirect" and record.duplicate_of == target_key:
                    continue
                code = status_list[i] if i < len(status_list) else None
                if record.status != "redirect":
                    count += 1
                    # an HTTP redirect's response never reaches record_fetch; a meta refresh's
                    # (Scrapy gives its reason as "meta refresh", not a status) was counted there
                    record.fetch_count += not isinstance(code, str)
                elif record.duplicate_of is not None:
                    batch.remove_from_set(ALIASES, record.duplicate_of, record.url)
                record.status, record.reason, record.duplicate_of = "redirect", "redirect", target_key
                record.kind, record.links = "redirect", False
                record.http_status = code if isinstance(code, int) else record.http_status
                record.fetched_at = record.last_seen = now
                batch.put_url(record)
                put_alias(batch, target_key, record.url, "redirect")
        return count

    def record_fetch(
        self,
        url: str,
        key: str,
        http_status: int,
        etag: str | None,
        last_modified: str | None,
    ) -> UrlRecord:
        """Record a response; returns the updated record."""
        now = self.clock()
        # a key the store found never scheduled and without a record when this frontier marked
        # it: nothing to read (a record another process wrote since is kept: if_absent)
        fresh = self._recordless.pop(key, 0) is None
        record = None if fresh else get_url(self.store, key)
        record = record or UrlRecord(key=key, url=url, first_seen=now, first_run=self.first_run)
        record.http_status = http_status
        if http_status != 304:
            record.etag, record.last_modified = etag, last_modified
        if http_status >= 300 and http_status != 304:
            # a redirect or an error carries none of the page's links: it links no more
            record.links = False
        record.fetched_at = record.last_seen = now
        record.fetch_count += 1
        if record.status == "seen":
            record.status = "fetched"
        # lost only with the process, and then its request is still owed: fetched again
        with self.store.batch(later=True) as batch:
            batch.put_url(record, if_absent=fresh)
        return record

    def mark_without_document(self, url: str, key: str, kind: str) -> None:
        """A fetched response that produced no item.

        ``hub`` (an HTML page: fetched again on every run, where new links
        appear) or ``asset`` (an image or other file: fresh like a document).
        """
        record = get_url(self.store, key)
        if record is None or record.kind == kind or record.has_content:
            return
        record.kind, record.status = kind, kind
        with self.store.batch() as batch:
            batch.put_url(record)

    def mark_links(self, key: str, links: bool) -> None:
        """A fetched page that produced an item did (``links``) or did not yield requests:
        recorded when that changed, as a page that links is fetched again on every run.

        The caller knows the flag its fetch record had (``record_fetch``) and calls this only
        when the page changed it: the record is read again here, as the pipeline may have
        written it since."""
        record = get_url(self.store, key)
        if record is None or record.links == links:
            return
        record.links = links
        with self.store.batch() as batch:
            batch.put_url(record)


def _keep(recent: OrderedDict[str, None], key: str) -> None:
    """Add ``key`` to a bounded set of the most recent keys."""
    recent[key] = None
    if len(recent) > SCHEDULED_KEPT:
        recent.popitem(last=False)
