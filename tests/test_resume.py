"""Interrupted crawls resume and lose nothing.

A generated documentation site of 549 pages (320 articles, exact copies, near copies,
syndicated copies with rel=canonical, redirects, URL variants, hubs) is crawled once without
interruption, then into fresh stores that are interrupted again and again: SIGKILL of the crawl
process and its extraction workers, SIGINT to the whole process group (a terminal's Ctrl-C),
and a CLOSESPIDER_PAGECOUNT run; each followed by a run that finishes. The final store must
equal the uninterrupted crawl's, every document must have been emitted, and none twice.

The kill moments are random; every failure's message starts with its seed
(``RESUME_SEED=... pytest ...`` replays it).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from local_site import LocalSite

from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import get_url, iter_clusters, iter_urls, iter_variants

ROOT = Path(__file__).resolve().parent.parent
SPIDERS = Path(__file__).resolve().parent / "spiders"

ARTICLES = 320
VOCABULARY = (
    "index query table column row join plan vacuum lock page buffer cache replica stream backup "
    "restore role grant schema type cast function trigger rule view sequence cursor commit abort "
    "savepoint isolation snapshot tuple heap toast btree hash gist brin statistics sample cost "
    "estimate parallel worker partition range list key constraint check unique foreign default "
    "extension server option setting timeout memory disk archive segment checkpoint recovery"
).split()


def article_words(i: int) -> list[str]:
    rng = random.Random(i)
    return [f"{rng.choice(VOCABULARY)}{rng.randrange(100)}" for _ in range(180)]


def paragraphs(words: list[str]) -> str:
    return "".join(f"<p>{' '.join(words[j:j + 30])}.</p>" for j in range(0, len(words), 30))


def page(title: str, body: str, links: list[str], head: str = "") -> bytes:
    nav = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>{head}</head>"
        f"<body><header><p>Generated manual</p></header>{body}<footer><ul>{nav}</ul></footer></body></html>"
    ).encode()


def article_links(i: int) -> list[str]:
    links = [f"/a/{(i + 1) % ARTICLES}", f"/a/{(i * 7 + 3) % ARTICLES}"]
    if i % 4 == 0:
        links.append(f"/copy/{i}")
    if i % 5 == 0:
        links.append(f"/near/{i}")
    if i % 8 == 1:
        links.append(f"/syn/{i}")
    if i % 8 == 3:
        links.append(f"/old/{i}")
    if i % 6 == 2:
        links.append(f"/a/{i}?utm_source=feed")
    return links


def reply(path: str) -> tuple[int, dict[str, str], bytes]:
    """The site: what a GET of ``path`` (with its query) answers."""
    route, _, query = path.partition("?")
    parts = route.strip("/").split("/")
    if route == "/":
        return 200, {}, page("Manual", "<h1>Manual</h1>", ["/a/0"] + [f"/hub/{h}" for h in range(4)])
    if len(parts) == 2 and parts[1].isdigit() and int(parts[1]) < ARTICLES:
        kind, i = parts[0], int(parts[1])
        words = article_words(i)
        if kind == "hub" and i < 4:
            return 200, {}, page(f"Part {i}", "<h1>Contents</h1>", [f"/a/{i * 80 + j}" for j in range(0, 80, 9)])
        if kind == "a":
            return 200, {}, page(f"Chapter {i}", f"<article>{paragraphs(words)}</article>", article_links(i))
        if kind == "copy" and i % 4 == 0:
            return 200, {}, page(f"Chapter {i} (print)", f"<article>{paragraphs(words)}</article>", [f"/a/{i}"])
        if kind == "near" and i % 5 == 0:
            edited = [*words[:-1], "z" + words[-1][1:]]  # one word changed, same length
            return 200, {}, page(f"Chapter {i} (draft)", f"<article>{paragraphs(edited)}</article>", [f"/a/{i}"])
        if kind == "syn" and i % 8 == 1:
            head = f'<link rel="canonical" href="/a/{i}">'
            return 200, {}, page(f"Chapter {i} (feed)", f"<article>{paragraphs(words)}</article>", [], head)
        if kind == "old" and i % 8 == 3:
            return 301, {"Location": f"/a/{i}"}, b""
    return 404, {}, page("Not found", "<h1>Not found</h1>", [])


#: the header in which each crawl process names itself (resume_spiders.SenderPid)
SENDER_HEADER = "X-Crawl-Pid"


class _Served(LocalSite):
    """Serves a :class:`Site`, and counts each request under the crawl process that sent it."""

    def __init__(self, site: Site) -> None:
        self.site = site
        super().__init__(site._reply)

    def answer(self, path: str, request_headers) -> tuple[int, dict[str, str], bytes]:
        with self.site.lock:
            self.site.sent[request_headers.get(SENDER_HEADER), path] += 1
        return super().answer(path, request_headers)


class Site:
    def __init__(self) -> None:
        self.hits: Counter = Counter()
        #: (pid of the crawl process that sent it, path) -> requests answered
        self.sent: Counter = Counter()
        self.lock = threading.Lock()
        self.served = _Served(self)
        self.url = self.served.url + "/"

    def _reply(self, path: str) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.hits[path] += 1
        return reply(path)

    def snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.hits)

    def sent_by(self, pids: list[int]) -> Counter:
        """(pid, path) -> requests answered, of the requests the processes ``pids`` sent."""
        names = {str(pid) for pid in pids}
        with self.lock:
            return Counter({(int(pid), path): n for (pid, path), n in self.sent.items() if pid in names})

    def unattributed(self) -> int:
        """Requests answered that named no crawl process: none may, as what they fetched
        would escape :attr:`Crawl.double_fetches`."""
        with self.lock:
            return sum(n for (pid, _), n in self.sent.items() if pid is None)

    def stop(self) -> None:
        self.served.close()


@pytest.fixture(scope="module")
def site():
    s = Site()
    yield s
    s.stop()


SETTINGS = {
    "SPIDER_MODULES": "resume_spiders",
    "EXTENSIONS": json.dumps({"resume_spiders.EmittedLog": 100, "demo_project.extensions.StatsDump": 500}),
    "DOWNLOADER_MIDDLEWARES": json.dumps({"resume_spiders.SenderPid": 1000}),
    "DEDUP_WORKERS": "1",
    "DEDUP_LOGSTATS_INTERVAL": "0",
    "CONCURRENT_REQUESTS": "32",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "32",
    "LOG_LEVEL": "INFO",
    "RETRY_ENABLED": "False",
}


class Crawl:
    """One store, crawled by successive ``scrapy crawl docs`` processes."""

    def __init__(self, site: Site, out: Path, **settings: str) -> None:
        self.site, self.out = site, out
        out.mkdir(parents=True, exist_ok=True)
        self.store = out / "store"
        self.emitted = out / "emitted.jsonl"
        self.settings = {**SETTINGS, "DEDUP_STORE": str(self.store), "EMITTED_LOG": str(self.emitted), **settings}
        self.runs = 0
        #: the crawl process of each run, in order
        self.pids: list[int] = []
        self.killed_pids: list[int] = []
        self.logs: list[str] = []
        self.forced = 0

    def launch(self, *args: str, **extra: str) -> subprocess.Popen:
        self.runs += 1
        cmd = [sys.executable, "-m", "scrapy", "crawl", "docs", "-a", f"start_url={self.site.url}", *args]
        extra.setdefault("DEMO_STATS_FILE", str(self.out / f"run{self.runs}-stats.json"))
        for name, value in {**self.settings, **extra}.items():
            cmd += ["-s", f"{name}={value}"]
        env = dict(os.environ, SCRAPY_SETTINGS_MODULE="demo_project.settings")
        env["PYTHONPATH"] = os.pathsep.join([str(SPIDERS), str(ROOT / "example_project"), env.get("PYTHONPATH", "")])
        self._log = open(self.out / f"run{self.runs}.log", "w+", encoding="utf-8")
        # a session of its own: the crawl and its extraction workers form one process group
        proc = subprocess.Popen(cmd, cwd=self.out, env=env, stdout=subprocess.DEVNULL, stderr=self._log,
                                start_new_session=True)
        self.pids.append(proc.pid)
        return proc

    def wait(self, proc: subprocess.Popen, timeout: float = 120) -> int:
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"run {self.runs} did not exit by itself within {timeout} s:\n{self.tail()}") from None
        self._log.seek(0)
        self.logs.append(self._log.read())
        self._log.close()
        return code

    @property
    def double_fetches(self) -> list[tuple[int, str, int]]:
        """(run, path, times) of each URL that one run fetched more than once.

        Counted by the process that sent each request (resume_spiders.SenderPid), not by
        when the site answered it: the site answers a SIGKILLed run's last requests, sent
        before the kill, whenever its threads get to them, which under load can be after the
        next run started; that run fetches the same owed requests again, and counting by
        time would charge it with both fetches."""
        assert not self.site.unattributed(), "requests that named no crawl process (SenderPid)"
        run_of = {pid: run for run, pid in enumerate(self.pids, 1)}
        sent = self.site.sent_by(self.pids)
        return sorted((run_of[pid], path, n) for (pid, path), n in sent.items() if n > 1)

    def tail(self, lines: int = 30) -> str:
        self._log.flush()
        return "\n".join((self.out / f"run{self.runs}.log").read_text().splitlines()[-lines:])

    def emitted_lines(self) -> list[dict]:
        if not self.emitted.exists():
            return []
        return [json.loads(line) for line in self.emitted.read_text().splitlines() if line.strip()]

    def stats(self) -> dict:
        """The last run's stats (a killed run writes none)."""
        path = self.out / f"run{self.runs}-stats.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def summary(self) -> str:
        proc = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "summary", "--store", str(self.store)],
                              cwd=self.out, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def run_to_end(self, *args: str, **extra: str) -> str:
        proc = self.launch(*args, **extra)
        code = self.wait(proc)
        assert code == 0, f"run {self.runs} failed (exit {code}):\n{self.logs[-1][-3000:]}"
        return self.logs[-1]

    def interrupt(self, sig: int, rng: random.Random) -> bool:
        """One run, interrupted at a random moment; False when it finished first."""
        proc = self.launch()
        if sig == signal.SIGKILL and rng.random() < 0.3:
            # during start-up or just after (a Ctrl-C before Scrapy handles signals is Python's)
            deadline = time.monotonic() + rng.uniform(0.5, 3.0)
        elif sig == signal.SIGKILL:
            deadline = self._emissions(proc, 1) + rng.uniform(0.0, 0.8)
        else:
            # a graceful stop finishes what is in flight: stop early, after a few items
            deadline = self._emissions(proc, rng.randint(1, 20))
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is not None:
            self.wait(proc)
            return False
        os.killpg(proc.pid, sig)
        forced = False
        if sig == signal.SIGKILL:
            self.killed_pids.append(proc.pid)
        elif rng.random() < 0.3:
            # a second Ctrl-C forces the stop: what is left undecided stays owed
            time.sleep(rng.uniform(0.05, 0.4))
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
                forced = True
                self.forced += 1
        code = self.wait(proc, timeout=60)
        if sig == signal.SIGINT:
            log = self.logs[-1]
            assert "Traceback" not in log and "BrokenProcessPool" not in log, f"run {self.runs}:\n{log[-4000:]}"
            assert code == 0 or forced, f"run {self.runs} exited {code} after SIGINT:\n{log[-3000:]}"
        return True

    def _emissions(self, proc: subprocess.Popen, count: int) -> float:
        """Wait until this run emitted ``count`` items (or ended, or 30 s passed)."""
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if sum(line["pid"] == proc.pid for line in self.emitted_lines()[-100:]) >= count:
                break
            time.sleep(0.01)
        return time.monotonic()


