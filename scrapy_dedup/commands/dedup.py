"""The ``scrapy dedup`` command (registered through the ``scrapy.commands`` entry point).

It parses the arguments, opens the store and hands over to one module of
:mod:`scrapy_dedup.reports` per subcommand.  Exit status: 0 on success, 2 on
a usage error (Scrapy's own handling of UsageError), 1 when the store cannot
be read, each with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext, redirect_stdout
from typing import Any

from scrapy.commands import ScrapyCommand, ScrapyHelpFormatter
from scrapy.exceptions import NotConfigured, UsageError
from scrapy.settings import Settings

from scrapy_dedup.core.records import ALIAS_REASONS
from scrapy_dedup.store.base import PENDING, DedupStore, StoreError, StoreLocked, StoreWriteError
from scrapy_dedup.store.records import get_meta

SUBCOMMANDS = {
    "summary": "counts by kind and the duplicate rate per host",
    "aliases": "every URL that is not its document's canonical, and why",
    "provenance": "every URL the store knows, with all it knows about it",
    "lookup": "what the store knows about one URL (lookup URL)",
    "clusters": "documents with several URLs: members, representative, distances",
    "calibrate": "stored pairs around the near-duplicate threshold, to choose it",
    "report": "one self-contained HTML page (report --html FILE)",
    "check": "verify the store's invariants (exit 1 when one is broken)",
    "repair": "salvage a damaged store and rebuild its indexes from the URL records",
    "migrate": "bring a store written by an earlier version to this version's format, in place",
    "export": "the settled corpus as JSON Lines: one record per document (or per unique chunk, --chunks)",
    "chunks": "chunks repeated, in other documents or within one: the first source and every copy (crawled with DEDUP_CHUNKS)",
    "boilerplate": "lines learned as boilerplate per host, with their page counts and an example URL",
    "ingest": "decide the pages of a JSON Lines file (ingest FILE.jsonl) into the store, without crawling",
    "settle": "settle the clusters (a crawl and an ingest settle their own store; a shared one needs this)",
}

#: options that belong to some subcommands only (dest -> subcommands)
SCOPED = {
    "host": ("aliases", "provenance", "boilerplate"),
    "reason": ("aliases",),
    "min_size": ("clusters",),
    "top": ("clusters", "report"),
    "sample": ("calibrate", "report"),
    "fetch_text": ("calibrate", "report"),
    "html": ("report",),
    "url": ("lookup", "ingest"),
    "chunks": ("export",),
    "output": ("export",),
    "changes_since": ("export",),
    "full": ("settle",),
    "url_field": ("ingest",),
    "text_field": ("ingest",),
    "html_field": ("ingest",),
}


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _reason(exc: BaseException) -> str:
    """One line that says what went wrong (LevelDB's messages come as bytes)."""
    detail = exc.args[0] if len(exc.args) == 1 else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return " ".join(f"{type(exc).__name__}: {detail}".split())


class HelpFormatter(ScrapyHelpFormatter):
    """Scrapy's help layout, with every option's help as written.

    Scrapy's formatter makes a title-cased, underlined heading of every part of the help that
    ends in ":" (``format_part_strings``), and argparse joins an option's help lines through the
    same ``_join_parts``: a help line that wrapping ends in "default:" became a heading. Here
    only the sections' parts go through Scrapy's headings."""

    _in_action = False

    def _format_action(self, action: argparse.Action) -> str:
        outer, self._in_action = self._in_action, True
        try:
            return super()._format_action(action)
        finally:
            self._in_action = outer

    def _join_parts(self, part_strings: Any) -> str:
        if self._in_action:
            return argparse.HelpFormatter._join_parts(self, part_strings)
        return super()._join_parts(part_strings)


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}
    #: set by Scrapy's command line before the command runs
    settings: Settings

    def syntax(self) -> str:
        return "<subcommand> [URL] [options]"

    def short_desc(self) -> str:
        return "Inspect the dedup store: aliases, provenance, clusters, reports"

    def long_desc(self) -> str:
        # argparse rewraps this text: one sentence per subcommand reads well either way
        names = "; ".join(f"{name}: {desc}" for name, desc in SUBCOMMANDS.items())
        return (
            f"Inspect the dedup store of a crawl. Subcommands: {names}. Inside a Scrapy project the store "
            "comes from the settings and --spider NAME; outside one, from --store PATH."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.formatter_class = HelpFormatter
        super().add_options(parser)
        parser.add_argument("subcommand", nargs="?", choices=list(SUBCOMMANDS), help="what to show")
        parser.add_argument("url", nargs="?", help="lookup: the URL to look up; ingest: the JSON Lines file")
        where = parser.add_argument_group("Store")
        where.add_argument("--store", metavar="PATH", help="the store directory, or a redis:// URL (outside a project)")
        where.add_argument("--spider", metavar="NAME", help="the spider whose store to read (inside a project)")
        where.add_argument(
            "--redis-prefix",
            metavar="PREFIX",
            help="a redis:// store: the crawl's key prefix (default: DEDUP_REDIS_PREFIX, or dedup:<spider name>)",
        )
        where.add_argument(
            "--no-snapshot",
            dest="snapshot",
            action="store_false",
            help="fail instead of reading a copy when a running crawl holds the store",
        )
        out = parser.add_argument_group("Output")
        out.add_argument(
            "--format", choices=("table", "jsonl", "csv"), default="table", help="output format (default: table)"
        )
        sub = parser.add_argument_group("Subcommand options")
        sub.add_argument("--host", help="aliases, provenance, boilerplate: only URLs of this host (host or host:port)")
        sub.add_argument(
            "--reason",
            action="append",
            choices=ALIAS_REASONS,
            help="aliases: only this reason (repeatable)",
        )
        sub.add_argument("--min-size", type=_positive, metavar="N", help="clusters: at least N URLs (default 2)")
        sub.add_argument("--top", type=_positive, metavar="N", help="clusters, report: only the N largest clusters")
        sub.add_argument("--sample", type=_positive, metavar="N", help="calibrate, report: pairs per distance")
        sub.add_argument(
            "--fetch-text",
            action="store_true",
            default=None,
            help="calibrate, report: fetch again the pages whose text the store did not keep, to diff them",
        )
        sub.add_argument("--html", metavar="FILE", help="report: the HTML file to write")
        sub.add_argument("--chunks", action="store_true", default=None, help="export: one record per unique chunk")
        sub.add_argument("-o", "--output", metavar="FILE", help="export: write to FILE instead of stdout (-: stdout)")
        sub.add_argument(
            "--changes-since",
            metavar="TOKEN",
            help="export: only the documents changed since the export that printed TOKEN, as upsert and "
            "delete lines by document_id (every export prints its token on stderr)",
        )
        sub.add_argument(
            "--full",
            action="store_true",
            default=None,
            help="settle: every cluster again, not only those decided since the last settle",
        )
        sub.add_argument("--url-field", metavar="NAME", help="ingest: the field holding the URL (default url)")
        sub.add_argument("--text-field", metavar="NAME", help="ingest: the field holding the text (default text)")
        sub.add_argument("--html-field", metavar="NAME", help="ingest: the field holding HTML (default html)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        self._check(args, opts)
        if opts.subcommand in ("repair", "migrate"):
            return self._rewrite(opts)
        if opts.subcommand == "ingest":
            return self._ingest(opts)
        # "_check" is taken by the argument check
        name = "check_store" if opts.subcommand == "check" else opts.subcommand
        handler: Callable[[DedupStore, argparse.Namespace], None] = getattr(self, f"_{name}")
        from scrapy_dedup.reports.formats import ControlFree
        from scrapy_dedup.reports.store import opened_store

        # a table goes to a terminal: what a crawled page carries must not drive it
        safe = redirect_stdout(ControlFree(sys.stdout)) if opts.format == "table" else nullcontext()
        # settling writes the store: never a snapshot of it
        snapshot = opts.snapshot and opts.subcommand != "settle"
        try:
            with safe, opened_store(
                self.settings, opts.store, opts.spider, snapshot=snapshot, prefix=opts.redis_prefix
            ) as store:
                handler(store, opts)
                sys.stdout.flush()
        except UsageError:
            raise
        except StoreError as exc:
            damaged = opts.subcommand == "check" and not isinstance(exc, StoreWriteError)
            self._fail(" ".join(str(exc).split()) + self._repair_hint(opts, damaged))
        except BrokenPipeError:
            # the reader went away (`| head`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except KeyboardInterrupt:
            self._fail("interrupted", code=130)
        except Exception as exc:  # noqa: BLE001 - a store that cannot be read is a one-line error
            if opts.pdb:
                raise
            hint = self._repair_hint(opts, opts.subcommand == "check")
            self._fail(f"cannot read the store: {_reason(exc)}{hint}")

    def _repair_hint(self, opts: argparse.Namespace, damaged: bool) -> str:
        """The advice after a store that cannot be read: repair, where it applies (LevelDB)."""
        if not damaged or self._on_redis(opts):
            return ""
        return "; `scrapy dedup repair` salvages a damaged store"

    def _on_redis(self, opts: argparse.Namespace) -> bool:
        from scrapy_dedup.reports.store import store_path
        from scrapy_dedup.store import is_redis_url

        try:
            return is_redis_url(store_path(self.settings, opts.store, opts.spider))
        except Exception:  # noqa: BLE001 - no store named: not a Redis one
            return False

    def _fail(self, reason: str, code: int = 1) -> None:
        print(f"scrapy dedup: {reason}", file=sys.stderr)
        self.exitcode = code

    def _check(self, args: list[str], opts: argparse.Namespace) -> None:
        if args and opts.subcommand in SCOPED["url"] and opts.url is None and len(args) == 1:
            # argparse leaves a positional that follows options unparsed: `lookup --spider s URL`,
            # `ingest --store PATH FILE`
            opts.url = args.pop()
        if args:
            raise UsageError(f"unrecognized arguments: {' '.join(args)}")
        if not opts.subcommand:
            raise UsageError("a subcommand is required: " + ", ".join(SUBCOMMANDS))
        for dest, allowed in SCOPED.items():
            if getattr(opts, dest) is not None and opts.subcommand not in allowed:
                option = "URL" if dest == "url" else "--" + dest.replace("_", "-")
                raise UsageError(f"{option} does not apply to {opts.subcommand} (only to {', '.join(allowed)})")
        if not (opts.store or opts.spider or self.settings.get("DEDUP_STORE")):
            opts.spider = self._only_spider()
        elif not (opts.spider or opts.redis_prefix or self.settings.get("DEDUP_REDIS_PREFIX")) and self._on_redis(opts):
            from scrapy_dedup.reports.store import project_spiders

            # a Redis crawl's keys are under dedup:<spider name>: the project's only spider names them
            names = project_spiders(self.settings)
            opts.spider = names[0] if len(names) == 1 else None
        if opts.subcommand == "ingest" and not opts.url:
            raise UsageError("ingest needs a file: scrapy dedup ingest FILE.jsonl")
        if opts.subcommand == "lookup" and not opts.url:
            raise UsageError("lookup needs a URL: scrapy dedup lookup URL")
        if opts.subcommand == "report" and not opts.html:
            raise UsageError("report needs --html FILE")
        if opts.subcommand == "export" and opts.format == "csv":
            raise UsageError("export writes JSON Lines (--format jsonl)")
        if opts.subcommand == "report" and opts.format != "table":
            raise UsageError("report writes HTML only (--html FILE); --format does not apply")

    def _only_spider(self) -> str:
        """The spider whose store a command reads when none is named: the project's only one."""
        from scrapy_dedup.reports.store import project_spiders

        names = project_spiders(self.settings)
        if len(names) == 1:
            return names[0]
        listed = f" (this project's spiders: {', '.join(names)})" if names else ""
        raise UsageError(
            f"say which store to read: --store PATH, or --spider NAME inside a Scrapy project{listed}, "
            "or -s DEDUP_STORE=PATH"
        )

    # -- settings the reports need ------------------------------------------
    def _config(self, opts: argparse.Namespace) -> Any:
        from scrapy_dedup.crawl.settings import DedupConfig
        from scrapy_dedup.reports.store import spider_settings

        settings = spider_settings(self.settings, opts.spider) if opts.spider else self.settings
        settings = settings.copy()
        settings.set("DEDUP_ENABLED", True, priority="cmdline")
        try:
            return DedupConfig.from_settings(settings)
        except (ValueError, NotConfigured) as exc:
            raise UsageError(str(exc)) from None

    def _texts(self, store: DedupStore, opts: argparse.Namespace) -> Any:
        from scrapy_dedup.reports.texts import Texts

        return Texts(store, fetch=bool(opts.fetch_text), user_agent=self.settings.get("USER_AGENT"))

    # -- subcommands --------------------------------------------------------
    def _summary(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import summary

        summary.render(summary.collect(store), opts.format, sys.stdout)

    def _aliases(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import aliases
        from scrapy_dedup.reports.formats import write_rows

        rows = iter(aliases.rows(store, host=opts.host, reasons=opts.reason or ()))
        if opts.format == "table":
            first = next(rows, None)
            if first is None:
                # said, not an empty table (as `clusters` says it has none), with the filters asked for
                asked = [f"--host {opts.host}"] if opts.host else []
                asked += [f"--reason {reason}" for reason in opts.reason or ()]
                none = "no URL of the store is a variant, a redirect or a copy of another"
                print(f"no alias for {' '.join(asked)}" if asked else f"no alias: {none}")
                return
            rows = itertools.chain([first], rows)
        write_rows(rows, aliases.FIELDS, opts.format, sys.stdout, shrink=aliases.SHRINK, optional=aliases.OPTIONAL)

    def _provenance(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import provenance
        from scrapy_dedup.reports.formats import write_rows

        rows = provenance.rows(store, host=opts.host)
        write_rows(
            rows,
            provenance.FIELDS,
            opts.format,
            sys.stdout,
            table_fields=provenance.TABLE_FIELDS,
            shrink=provenance.SHRINK,
            optional=provenance.OPTIONAL,
        )

    def _lookup(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.core.urls import InvalidURL, UrlRules
        from scrapy_dedup.reports import lookup

        # key the URL with the rules the crawl used, when the store recorded them
        rules = UrlRules.from_json(get_meta(store, "url_rules"), default=self._config(opts).url_rules)

        def normalize(url: str) -> str:
            try:
                normalized = rules.normalize(url.strip(), strict=True)
            except InvalidURL as exc:
                raise UsageError(f"not a valid URL: {exc}") from None
            if "://" not in normalized:
                raise UsageError(f"not an absolute http(s) URL: {url!r}")
            return normalized

        answer = lookup.lookup(store, opts.url, normalize, rules.key)
        lookup.render(answer, opts.format, sys.stdout)

    def _clusters(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import clusters

        min_size = opts.min_size or 2
        rows = clusters.rows(store, min_size=min_size, top=opts.top, authority=self._config(opts).authority)
        clusters.render(rows, opts.format, sys.stdout, min_size)

    def _calibrate(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import calibrate

        cal = calibrate.sample(
            store,
            per_distance=opts.sample or 5,
            min_tokens=self._config(opts).min_tokens,
            texts=self._texts(store, opts),
        )
        calibrate.render(cal, opts.format, sys.stdout)

    def _report(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import html

        config = self._config(opts)
        page = html.build(
            store,
            texts=self._texts(store, opts),
            top=opts.top or 10,
            per_distance=opts.sample or 3,
            min_tokens=config.min_tokens,
            authority=config.authority,
        )
        try:
            with open(opts.html, "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as exc:
            raise StoreError(f"cannot write {opts.html}: {exc.strerror or exc}") from None
        print(f"wrote {opts.html} ({len(page.encode('utf-8')):,} bytes)", file=sys.stderr)

    def _check_store(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.store import maintenance

        writing = store.writing_elsewhere()
        if writing:
            # read in place while they write, a cluster and its members may disagree for a moment
            raise StoreLocked(f"{writing} crawl process(es) write this store now: check it once they are done")
        result = maintenance.check_store(store)
        for line in maintenance.describe(result):
            print(line)
        if not result.consistent:
            self.exitcode = 1

    def _rewrite(self, opts: argparse.Namespace) -> None:
        """repair and migrate: they open the store themselves, for writing."""
        from scrapy_dedup.crawl.state import store_params
        from scrapy_dedup.reports.store import store_path
        from scrapy_dedup.store import maintenance
        from scrapy_dedup.store.leveldb import migrate, repair

        config = self._config(opts)
        kwargs = {"min_tokens": config.min_tokens, "authority": tuple(config.authority)}
        if self._on_redis(opts):
            return self._fail(maintenance.NOT_REPAIRABLE if opts.subcommand == "repair" else maintenance.NOT_MIGRATABLE)
        try:
            path = store_path(self.settings, opts.store, opts.spider)
            if opts.subcommand == "migrate":
                print(migrate.migrate_store(path, **kwargs))
                return
            result = repair.repair_store(path, params=store_params(config), **kwargs)
        except StoreError as exc:
            return self._fail(" ".join(str(exc).split()))
        except Exception as exc:  # noqa: BLE001 - one line, as for every subcommand
            return self._fail(f"cannot {opts.subcommand} the store: {_reason(exc)}")
        print(
            f"repaired {path}: {result.records:,} URL records kept, {result.clusters:,} clusters rebuilt "
            f"({result.lost_clusters:,} of them from their members alone); run `scrapy dedup check` to confirm"
        )
        if result.params_lost:
            print("the store's parameters were lost: written again from the current settings")
    def _export(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.decide import changes
        from scrapy_dedup.reports import export
        from scrapy_dedup.reports.store import held_by_a_crawl

        # a crawl settles its store as it closes: until then, settling is its to do (a shared
        # store: the last of the processes that write it)
        held = held_by_a_crawl(store) is not None or store.writing_elsewhere() > 0
        if held:
            unsettled = "a running crawl holds the store and has not settled it yet: export again when the crawl ends"
        elif store.count(PENDING):
            unsettled = ("the last crawl stopped before its end and did not settle the store: run it again to finish "
                         "(it settles as it ends), or `scrapy dedup settle` what it has")
        else:
            unsettled = "the store has decisions not settled yet (`scrapy dedup settle`)"
        if opts.changes_since is not None and held and changes.token(store) is None:
            raise changes.ChangeTokenError(f"no changes to give: {unsettled}")
        # a token the store cannot answer fails before the output is opened
        since = changes.since(store, opts.changes_since) if opts.changes_since is not None else None
        token = changes.token(store) if since is None else since.token
        # "-" is stdout, as in `scrapy crawl -o -`
        to_file = opts.output not in (None, "", "-")
        try:
            out = open(opts.output, "w", encoding="utf-8") if to_file else sys.stdout
        except OSError as exc:
            raise StoreError(f"cannot write {opts.output}: {exc.strerror or exc}") from None
        try:
            if since is not None:
                export.write_changes(store, out, since, chunks=bool(opts.chunks))
            else:
                counts = export.write(store, out, chunks=bool(opts.chunks))
        finally:
            if out is not sys.stdout:
                out.close()
        where = f" to {opts.output}" if to_file else ""
        if since is not None:
            print(
                f"exported the changes since {opts.changes_since}{where}: {len(since.upserts)} document(s) to "
                f"upsert, {len(since.deletes)} to delete",
                file=sys.stderr,
            )
        else:
            what = f"{counts.chunks} unique chunks of {counts.documents} documents" if opts.chunks else f"{counts.documents} documents"
            print(f"exported {what}{where}", file=sys.stderr)
            if counts.note():
                print(f"scrapy dedup: {counts.note()}", file=sys.stderr)
        # a store written meanwhile (a crawl on a shared store) gives no token: it may be partial
        if token is not None and changes.token(store) == token:
            print(f"change token: {token} (scrapy dedup export --changes-since {token})", file=sys.stderr)
        else:
            print(f"scrapy dedup: no change token: {unsettled}", file=sys.stderr)

    def _settle(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.decide.settle import settle_store

        writing = store.writing_elsewhere()
        if writing:
            # as a LevelDB store a crawl holds is refused: the last crawl process to close settles
            raise StoreLocked(
                f"{writing} crawl process(es) write this store now: settle it once they are done"
            )
        done = settle_store(store, self._config(opts), incremental=not opts.full)
        print(f"settled {done.clusters}")
        self._print_chunks(done)

    def _chunks(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import chunks
        from scrapy_dedup.reports.formats import write_rows

        if not chunks.has_chunks(store):
            raise StoreError("the store keeps no chunks: crawl with DEDUP_CHUNKS = True")
        self._warn_unsettled(store)
        write_rows(
            chunks.shared_chunks(store),
            chunks.CHUNK_FIELDS,
            opts.format,
            sys.stdout,
            table_fields=chunks.CHUNK_TABLE_FIELDS,
            shrink=("first_source", "text"),
        )

    def _boilerplate(self, store: DedupStore, opts: argparse.Namespace) -> None:
        from scrapy_dedup.reports import chunks
        from scrapy_dedup.reports.formats import write_rows

        if not chunks.has_chunks(store):
            raise StoreError(
                "the store keeps no chunks, and boilerplate lines are learned from them: crawl with DEDUP_CHUNKS = True"
            )
        self._warn_unsettled(store)
        rows = chunks.learned_boilerplate(store, opts.host)
        if not rows:
            where = f" of {opts.host}" if opts.host else ""
            none = (f"no line is boilerplate{where}: none is on at least the larger of DEDUP_BOILERPLATE_MIN_PAGES "
                    "pages and DEDUP_BOILERPLATE_SHARE of its group's pages")
            if opts.format == "table":
                print(none)  # said, not an empty table
                return
            print(f"scrapy dedup: {none}", file=sys.stderr)
        write_rows(
            rows,
            chunks.BOILERPLATE_FIELDS,
            opts.format,
            sys.stdout,
            table_fields=chunks.BOILERPLATE_TABLE_FIELDS,
            shrink=("example_url", "text"),
        )

    @staticmethod
    def _warn_unsettled(store: DedupStore) -> None:
        from scrapy_dedup.decide.chunk_layer import OWED

        if get_meta(store, OWED):
            print("scrapy dedup: the last crawl stopped before it settled the chunk statuses; these are the "
                  "statuses known when each page was decided (the next crawl settles them)", file=sys.stderr)

    def _ingest(self, opts: argparse.Namespace) -> None:
        from scrapy_dedup.crawl.state import open_store
        from scrapy_dedup.decide import ingest
        from scrapy_dedup.decide.settle import settle_store

        if opts.store:
            self.settings.set("DEDUP_STORE", opts.store, priority="cmdline")
        if opts.redis_prefix:
            self.settings.set("DEDUP_REDIS_PREFIX", opts.redis_prefix, priority="cmdline")
        config = self._config(opts)
        done = None
        if not config.store:
            raise UsageError("ingest writes to a store: --store PATH or -s DEDUP_STORE=PATH")
        fields = ingest.Fields(opts.url_field or "url", opts.text_field or "text", opts.html_field or "html")
        try:
            source = open(opts.url, encoding="utf-8", errors="replace")
        except OSError as exc:
            return self._fail(f"cannot read {opts.url}: {exc.strerror or exc}")
        try:
            with source, open_store(config, None) as store:
                index = ingest.ContentIndex(
                    store,
                    store.run,
                    max_distance=config.max_distance,
                    min_jaccard=config.min_jaccard,
                    min_tokens=config.min_tokens,
                    authority=config.authority,
                    extraction=config.extract_options.extraction(),
                )
                options = config.extract_options
                counts = ingest.ingest(
                    source,
                    index,
                    config.url_rules.key,
                    fields=fields,
                    options=options,
                    keep_text=config.keep_text,
                    workers=config.workers,
                    progress=sys.stderr,
                    max_body_bytes=config.max_body_bytes,
                )
                # an ingest ends as a crawl does: settled, unless other processes write the
                # store (the last one to close settles); its documents came without chunks
                elsewhere = store.writing_elsewhere()
                if not elsewhere:
                    done = settle_store(store, config, moved=True)
                else:
                    print(f"not settled: {elsewhere} other crawl process(es) write this store; the last one "
                          "to close settles it", file=sys.stderr)
        except StoreError as exc:
            return self._fail(" ".join(str(exc).split()))
        for number, why in counts.malformed:
            print(f"{opts.url}:{number}: skipped: {why}", file=sys.stderr)
        for number, size in counts.cut:
            print(f"{opts.url}:{number}: its html of {size:,} bytes is cut at DEDUP_MAX_BODY_BYTES = "
                  f"{config.max_body_bytes:,}: its text ends there", file=sys.stderr)
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(counts.statuses.items()))
        print(
            f"ingested {counts.documents} records of {counts.lines} lines into {config.store}"
            f" ({statuses or 'nothing decided'}); {len(counts.malformed)} malformed line(s) skipped",
            file=sys.stderr,
        )
        if done is not None and done.clusters is not None:
            print(f"settled: {done.clusters}", file=sys.stderr)
        if done is not None:
            self._print_chunks(done)

    @staticmethod
    def _print_chunks(done: Any) -> None:
        if done.chunks is not None:
            print(
                f"chunked {done.chunks.documents} documents into {done.chunks.chunks} chunks; "
                f"{done.chunks.boilerplate} boilerplate line(s) learned in {done.chunks.groups} group(s)",
                file=sys.stderr,
            )

