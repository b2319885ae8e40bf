"""A crawl's pages/s with the Redis store 1 ms further away: round trips off the critical path?

    .venv/bin/python benchmarks/bench_latency.py [--size tiny|default|large] [--rounds N]

Starts a redis-server on a free loopback port and a latency proxy in front of it
(latency_proxy.py: a TCP relay that holds each chunk 0.5 ms each way, so a round trip gains
about 1 ms; the added time is measured with PING, direct and through the proxy, and
reported). Then crawls a real documentation site served on 127.0.0.1 (the GIO reference
manual of Debian's libglib2.0-doc 2.74.6, gtk-doc HTML, the pages first reached
breadth-first from its index.html) with the Redis store at 0 ms (direct) and at +1 ms
(through the proxy), in interleaved rounds whose order alternates, so that the shared
machine's load falls on both alike. Per arm, the median over the rounds of:

- pages/s (fetches over the crawl's elapsed time, start-up excluded) and their ratio
  (+1 ms over 0 ms; the target is >= 0.90);
- CPU per page (the crawl process and its extraction workers);
- round trips per page (the server's read events, about one per client round trip);
- the time the crawl spent waiting for Redis replies, on the reactor thread and on other
  threads, per page: a round trip waited for on the reactor thread blocks every page.

A third arm crawls through the relay adding nothing: the relay's own cost, apart from the
latency. With ``--sites`` two more crawls (0 ms, +1 ms; not in the medians) count the
reactor thread's round trips and waits by the extension's call site (the innermost frame outside the
store), with their time.
Writes results/latency.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "example_project"))

from run_all import RESULTS, SIZES, fmt, log, row, write_result  # noqa: E402

NAME = "latency"
GLIB = "libglib2.0-doc=2.74.6-2+deb12u9"
GIO_HTML = Path("usr/share/gtk-doc/html/gio")
SITE_LABEL = "GIO reference (libglib2.0-doc 2.74.6)"
PAGES = {"tiny": 40, "default": 230, "large": 230}
ROUNDS = {"tiny": 1, "default": 3, "large": 5}
#: added each way by the proxy: a round trip gains twice this
DELAY_EACH_WAY = 0.0005
TARGET_RATIO = 0.90
#: the store direct, through the relay adding nothing (its own cost), and 1 ms further away
ARMS = ("0 ms", "relay, +0 ms", "+1 ms")
CRAWL_SETTINGS = {
    "CONCURRENT_REQUESTS": 16,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
    "DEDUP_WORKERS": 1,
    "DEDUP_LOGSTATS_INTERVAL": 0,
    "LOG_LEVEL": "WARNING",
}


# -- in the crawl process: where its Redis replies are waited for ---------------------------


class ReplyWait:
    """Crawl-process extension (``EXTENSIONS = {"bench_latency.ReplyWait": 0}``): the seconds
    spent in redis-py's ``read_response`` (waiting for and reading a reply) on the reactor
    thread and on others, the replies read by each, and the process's CPU time, in the
    stats as ``bench/reactor_wait_s``, ``bench/reactor_replies``, ``bench/other_wait_s``,
    ``bench/other_replies``, the round trips (commands sent) of each, ``bench/reactor_round_trips``,
    ``bench/other_round_trips``, and ``bench/cpu_self_s``, ``bench/cpu_children_s``. With the
    setting ``BENCH_SITES`` the reactor thread's round trips and their wait are also counted
    by call site (``bench/sites``, the 25 longest waits). Measurement only: it is not part of the extension."""

    def __init__(self, crawler) -> None:
        from redis.connection import AbstractConnection

        self.crawler = crawler
        self.reactor = threading.get_ident()  # extensions are built on the reactor thread
        self.wait = {True: 0.0, False: 0.0}
        self.replies = {True: 0, False: 0}
        self.sends = {True: 0, False: 0}
        self.sites: Counter = Counter()
        self.site_s: Counter = Counter()
        sites = crawler.settings.getbool("BENCH_SITES")
        original, send = AbstractConnection.read_response, AbstractConnection.send_packed_command

        def send_packed_command(connection, *args, **kwargs):
            # one send a round trip: a pipeline's commands go in one, and their replies follow
            on_reactor = threading.get_ident() == self.reactor
            self.sends[on_reactor] += 1
            if sites and on_reactor:
                self.sites[_call_site()] += 1
            return send(connection, *args, **kwargs)

        def read_response(connection, *args, **kwargs):
            on_reactor = threading.get_ident() == self.reactor
            started = time.perf_counter()
            try:
                return original(connection, *args, **kwargs)
            finally:
                took = time.perf_counter() - started
                self.wait[on_reactor] += took
                self.replies[on_reactor] += 1
                if sites and on_reactor:
                    self.site_s[_call_site()] += took

        AbstractConnection.read_response = read_response
        AbstractConnection.send_packed_command = send_packed_command

    @classmethod
    def from_crawler(cls, crawler):
        from scrapy import signals

        extension = cls(crawler)
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        return extension

    def engine_stopped(self) -> None:
        stats = self.crawler.stats
        stats.set_value("bench/reactor_wait_s", self.wait[True])
        stats.set_value("bench/reactor_replies", self.replies[True])
        stats.set_value("bench/other_wait_s", self.wait[False])
        stats.set_value("bench/other_replies", self.replies[False])
        stats.set_value("bench/reactor_round_trips", self.sends[True])
        stats.set_value("bench/other_round_trips", self.sends[False])
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        stats.set_value("bench/cpu_self_s", me.ru_utime + me.ru_stime)
        stats.set_value("bench/cpu_children_s", children.ru_utime + children.ru_stime)
        if self.site_s:
            stats.set_value("bench/sites", [
                {"site": site, "round_trips": self.sites[site], "wait_s": s} for site, s in self.site_s.most_common(25)
            ])


def _call_site() -> str:
    """The innermost frame of the extension outside the store: who asked for this round trip."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "scrapy_dedup" in name and "/store/" not in name:
            return f"{name.split('scrapy_dedup/', 1)[1]}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "other"