def store_state(path: Path) -> dict:
    """What a finished crawl must agree on, by URL key: documents, canonical, alias reason."""
    with LevelDBStore.open_existing(str(path)) as store:
        return state_of(store)


def state_of(store) -> dict:
    """:func:`store_state` of an open store, of any backend."""
    records = {r.key: r for r in iter_urls(store)}
    clusters = {c.cluster_id: c for c in iter_clusters(store)}
    variants = {url: v["key"] for url, v in iter_variants(store)}
    pending = store.count("pending")

    def canonical(key: str, hops: int = 0) -> str | None:
        record = records.get(key)
        if record is None or hops > 5:
            return None
        if record.cluster_id is not None:
            return clusters[record.cluster_id].representative
        if record.status == "redirect" and record.duplicate_of:
            return canonical(record.duplicate_of, hops + 1)
        return None

    urls = {key: (r.kind, r.reason, canonical(key)) for key, r in records.items()}
    return {
        "documents": sorted(c.representative for c in clusters.values()),
        "clusters": sorted(sorted(m for m in (k for k, r in records.items() if r.cluster_id == cid)) for cid in clusters),
        "urls": urls,
        "variants": variants,
        "pending": pending,
    }


def check_same_store(state: dict, expected: dict) -> None:
    assert state["pending"] in (0, None) and expected["pending"] in (0, None)
    assert state["documents"] == expected["documents"]
    assert state["clusters"] == expected["clusters"]
    differ = {k: (state["urls"].get(k), v) for k, v in expected["urls"].items() if state["urls"].get(k) != v}
    extra = set(state["urls"]) - set(expected["urls"])
    assert not differ and not extra, f"URLs that differ (got, expected): {dict(list(differ.items())[:10])}; extra {extra}"
    assert state["variants"] == expected["variants"]


