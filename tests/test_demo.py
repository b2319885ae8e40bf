"""`make demo` as a user runs it: the demo script, twice, on one store."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_demo(tmp_path: Path, port: int) -> str:
    cmd = [
        sys.executable,
        str(ROOT / "example_project" / "run_demo.py"),
        "--port", str(port),
        "--items", str(tmp_path / "items.jsonl"),
        "-s", f"DEDUP_STORE={tmp_path / 'store'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def count(summary: str, label: str) -> int:
    return int(re.search(rf"{label}\s+(\d+)", summary).group(1))


def test_demo_summary_then_incremental_run(tmp_path):
    port = free_port()
    first = run_demo(tmp_path, port)
    assert count(first, "URL repeats dropped before fetch") > 0
    assert count(first, "exact duplicates") > 0
    assert count(first, "near duplicates") > 0
    assert count(first, "documents kept") > 0
    assert "Incremental run" not in first
    second = run_demo(tmp_path, port)
    assert "Incremental run: skipped" in second
    assert count(second, "pages fetched") < count(first, "pages fetched")
    assert count(second, "documents kept") == 0
