"""Index sync: an index that follows a re-crawl with ``export --changes-since`` re-embeds only what changed.

The site and its edit are bench_recrawl.py's: the Live Systems Manual as Debian ships it
(``live-manual-html``), served by ``tests/local_site.FileSite``, crawled by the tutorial's
``CrawlSpider``; then one section changes, one is added and one is deleted, and the site is
crawled again with ``DEDUP_REVISIT_AFTER=0`` (every page due). Around the re-crawl: a full export
(with its token) before, the changes since that token and a full export after.

LangChain's ``index()`` with a record manager and LlamaIndex's ingestion pipeline with a docstore
(upserts and delete) are then built from the first export and brought up to date with the
changes, and without them (the whole new export given to their own sync), in a venv of their own
(``.venv-index``, made here with the pinned versions below: neither is a dependency of the
project). Embeddings are counted, not computed (each framework's fake embedding).

    .venv/bin/python benchmarks/bench_index_sync.py          # writes results/index_sync.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scrapy_dedup.store.records import iter_urls

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from _corpus import package_dir  # noqa: E402
from bench_recrawl import BOOK, CHANGED, CONCURRENCY, DELETED, PACKAGE, crawl, edit  # noqa: E402
from local_site import FileSite  # noqa: E402

INDEX_VENV = ROOT / ".venv-index"
PINS = ("langchain-core==1.8.1", "llama-index-core==0.14.25")


def index_python() -> Path:
    """The Python of ``.venv-index``, made (or brought to the pins) when needed."""
    python = INDEX_VENV / "bin" / "python"
    stamp = INDEX_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != "\n".join(PINS):
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(INDEX_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PINS], check=True)
        stamp.write_text("\n".join(PINS))
    return python


def export(store: Path, out: Path, *args: str) -> dict:
    """``scrapy dedup export ARGS`` into ``out``: its seconds, bytes, lines and the token it printed."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "export", "--store", str(store), "-o", str(out), *args],
        capture_output=True, text=True, cwd=store.parent, check=True,
    )  # fmt: skip
    token = re.search(r"^change token: (\S+) ", proc.stderr, re.M)
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "bytes": out.stat().st_size,
        "lines": len(out.read_text("utf-8").splitlines()),
        "token": token.group(1) if token else None,
    }


def history_cost(n: int) -> dict:
    """What settling pays for the history on a LevelDB store of ``n`` URL records (documents of
    three pages): :func:`changes.record` with the records settling read, its first time (every
    document born) and again with nothing changed, beside the one read of every URL record
    that settling makes anyway."""
    from scrapy_dedup.core.records import UrlRecord
    from scrapy_dedup.decide import changes
    from scrapy_dedup.decide.clusters import cluster_id_for
    from scrapy_dedup.store.leveldb import LevelDBStore

    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        store = LevelDBStore(str(Path(tmp) / "store"), {"bench": 1})
        with store.batch() as batch:
            for i in range(n):
                key, rep = f"http://h/p{i}", f"http://h/p{i - i % 3}"
                batch.put_url(UrlRecord(key, key, cluster_id=cluster_id_for("", rep), content_hash=f"{i:032x}"))
        timed = {}
        start = time.perf_counter()
        records = list(iter_urls(store))
        timed["read_every_url_record"] = round(time.perf_counter() - start, 2)
        for name in ("record_first", "record_unchanged"):
            start = time.perf_counter()
            changes.record(store, records)
            timed[name] = round(time.perf_counter() - start, 2)
        store.close()
    return {"url_records": n, "documents": (n + 2) // 3, "seconds": timed, "load": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "results" / "index_sync.json"))
    parser.add_argument("--apply-only", action="store_true", help="the index part only, on the exports of the last run")
    parser.add_argument("--history-records", type=int, default=100_000, help="URL records of the history cost store")
    args = parser.parse_args()
    python = index_python()
    os.environ["PYTHONPATH"] = str(ROOT / "tests" / "spiders")
    source = package_dir(PACKAGE) / BOOK
    results: dict = {
        "site": f"{PACKAGE} ({BOOK})",
        "spider": "tutorial CrawlSpider, every page an item",
        "concurrency": CONCURRENCY,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other work, load {os.getloadavg()[0]:.1f} at start",
        "edit": {"changed": CHANGED, "added": "live-manual/recrawl-added.en.html", "deleted": DELETED},
    }
    kept = HERE / ".cache" / "index-sync"  # the three exports, for --apply-only
    if not args.apply_only:
        with tempfile.TemporaryDirectory(prefix="bench-index-sync-") as tmp:
            work = Path(tmp)
            site_dir = work / "site"
            shutil.copytree(source, site_dir, symlinks=True)
            store = work / "crawl" / "store"
            with FileSite(site_dir) as site:
                crawl(site, work / "crawl", {})
                before = export(store, work / "before.jsonl")
                edit(site_dir)
                time.sleep(1)  # a Last-Modified of the edit later than the first crawl's
                crawl(site, work / "crawl", {"DEDUP_REVISIT_AFTER": 0})
            changes = export(store, work / "changes.jsonl", "--changes-since", before["token"])
            after = export(store, work / "after.jsonl")
            kept.mkdir(parents=True, exist_ok=True)
            for name in ("before", "changes", "after"):
                shutil.copy(work / f"{name}.jsonl", kept / f"{name}.jsonl")
            (kept / "exports.json").write_text(json.dumps({"before": before, "changes": changes, "after": after}))
    results["exports"] = json.loads((kept / "exports.json").read_text())
    lines = [json.loads(line) for line in (kept / "changes.jsonl").read_text("utf-8").splitlines()]
    results["changes"] = {}
    for c in lines:
        name = f"{c['op']} {c['reason']}"
        results["changes"][name] = results["changes"].get(name, 0) + 1
    applied = subprocess.run(
        [str(python), str(HERE / "index_sync_apply.py"), *(str(kept / f"{n}.jsonl") for n in ("before", "changes", "after"))],
        capture_output=True, text=True,
    )  # fmt: skip
    if applied.returncode:
        raise SystemExit(f"index_sync_apply.py failed:\n{applied.stderr}")
    results.update(json.loads(applied.stdout))
    results["history_cost"] = history_cost(args.history_records)
    print(json.dumps(results, indent=1))
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", "utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