def check_emissions(crawl: Crawl, expected: dict) -> None:
    lines = crawl.emitted_lines()
    assert all(line["status"] in ("new", "updated", "exact_duplicate", "near_duplicate") for line in lines), [
        line for line in lines if line["status"] not in ("new", "updated")
    ][:5]
    with LevelDBStore.open_existing(str(crawl.store)) as store:
        rep_urls = {get_url(store, key).url for key in expected["documents"]}
    emitted_urls = {line["url"] for line in lines}
    assert rep_urls <= emitted_urls, f"documents never emitted: {sorted(rep_urls - emitted_urls)[:10]}"
    # A document is emitted once; again only as `updated` or as a take-over (`supersedes`).
    # The one tolerated repeat: the very last line a SIGKILLed process wrote, whose
    # acknowledgement the kill cut off (delivery is at least once at that instant).
    last_of_killed = {}
    for index, line in enumerate(lines):
        if line["pid"] in crawl.killed_pids:
            last_of_killed[line["pid"]] = index
    cut_off = {lines[i]["url"] for i in last_of_killed.values()}
    seen: Counter = Counter()
    repeats = []
    for line in lines:
        seen[line["url"]] += 1
        if seen[line["url"]] > 1 and line["status"] != "updated" and not line["supersedes"]:
            if line["url"] in cut_off:
                cut_off.discard(line["url"])
                continue
            repeats.append(line["url"])
    assert not repeats, f"emitted twice: {repeats[:10]}"


