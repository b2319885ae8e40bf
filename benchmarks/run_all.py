"""Run every speed benchmark side by side and write one table: ``make bench``.

    .venv/bin/python benchmarks/run_all.py                   # default size, a few minutes on 2 cores
    .venv/bin/python benchmarks/run_all.py --size large      # 10^7 fingerprints, a 2 x 10^5-page soak, bigger crawls
    .venv/bin/python benchmarks/run_all.py --only index      # one script (or a comma-separated list)

Each ``bench_<name>.py`` runs on its own (same ``--size`` option) and writes
``results/<name>.json``; this script runs them one after the other in subprocesses, merges
their rows into ``results/latest.json`` and ``results/latest.md``, prints the table and copies
it into benchmarks/README.md between the ``<!-- bench-table -->`` markers.

Absolute times are noise on a shared 2-core machine: every figure that matters is a ratio of
two measurements taken in the same run. No test asserts a timing.

This module also holds the few helpers the scripts share (rows, machine line, memory).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
README = HERE / "README.md"
SIZES = ("tiny", "default", "large")
#: script name -> what it measures (in the order they run)
BENCHMARKS = {
    "fingerprints": "SimHash and exact-hash throughput on real page texts",
    "index": "near-duplicate index at 10^5..10^7 fingerprints",
    "bands": "MinHash LSH band index: inserts, bytes and lookups against the former one-key-per-band layout",
    "crawl": "crawl overhead on the PostgreSQL docs, fetches avoided on a duplicate-heavy site",
    "frontier": "memory of the seen-set at 10^6 URLs",
    "longlived": "SimHash tables of a store after five runs of updates and deletions, against a fresh one",
    "diversify": "query-time dedup of retrieved hits: speed, and BM25 top 5 on a doc site crawled without dedup",
    "chunks": "chunk sizes and per-host boilerplate on real documentation",
    "export": "scrapy dedup export of a large store: documents/s and memory",
    "ingest": "scrapy dedup ingest of doc pages: documents/s with text given and with HTML",
    "settle": "settling a store: documents/s per core (CPU), memory, the incremental settle against the crawl CPU",
    "rag": "shared chunks after page dedup, boilerplate vs trafilatura deduplicate=True, heading spans, CJK pages",
    "extraction": "text kept against trafilatura's full mode, CPU, and merges by J, on Publican (en, ja, ar), Sphinx, javadoc, Doxygen",
    "merge": "merge without loss: the unique text of merged pages retrievable from the export, on git-doc and debian-handbook",
    "redis": "the shared Redis store: frontier vs scrapy-redis, near-duplicate decisions on 1 server and 3 masters",
    "soak": "memory of a long crawl of distinct pages (RSS growth per 10^5 pages) against plain Scrapy",
    "latency": "a crawl's pages/s with its Redis store 1 ms further away (a latency proxy) against 0 ms",
}
#: comparison packages (PyPI name -> import name) the benchmarks need beyond the project's own
#: dependencies; declared in the ``bench`` extra: pip install -e ".[bench]"
COMPARISON_PACKAGES = {"simhash": "simhash", "bm25s": "bm25s", "datasketch": "datasketch"}
TABLE_START, TABLE_END = "<!-- bench-table -->", "<!-- /bench-table -->"


# -- helpers shared by the scripts --------------------------------------------------------


def log(name: str, message: str) -> None:
    print(f"[{name}] {message}", file=sys.stderr, flush=True)


def missing_packages() -> list[str]:
    """Comparison packages that are not installed (their comparisons are skipped)."""
    return [pkg for pkg, module in COMPARISON_PACKAGES.items() if importlib.util.find_spec(module) is None]


def row(
    benchmark: str,
    measure: str,
    dedup: str,
    alternatives: str,
    ratio: str = "",
    target: str = "",
    met: bool | None = None,
) -> dict[str, Any]:
    """One line of the results table. ``met`` is None for figures without a target."""
    return {
        "benchmark": benchmark,
        "measure": measure,
        "scrapy_dedup": dedup,
        "alternatives": alternatives,
        "ratio": ratio,
        "target": target,
        "met": met,
    }


def fmt(x: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, thousands separated."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    magnitude = len(str(int(abs(x)))) if abs(x) >= 1 else 0
    decimals = max(0, digits - magnitude)
    return f"{x:,.{decimals}f}"


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def write_result(name: str, payload: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), **payload}
    path = out / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _status() -> dict[str, int]:
    """VmHWM, VmRSS, RssAnon, RssFile of this process in bytes (Linux)."""
    out = {}
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:  # not Linux: fall back to getrusage's peak
        import resource

        out["VmHWM"] = out["VmRSS"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


class MemoryWatch:
    """Peak memory of this process: VmHWM (all resident pages, including the store's files
    that LevelDB maps into memory) and the peak of RssAnon (private memory only), sampled by
    a thread because the kernel keeps no high-water mark for it.

        with MemoryWatch() as mem: ...
        mem.report()  # {"peak_rss": .., "peak_anon": .., "base_rss": .., "base_anon": ..}
    """

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.base = _status()
        self.peak_anon = self.base.get("RssAnon", self.base["VmRSS"])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        self.peak_anon = max(self.peak_anon, _status().get("RssAnon", 0))

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def report(self) -> dict[str, int]:
        now = _status()
        return {
            "base_rss": self.base["VmRSS"],
            "base_anon": self.base.get("RssAnon", self.base["VmRSS"]),
            "peak_rss": now["VmHWM"],
            "peak_anon": self.peak_anon,
        }


def run_child(argv: list[str], timeout: float | None = None) -> dict[str, Any]:
    """Run ``python argv...`` (a script's child mode); it prints one JSON object last."""
    proc = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem_gb = None
    versions = {}
    for module in ("scrapy", "trafilatura", "plyvel", "numpy", "xxhash", "simhash"):
        try:
            from importlib.metadata import version

            versions[module] = version(module if module != "scrapy" else "Scrapy")
        except Exception:  # noqa: BLE001 -- not installed
            versions[module] = None
    try:
        import plyvel

        versions["leveldb"] = getattr(plyvel, "__leveldb_version__", None)
    except ImportError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_gb, 1) if mem_gb else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": versions,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def machine_line(m: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    load = m.get("load_average")
    load_text = f"; load average at start {load[0]:.1f}" if load else ""
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, {m['os']}, Python {m['python']}; "
        f"{versions}{load_text}"
    )


