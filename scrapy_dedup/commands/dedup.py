"""The ``scrapy dedup`` command (registered through the ``scrapy.commands`` entry point)."""

from __future__ import annotations

import argparse
import sys

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from scrapy_dedup.store.base import StoreError

SUBCOMMANDS = {
    "summary": "counts by kind and the duplicate rate per host",
}


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "<subcommand> [options]"

    def short_desc(self) -> str:
        return "Inspect the dedup store: aliases, provenance, clusters, reports"

    def long_desc(self) -> str:
        lines = ["Inspect the dedup store of a crawl. Subcommands:", ""]
        lines += [f"  {name:<12} {desc}" for name, desc in SUBCOMMANDS.items()]
        return "\n".join(lines)

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("subcommand", nargs="?", choices=sorted(SUBCOMMANDS), help="what to show")
        parser.add_argument("--store", metavar="PATH", help="the store directory (outside a project)")
        parser.add_argument("--spider", metavar="NAME", help="the spider whose store to read (inside a project)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not opts.subcommand:
            raise UsageError("a subcommand is required: " + ", ".join(SUBCOMMANDS))
        from scrapy_dedup.reports.store import open_report_store

        try:
            store = open_report_store(self.settings, opts.store, opts.spider)
        except StoreError as exc:
            print(f"scrapy dedup: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        with store:
            from scrapy_dedup.reports import summary

            summary.render(store, sys.stdout)