@pytest.fixture(scope="module")
def uninterrupted(site, tmp_path_factory):
    crawl = Crawl(site, tmp_path_factory.mktemp("uninterrupted"))
    crawl.run_to_end()
    state = store_state(crawl.store)
    assert len(state["urls"]) >= 500
    assert not crawl.double_fetches
    return state


@contextmanager
def seeded(name: str) -> Iterator[random.Random]:
    """The random moments of one test, from ``RESUME_SEED`` or a fresh seed. Every failure
    inside carries the seed: an assertion's message starts with it (a CI log's one-line
    summary shows it), any other exception has it as a note."""
    seed = int(os.environ.get("RESUME_SEED", random.randrange(10**6)))
    print(f"{name}: RESUME_SEED={seed}")
    try:
        yield random.Random(seed)
    except AssertionError as error:
        error.args = (f"{name}: RESUME_SEED={seed} replays this: {error.args[0] if error.args else ''}",
                      *error.args[1:])
        raise
    except Exception as error:
        error.add_note(f"{name}: RESUME_SEED={seed} replays this")
        raise


def test_the_uninterrupted_crawl_covers_the_site(uninterrupted):
    reasons = Counter(reason for _, reason, _ in uninterrupted["urls"].values())
    assert len(uninterrupted["documents"]) == ARTICLES
    assert reasons["exact_content"] == 80
    assert reasons["near_duplicate"] == 64
    assert reasons["rel_canonical"] == 40
    assert reasons["redirect"] == 40
    assert len(uninterrupted["variants"]) >= 50


