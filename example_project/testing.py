"""Test helpers for crawling the demo site; importable by any test module.

    sys.path.insert(0, str(REPO / "example_project"))
    from testing import demo_server, run_crawl      # demo_server is a pytest fixture

    def test_something(demo_server, tmp_path):
        result = run_crawl(demo_server.url + "/", tmp_path, {"DEDUP_HOST_RULES": {...}})
        result.items, result.stats["downloader/response_count"], demo_server.counts()

Each crawl runs ``scrapy crawl`` in a subprocess (a Twisted reactor runs only once
per process) while the DemoServer keeps running in the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from demo_server import DEMO_SITE, DemoServer, fill, load_manifest  # noqa: F401 - re-exported

EXAMPLE_PROJECT = Path(__file__).resolve().parent
DEDUP_ADDON = "scrapy_dedup.Addon"


@pytest.fixture
def demo_server():
    """A running DemoServer (variant v1, free port); set ``.variant = "v2"`` to re-crawl."""
    with DemoServer() as server:
        yield server


@dataclass
class CrawlResult:
    items: list[dict]
    stats: dict[str, Any]  # final crawler stats; datetimes as ISO strings
    log: str  # the crawl's stderr (Scrapy log)
    returncode: int
    out_dir: Path

    @property
    def urls(self) -> list[str]:
        return [item["url"] for item in self.items]

    def stat(self, key: str, default: Any = 0) -> Any:
        return self.stats.get(key, default)

    def stats_with_prefix(self, prefix: str) -> dict[str, Any]:
        """``{"tracking": 3, ...}`` for ``prefix="dedup/url/dropped/"``."""
        return {key[len(prefix):]: value for key, value in self.stats.items() if key.startswith(prefix)}


def _setting(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_crawl(
    start_url: str,
    out_dir: str | Path,
    settings: dict[str, Any] | None = None,
    *,
    dedup: bool = True,
    spider: str = "site",
    spider_args: dict[str, str] | None = None,
    timeout: float = 300,
    check: bool = True,
    python: str = sys.executable,
) -> CrawlResult:
    """Run ``scrapy crawl <spider>`` in the example project and return its items and stats.

    Files go to ``out_dir``: items.jsonl (overwritten), stats.json, crawl.log, and the
    dedup store ``out_dir/store`` unless ``settings`` has DEDUP_STORE (None = the
    project default, .scrapy/dedup/<spider>). Re-using ``out_dir`` re-uses the store,
    which is how re-crawls are tested. Non-string setting values are passed as JSON
    (read them with ``settings.getdict()``/``getlist()``). ``python``: the interpreter to run it
    with (another virtualenv's). ``dedup=False`` sets
    ``ADDONS={}`` (plain Scrapy). With ``check`` a failed crawl raises AssertionError
    with the end of the log.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    items_path, stats_path = out_dir / "items.jsonl", out_dir / "stats.json"
    stats_path.unlink(missing_ok=True)
    all_settings: dict[str, Any] = {"DEDUP_STORE": str(out_dir / "store"), "DEMO_STATS_FILE": str(stats_path)}
    if not dedup:
        all_settings["ADDONS"] = {}
    all_settings.update(settings or {})
    cmd = [python, "-m", "scrapy", "crawl", spider, "-a", f"start_url={start_url}", "-O", str(items_path)]
    for name, value in (spider_args or {}).items():
        cmd += ["-a", f"{name}={value}"]
    for name, value in all_settings.items():
        if value is not None:
            cmd += ["-s", f"{name}={_setting(value)}"]
    env = dict(os.environ, SCRAPY_SETTINGS_MODULE="demo_project.settings")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLE_PROJECT), env.get("PYTHONPATH")]))
    proc = subprocess.run(cmd, cwd=EXAMPLE_PROJECT, env=env, capture_output=True, text=True, timeout=timeout)
    (out_dir / "crawl.log").write_text(proc.stderr, encoding="utf-8")
    stats = json.loads(stats_path.read_text("utf-8")) if stats_path.exists() else {}
    items = []
    if items_path.exists():
        items = [json.loads(line) for line in items_path.read_text("utf-8").splitlines() if line.strip()]
    result = CrawlResult(items, stats, proc.stderr, proc.returncode, out_dir)
    if check and (proc.returncode != 0 or not stats):
        tail = "\n".join(proc.stderr.splitlines()[-40:])
        raise AssertionError(f"crawl failed (exit {proc.returncode}, stats written: {bool(stats)}):\n{tail}")
    return result
