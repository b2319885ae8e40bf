"""``make demo``: serve the demo site and crawl it with scrapy-dedup, then summarise.

    .venv/bin/python example_project/run_demo.py [--verbose] [--no-dedup] [--variant v2]

Run it twice: the second run is incremental (it skips fresh URLs and unchanged pages).
``--no-dedup`` runs plain Scrapy (ADDONS={}) for comparison. ``--variant v2`` serves
the re-crawl variant of the site (one page changed, one 404, one 410); add
``-s DEDUP_REVISIT_AFTER=0`` to revisit pages that are still fresh.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

EXAMPLE_PROJECT = Path(__file__).resolve().parent
REPO = EXAMPLE_PROJECT.parent
sys.path.insert(0, str(EXAMPLE_PROJECT))

from demo_server import DEFAULT_PORT, VARIANTS, DemoServer  # noqa: E402

URL_DROPPED = "dedup/url/dropped/"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--verbose", action="store_true", help="Scrapy log at INFO instead of WARNING")
    parser.add_argument("--no-dedup", action="store_true", help="plain Scrapy: disable the scrapy-dedup add-on")
    parser.add_argument("--variant", choices=VARIANTS, default="v1", help="site variant to serve (v2 = re-crawl changes)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"server port (default {DEFAULT_PORT}; keep it stable so re-runs are incremental; 0 = any)")
    parser.add_argument("--items", type=Path, default=EXAMPLE_PROJECT / ".scrapy" / "demo-items.jsonl",
                        help="where to write the items (JSON lines, overwritten)")
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting, as with `scrapy crawl -s` (e.g. -s DEDUP_REVISIT_AFTER=0)")
    return parser.parse_args(argv)


def start_server(port: int, variant: str) -> DemoServer:
    try:
        return DemoServer(port=port, variant=variant).start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or port == 0:
            raise
        print(f"warning: port {port} is busy, using a free port; URLs differ from earlier runs, "
              "so this run cannot be incremental.", file=sys.stderr)
        return DemoServer(port=0, variant=variant).start()


def crawl(args: argparse.Namespace, server: DemoServer):
    """Run the crawl in this process; return (crawler or None, error message or None)."""
    os.chdir(EXAMPLE_PROJECT)  # the project's scrapy.cfg and .scrapy/ data directory
    os.environ["SCRAPY_SETTINGS_MODULE"] = "demo_project.settings"
    from scrapy.crawler import CrawlerProcess
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    settings.set("LOG_LEVEL", "INFO" if args.verbose else "WARNING", priority="cmdline")
    settings.set("DEDUP_HOST_RULES", server.manifest["host_rules"], priority="cmdline")
    settings.set("FEEDS", {str(args.items): {"format": "jsonlines", "overwrite": True}}, priority="cmdline")
    if args.no_dedup:
        settings.set("ADDONS", {}, priority="cmdline")
    for pair in args.set:
        name, _, value = pair.partition("=")
        settings.set(name.strip(), value, priority="cmdline")
    failures = []
    try:
        process = CrawlerProcess(settings)
        crawler = process.create_crawler("site")
        deferred = process.crawl(crawler, start_url=server.url + "/")
        deferred.addErrback(failures.append)
        process.start()
    except Exception as exc:  # noqa: BLE001 - report any start-up failure clearly
        return None, f"{type(exc).__name__}: {exc}"
    if failures:
        return crawler, failures[0].getErrorMessage() or repr(failures[0].value)
    stats = crawler.stats.get_stats()
    if stats.get("finish_reason") != "finished":
        return crawler, f"the crawl stopped early (finish_reason={stats.get('finish_reason')!r})"
    if stats.get("log_count/ERROR"):
        return crawler, f"the crawl logged {stats['log_count/ERROR']} error(s)"
    if not stats.get("downloader/response_count"):
        return crawler, "no page was fetched"
    return crawler, None


def rel(path: Path | str) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def summary(args: argparse.Namespace, server: DemoServer, crawler) -> str:
    stats = crawler.stats.get_stats()
    get = lambda key: stats.get(key, 0)  # noqa: E731
    items = sum(1 for line in args.items.read_text("utf-8").splitlines() if line.strip()) if args.items.exists() else 0
    lines = [f"Crawled {server.url}/ (site variant {args.variant})",
             f"  pages fetched                      {get('downloader/response_count'):5}"]
    if args.no_dedup:
        lines += [f"  repeats dropped by Scrapy itself   {get('dupefilter/filtered'):5}  (request fingerprints)",
                  f"  items written                      {items:5}",
                  "scrapy-dedup was disabled (--no-dedup): every URL variant and copy above was fetched and kept.",
                  f"Items: {rel(args.items)}"]
        return "\n".join(lines)
    dropped = {key[len(URL_DROPPED):]: value for key, value in stats.items() if key.startswith(URL_DROPPED)}
    by_reason = ", ".join(f"{reason} {n}" for reason, n in sorted(dropped.items(), key=lambda kv: -kv[1]))
    kept = get("dedup/doc/new") + get("dedup/doc/updated")
    lines += [
        f"  URL repeats dropped before fetch   {sum(dropped.values()):5}" + (f"  ({by_reason})" if by_reason else ""),
        f"  exact duplicates                   {get('dedup/doc/exact_duplicate'):5}",
        f"  near duplicates                    {get('dedup/doc/near_duplicate'):5}",
        f"  canonical aliases                  {get('dedup/canonical/honored'):5}",
        f"  canonical mismatches (both kept)   {get('dedup/canonical/mismatch'):5}",
        f"  documents kept                     {kept:5}  (new {get('dedup/doc/new')}, updated {get('dedup/doc/updated')})",
        f"  unchanged since the last crawl     {get('dedup/doc/unchanged'):5}",
        f"  earlier copies superseded          {get('dedup/doc/superseded'):5}"
        "  (a better copy arrived later and was emitted with `supersedes`)",
    ]
    fresh, unchanged = get(URL_DROPPED + "fresh"), get("dedup/doc/unchanged")
    if fresh or unchanged:
        lines.append(f"Incremental run: skipped {fresh} fresh URL(s) without fetching them; "
                     f"{unchanged} re-fetched page(s) were unchanged and not emitted again.")
    store = crawler.settings.get("DEDUP_STORE") or EXAMPLE_PROJECT / ".scrapy" / "dedup" / crawler.spider.name
    lines += [f"Store: {rel(EXAMPLE_PROJECT / store)}",
              f"Items: {rel(args.items)} ({items} items)",
              "Inspect: cd example_project && ../.venv/bin/scrapy dedup summary --spider site",
              "Run `make demo` again for an incremental re-crawl."]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.items = args.items.resolve()  # before crawl() changes the working directory
    args.items.parent.mkdir(parents=True, exist_ok=True)
    server = start_server(args.port, args.variant)
    try:
        crawler, error = crawl(args, server)
    finally:
        server.stop()
    if error:
        print(f"demo failed: {error}", file=sys.stderr)
        if not args.verbose:
            print("Re-run with --verbose for the full Scrapy log.", file=sys.stderr)
        if not args.no_dedup:
            print("Use --no-dedup to check the demo without scrapy-dedup.", file=sys.stderr)
        return 1
    print(summary(args, server, crawler))
    return 0


if __name__ == "__main__":
    sys.exit(main())
