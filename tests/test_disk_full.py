"""The store on a full filesystem: the crawl stops with one clear error, the store stays sound.

The store lives on a 2 MB tmpfs (mounting one needs root, as CI runs) nearly filled up before the
crawl, so that LevelDB's log runs out of room in the middle of the crawl.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from crawl_helpers import StoreView, dedup
from testing import DemoServer, run_crawl

from scrapy_dedup.core.urls import url_key

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")

FREE_KB = 60


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        filler = mount / "filler"
        filler.write_bytes(b"\0" * (2 * 1024 * 1024 - FREE_KB * 1024))
        yield mount, filler
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_stops_the_crawl_cleanly(small_disk, tmp_path):
    mount, filler = small_disk
    store = mount / "store"
    with DemoServer() as server:
        # One request at a time: the disk fills after the same few pages (3 to 5 decided), however
        # loaded the machine is. At 16, the URLs scheduled before the first decision filled it on
        # their own once in a full run, and the guard below failed.
        settings = {"DEDUP_STORE": str(store), "DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1}
        result = run_crawl(server.url + "/", tmp_path / "out", settings)
        host_rules = server.manifest["host_rules"]

    assert result.stat("finish_reason") == "dedup_store_error"
    errors = [line for line in result.log.splitlines() if "] ERROR:" in line]
    assert len(errors) == 1, errors
    assert f"cannot write to the dedup store {str(store)!r}: No space left on device" in errors[0]
    assert "Traceback" not in result.log
    assert result.stat("dedup/error/store_write") >= 1
    assert not [k for k in result.stats if k.startswith("dedup/error/") and k != "dedup/error/store_write"]

    # the full filesystem cannot open the store in place: reports read a copy
    proc = dedup(store, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "consistent"
    assert "no space left to open" in proc.stderr

    filler.unlink()
    proc = dedup(store, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "consistent" and not proc.stderr
    # every item that went on as decided has its record: nothing decided was lost
    view = StoreView(store, host_rules)
    decided = [item for item in result.items if "dedup" in item]
    assert decided
    for item in decided:
        assert url_key(item["url"], host_rules) in view.records