# -- the benchmark ----------------------------------------------------------------------------


def docs_site(pages: int):
    """The site: ``$SCRAPY_DEDUP_BENCH_PAGES`` (the tests' demo site) or the GIO reference."""
    import _corpus
    from bench_crawl import postgres_site

    override = os.environ.get(_corpus.PAGES_ENV)
    root = Path(override) if override else _corpus.package_dir(GLIB) / GIO_HTML
    label = root.name if override else SITE_LABEL
    site, chosen = postgres_site(pages, root)
    return site, chosen, label


def measure_rtt(direct_url: str, proxy_url: str, count: int = 300) -> dict:
    """Median PING times direct and through the proxy, three times interleaved, in ms."""
    from latency_proxy import ping_ms

    direct, proxied = [], []
    for _ in range(3):
        direct.append(ping_ms(direct_url, count))
        proxied.append(ping_ms(proxy_url, count))
    d, p = statistics.median(direct), statistics.median(proxied)
    return {"direct_ms": d, "proxy_ms": p, "added_ms": p - d}


def crawl_once(start: str, out: Path, store_url: str, prefix: str, sites: bool, settings: dict) -> dict:
    from testing import run_crawl

    settings = {
        **settings,
        "DEDUP_STORE": store_url,
        "DEDUP_REDIS_PREFIX": prefix,
        "EXTENSIONS": {"demo_project.extensions.StatsDump": 500, "bench_latency.ReplyWait": 0},
        "BENCH_SITES": sites,
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_crawl(start, out, settings, timeout=1800, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0 or not result.stats:
        raise RuntimeError(f"a crawl failed:\n{result.log[-3000:]}")
    stats = result.stats
    return {
        "elapsed_s": float(stats["elapsed_time_seconds"]),
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "items": len(result.items),
        "stats": {k: v for k, v in stats.items() if k.startswith("bench/")},
    }


def bench(tmp: Path, pages: int, rounds: int, sites: bool, workers: int = 1) -> dict:
    from latency_proxy import LatencyProxy
    from redis_servers import RedisServer

    from scrapy_dedup.store.redis.functions import connect

    site, chosen, label = docs_site(pages)
    settings = {**CRAWL_SETTINGS, "DEDUP_WORKERS": workers}
    # the crawl processes import the ReplyWait extension from this folder
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    http, origin = site.serve()
    start = origin + "/index.html"
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    loads = [os.getloadavg()[0]]
    try:
        with RedisServer(tmp / "redis") as server, \
                LatencyProxy("127.0.0.1", server.port, DELAY_EACH_WAY) as proxy, \
                LatencyProxy("127.0.0.1", server.port, 0.0) as relay:
            client = connect(server.url)
            rtt = measure_rtt(server.url, proxy.url)
            rtt_relay = measure_rtt(server.url, relay.url)
            log(NAME, f"PING {rtt['direct_ms']:.3f} ms direct, {rtt['proxy_ms']:.3f} ms through the proxy: "
                      f"+{rtt['added_ms']:.3f} ms (the relay alone +{rtt_relay['added_ms']:.3f} ms)")
            urls = {"0 ms": server.url, "relay, +0 ms": relay.url, "+1 ms": proxy.url}
            proxies = {"0 ms": None, "relay, +0 ms": relay, "+1 ms": proxy}
            # a first crawl, not measured: the interpreters compile and cache their imports
            crawl_once(start, tmp / "warm-up", server.url, "bench:warm-up", False, settings)

            def one(name: str, arm: str, with_sites: bool) -> dict:
                client.flushall()
                site.reset()
                reads = int(client.info("stats")["total_reads_processed"])
                relayed = proxies[arm]
                chunks = relayed.chunks_up if relayed else 0
                r = crawl_once(start, tmp / f"{name}, {arm}", urls[arm], f"bench:{uuid.uuid4().hex[:8]}", with_sites,
                               settings)
                fetched = site.fetches
                stats = r["stats"]
                # the INFO command's own read is counted too: one, negligible
                r.update(
                    fetches=fetched,
                    pages_per_s=fetched / r["elapsed_s"],
                    cpu_ms_per_page=1000 * r["cpu_s"] / fetched,
                    round_trips_per_page=(int(client.info("stats")["total_reads_processed"]) - reads) / fetched,
                    proxy_chunks_per_page=((relayed.chunks_up if relayed else 0) - chunks) / fetched,
                    reactor_wait_ms_per_page=1000 * stats.get("bench/reactor_wait_s", 0) / fetched,
                    reactor_round_trips_per_page=stats.get("bench/reactor_round_trips", 0) / fetched,
                    reactor_replies_per_page=stats.get("bench/reactor_replies", 0) / fetched,
                    other_wait_ms_per_page=1000 * stats.get("bench/other_wait_s", 0) / fetched,
                    other_round_trips_per_page=stats.get("bench/other_round_trips", 0) / fetched,
                    load=os.getloadavg()[0],
                )
                log(NAME, f"{name} {arm}: {fetched} pages, {r['pages_per_s']:.1f} pages/s, "
                          f"{r['cpu_ms_per_page']:.1f} ms CPU/page, {r['round_trips_per_page']:.1f} round "
                          f"trips/page, reactor waited {r['reactor_wait_ms_per_page']:.2f} ms/page "
                          f"({r['reactor_round_trips_per_page']:.1f} round trips), load {r['load']:.1f}")
                return r

            for turn in range(rounds):
                # the arms' order turns each round: none always follows another
                for arm in ARMS[turn % len(ARMS):] + ARMS[:turn % len(ARMS)]:
                    runs[arm].append(one(f"round {turn + 1}", arm, False))
                loads.append(os.getloadavg()[0])
            # where the reactor thread waits, by call site: crawls of their own, the stack walks
            # cost CPU
            sites_by_arm = {arm: one("call sites", arm, True)["stats"].get("bench/sites")
                            for arm in ("0 ms", "+1 ms")} if sites else {}
            rtt_after = measure_rtt(server.url, proxy.url)
    finally:
        http.shutdown()
    keys = ("pages_per_s", "cpu_ms_per_page", "round_trips_per_page", "proxy_chunks_per_page",
            "reactor_wait_ms_per_page", "reactor_round_trips_per_page", "reactor_replies_per_page",
            "other_wait_ms_per_page", "other_round_trips_per_page")
    summary = {arm: {k: statistics.median(r[k] for r in runs[arm]) for k in keys} for arm in ARMS}
    # each round's ratio compares two crawls run back to back, under about the same load
    round_ratios = [b["pages_per_s"] / a["pages_per_s"] for a, b in zip(runs["0 ms"], runs["+1 ms"])]
    return {
        "site": label,
        "pages": len(chosen),
        "rounds": rounds,
        "settings": settings,
        "rtt": rtt,
        "rtt_relay": rtt_relay,
        "rtt_after": rtt_after,
        "load_average": {"min": min(loads), "max": max(loads), "samples": loads},
        "summary": summary,
        "ratio": summary["+1 ms"]["pages_per_s"] / summary["0 ms"]["pages_per_s"],
        "round_ratios": round_ratios,
        "median_round_ratio": statistics.median(round_ratios),
        "ratio_to_relay": summary["+1 ms"]["pages_per_s"] / summary["relay, +0 ms"]["pages_per_s"],
        "sites": sites_by_arm,
        "runs": runs,
    }


def rows(result: dict) -> list[dict]:
    s = result["summary"]
    zero, relay, one = s["0 ms"], s["relay, +0 ms"], s["+1 ms"]
    where = (f"{result['site']}, {result['pages']} pages, CONCURRENT_REQUESTS 16 (16 per domain), "
             f"DEDUP_WORKERS {result['settings']['DEDUP_WORKERS']}, "
             f"median of {result['rounds']}")
    return [
        row(NAME, f"{where}: pages/s with Redis +{result['rtt']['added_ms']:.2f} ms round trip (proxy)",
            fmt(one["pages_per_s"]), f"0 ms {fmt(zero['pages_per_s'])}", f"{result['ratio']:.2f}",
            f">= {TARGET_RATIO:.2f}", result["ratio"] >= TARGET_RATIO),
        row(NAME, "CPU per page, ms (crawl process and workers)", fmt(one["cpu_ms_per_page"]),
            f"0 ms {fmt(zero['cpu_ms_per_page'])}", f"{one['cpu_ms_per_page'] / zero['cpu_ms_per_page']:.2f}"),
        row(NAME, "pages/s at +1 ms against the relay adding nothing (its own cost apart)",
            fmt(one["pages_per_s"]), f"relay +0 ms {fmt(relay['pages_per_s'])}", f"{result['ratio_to_relay']:.2f}"),
        row(NAME, "Redis round trips per page (the server's reads)", fmt(one["round_trips_per_page"]),
            f"0 ms {fmt(zero['round_trips_per_page'])}"),
        row(NAME, "reactor thread blocked on Redis: ms per page (its round trips per page)",
            f"{fmt(one['reactor_wait_ms_per_page'])} ({fmt(one['reactor_round_trips_per_page'])})",
            f"0 ms {fmt(zero['reactor_wait_ms_per_page'])} ({fmt(zero['reactor_round_trips_per_page'])})"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--pages", type=int, help="pages of the site (default by size)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default by size)")
    parser.add_argument("--sites", action="store_true", help="two more crawls counting the reactor thread's "
                        "round trips by call site")
    parser.add_argument("--workers", type=int, default=1, help="DEDUP_WORKERS of the crawls (default 1)")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    try:
        result = bench(tmp, args.pages or PAGES[args.size], args.rounds or ROUNDS[args.size], args.sites,
                       args.workers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = result["load_average"]
    notes = [f"{result['site']}: +1 ms through a relay adding {result['rtt']['added_ms']:.2f} ms to a PING "
             f"({result['rtt']['direct_ms']:.3f} ms direct; {result['rtt_after']['added_ms']:.2f} ms after the "
             f"crawls); rounds' ratios {', '.join(f'{r:.2f}' for r in result['round_ratios'])}; load average "
             f"{load['min']:.1f}-{load['max']:.1f} on {os.cpu_count()} cores"]
    write_result(NAME, {"size": args.size, **result, "rows": rows(result), "notes": notes}, args.out)
    for r in rows(result):
        print(f"{r['measure']}: {r['scrapy_dedup']} vs {r['alternatives']} {r['ratio']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