# -- the table --------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = ["benchmark", "measure", "scrapy-dedup", "alternative(s)", "ratio", "target", "met?"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        cells = [r["benchmark"], r["measure"], r["scrapy_dedup"], r["alternatives"], r["ratio"], r["target"], met]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render(results: dict[str, dict[str, Any]], size: str, when: str) -> str:
    rows = [r for name in results for r in results[name].get("rows", [])]
    first = next(iter(results.values()))
    parts = [
        f"`run_all.py --size {size}` (what `make bench` runs) at {when}, on: {machine_line(first['machine'])}.",
        "",
        markdown_table(rows),
    ]
    notes = [f"- {name}: {note}" for name in results for note in results[name].get("notes", [])]
    if notes:
        parts += ["", "Notes:", "", *notes]
    return "\n".join(parts) + "\n"


def update_readme(table_md: str) -> bool:
    if not README.exists():
        return False
    text = README.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(TABLE_START) + r".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(text):
        return False
    text = pattern.sub(lambda _: f"{TABLE_START}\n{table_md}{TABLE_END}", text)
    README.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default", help="tiny (seconds), default (minutes), large")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory (default benchmarks/results)")
    parser.add_argument("--no-readme", action="store_true", help="do not copy the table into benchmarks/README.md")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")

    missing = missing_packages()
    if missing:
        print(
            "WARNING: comparison package(s) not installed: "
            + ", ".join(missing)
            + ". Their comparisons are skipped and marked in the table.\n"
            "  Install them with:  .venv/bin/pip install -e '.[bench]'   (or: .venv/bin/pip install "
            + " ".join(missing)
            + ")",
            file=sys.stderr,
            flush=True,
        )

    started = time.strftime("%Y-%m-%d %H:%M")
    results: dict[str, dict[str, Any]] = {}
    failures = []
    for name in names:
        script = HERE / f"bench_{name}.py"
        print(f"== {name}: {BENCHMARKS[name]} ({args.size})", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script), "--size", args.size, "--out", str(args.out)], cwd=REPO)
        if proc.returncode != 0:
            failures.append(name)
            print(f"== {name} FAILED (exit {proc.returncode})", file=sys.stderr, flush=True)
            continue
        results[name] = json.loads((args.out / f"{name}.json").read_text(encoding="utf-8"))
        print(f"== {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if not results:
        return 1

    table = render(results, args.size, started)
    latest = {
        "size": args.size,
        "started": started,
        "machine": machine(),
        "missing_packages": missing,
        "failed": failures,
        "benchmarks": results,
        "rows": [r for name in results for r in results[name].get("rows", [])],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(latest, indent=1) + "\n", encoding="utf-8")
    (args.out / "latest.md").write_text(table, encoding="utf-8")
    print(table)
    if not args.no_readme and args.out.resolve() == RESULTS.resolve() and set(names) == set(BENCHMARKS):
        if update_readme(table):
            print(f"(table copied into {README.relative_to(REPO)})", file=sys.stderr)
    if missing:
        print(f"NOTE: skipped comparisons, package(s) missing: {', '.join(missing)} (pip install -e '.[bench]')",
              file=sys.stderr)
    if failures:
        print(f"FAILED: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
