"""Render ``scrapy dedup report --html`` in headless Chromium and save a screenshot.

    .venv/bin/python scripts/screenshot_report.py                  # crawl the demo site first
    .venv/bin/python scripts/screenshot_report.py --store PATH     # an existing store

Writes the HTML page and a PNG of it (default: build/report.html, build/report.png)
so that a person can look at the report before a release.  Needs Debian's chromium
(``apt-get install -y chromium``) or ``CHROMIUM=/path/to/chrome``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "example_project"

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def crawl_demo(work: Path) -> Path:
    """Crawl the demo site into ``work`` and return the store's path."""
    sys.path.insert(0, str(EXAMPLE))
    from testing import DemoServer, run_crawl

    with DemoServer() as server:
        run_crawl(server.url + "/", work, {"DEDUP_HOST_RULES": server.manifest["host_rules"]})
    return work / "store"


def render_report(store: Path, html: Path) -> None:
    html.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "scrapy", "dedup", "report", "--store", str(store.resolve()), "--html", str(html)]
    subprocess.run(cmd, check=True, cwd=tempfile.gettempdir())


def screenshot(html: Path, png: Path, width: int, height: int) -> None:
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found: apt-get install -y chromium, or set CHROMIUM=/path/to/chrome")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            f"--window-size={width},{height}",
            html.resolve().as_uri(),
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, help="the store to report on (default: crawl the demo site)")
    parser.add_argument("--html", type=Path, default=REPO / "build" / "report.html")
    parser.add_argument("--png", type=Path, default=REPO / "build" / "report.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="scrapy-dedup-demo-") as work:
        store = args.store or crawl_demo(Path(work))
        render_report(store, args.html)
    args.png.parent.mkdir(parents=True, exist_ok=True)
    screenshot(args.html, args.png, args.width, args.height)
    print(f"{args.html}\n{args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