def test_sigkill_at_random_moments_loses_nothing(site, uninterrupted, tmp_path):
    with seeded("sigkill") as rng:
        kills = stores = 0
        while kills < 10:
            # on a fast machine a store may be crawled to the end before ten kills: the kills go on
            # in a fresh store, and every store is checked
            stores += 1
            crawl = Crawl(site, tmp_path / f"store{stores}")
            while kills < 10 and crawl.interrupt(signal.SIGKILL, rng):
                kills += 1  # a run that ends by itself is not restarted: what it left is checked
            crawl.run_to_end()
            check_same_store(store_state(crawl.store), uninterrupted)
            check_emissions(crawl, uninterrupted)
            assert not crawl.double_fetches, crawl.double_fetches[:10]
            assert crawl.killed_pids or stores == 1, "a fresh store finished before any kill"


def test_ctrl_c_at_random_moments_loses_nothing(site, uninterrupted, tmp_path):
    with seeded("sigint") as rng:
        # JOBDIR persists Scrapy's own queue too: no request may be scheduled twice. A graceful
        # stop finishes what is in flight: fewer requests at a time, so that ten stops fit in.
        crawl = Crawl(site, tmp_path, JOBDIR=str(tmp_path / "job"), CONCURRENT_REQUESTS="8",
                      CONCURRENT_REQUESTS_PER_DOMAIN="8", SCRAPER_SLOT_MAX_ACTIVE_SIZE="30000")
        stops = 0
        while stops < 10 and crawl.interrupt(signal.SIGINT, rng):
            stops += 1
        log = crawl.run_to_end()
        check_same_store(store_state(crawl.store), uninterrupted)
        check_emissions(crawl, uninterrupted)
        assert not crawl.double_fetches, crawl.double_fetches[:10]
        assert stops >= 10, f"the crawl finished after {stops} stops"
        assert "resuming" in "".join(crawl.logs[1:])
        assert ": complete" in log


def test_a_page_limit_run_is_resumed(site, uninterrupted, tmp_path):
    crawl = Crawl(site, tmp_path)
    crawl.run_to_end(CLOSESPIDER_PAGECOUNT="120")
    owed = crawl.stats()
    assert owed["finish_reason"] == "closespider_pagecount"
    assert "interrupted: " in crawl.logs[-1] and "pending (run the crawl again to resume)" in crawl.logs[-1]
    before = crawl.summary()
    assert "last run interrupted: " in before and " pending" in before
    # the owed requests are real pending data for the store check: every one deserializes
    check = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "check", "--store", str(crawl.store)],
                           cwd=crawl.out, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    owed_count = re.search(r"pending requests\D*(\d[\d,]*)", check.stdout)
    assert owed_count and int(owed_count.group(1).replace(",", "")) > 0, check.stdout
    log = crawl.run_to_end()
    assert "resuming" in log and "pending requests from an interrupted run" in log
    assert crawl.stats()["dedup/frontier/resumed"] > 0
    assert "last run complete" in crawl.summary()
    assert ": complete" in log
    check_same_store(store_state(crawl.store), uninterrupted)
    check_emissions(crawl, uninterrupted)
    assert not crawl.double_fetches, crawl.double_fetches[:10]


def test_requests_that_cannot_be_stored_are_still_crawled(site, uninterrupted, tmp_path):
    crawl = Crawl(site, tmp_path)
    log = crawl.run_to_end("-a", "lambdas=/copy/")
    stats = crawl.stats()
    # every printer copy was fetched and decided, though none could be kept for a resumed run
    assert stats["dedup/frontier/unserializable"] == 80
    assert Counter(reason for _, reason, _ in store_state(crawl.store)["urls"].values())["exact_content"] == 80
    warnings = [line for line in log.splitlines() if "Unable to keep request" in line]
    assert len(warnings) == 1 and "/copy/" in warnings[0] and "dedup/frontier/unserializable" in warnings[0]
    check_same_store(store_state(crawl.store), uninterrupted)
