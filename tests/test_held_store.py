"""A store another process holds: the error names the store, the holder and how to find it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from scrapy_dedup.store.base import StoreLocked
from scrapy_dedup.store.leveldb import LevelDBStore

HOLD = textwrap.dedent(
    """
    import sys, time
    from scrapy_dedup.store.leveldb import LevelDBStore
    store = LevelDBStore(sys.argv[1], {})
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    store.close()
    """
)


@pytest.fixture
def held(tmp_path):
    path = str(tmp_path / "store")
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, path, "--the-holders-arguments"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "holding"
        yield path, proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_the_message_names_the_store_and_its_holder(held):
    path, proc = held
    with pytest.raises(StoreLocked) as error:
        LevelDBStore(path, {})
    message = str(error.value)
    assert repr(path) in message
    assert f"held by pid {proc.pid} on " in message
    assert "--the-holders-arguments" in message
    assert f"fuser -v {os.path.join(path, 'LOCK')}" in message and "lsof" in message
    with pytest.raises(StoreLocked, match=f"pid {proc.pid}"):
        LevelDBStore.open_existing(path)


def test_the_command_line_says_it_too(held):
    path, proc = held
    result = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "summary", "--store", path, "--no-snapshot"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert f"held by pid {proc.pid}" in result.stderr and "fuser -v" in result.stderr


def test_the_holder_file_goes_with_the_holder(tmp_path):
    path = str(tmp_path / "store")
    with LevelDBStore(path, {}):
        assert os.path.exists(os.path.join(path, "HOLDER"))
    assert not os.path.exists(os.path.join(path, "HOLDER"))
    # a holder file left by a killed process does not stop the next one
    with open(os.path.join(path, "HOLDER"), "w") as f:
        f.write('{"pid": 1, "host": "gone", "command": "killed", "since": "then"}')
    with LevelDBStore(path, {}) as store:
        assert store.run == 0


def test_the_holders_command_line_is_the_one_it_was_started_with(tmp_path):
    """Scrapy takes the command's name out of ``sys.argv`` (``scrapy crawl site`` leaves ``scrapy
    site``): the message said a command line nobody typed."""
    script = tmp_path / "scrapy_like.py"
    script.write_text("import sys\nsys.argv.pop(1)  # as scrapy.cmdline does with the command's name\n" + HOLD)
    path = str(tmp_path / "store")
    proc = subprocess.Popen(
        [sys.executable, str(script), "crawl", path, "-a", "x=1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "holding"
        with pytest.raises(StoreLocked) as error:
            LevelDBStore(path, {})
        assert f"({script} crawl {path} -a x=1)" in str(error.value)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
