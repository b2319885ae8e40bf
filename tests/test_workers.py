"""The extraction worker pool's processes (real spawned workers of ExtractionPool)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: a crawl process in miniature: a pool whose workers have started, their pids printed
POOL = """
import asyncio, multiprocessing
from scrapy.utils.reactor import install_reactor
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from scrapy_dedup.crawl.workers import ExtractionPool
pool = ExtractionPool(2)
asyncio.get_event_loop().run_until_complete(pool.run(abs, -1))
print(*(p.pid for p in multiprocessing.active_children() if 'Resource' not in p.name), flush=True)
input()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids: list[int], within: float) -> bool:
    """Whether every process of ``pids`` has exited, waiting for them ``within`` seconds."""
    deadline = time.monotonic() + within
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(pid) for pid in pids)


def _kill(proc: subprocess.Popen, workers: list[int]) -> None:
    """Leave nothing running: the crawl process and whichever of its workers is still alive."""
    proc.kill()
    for pid in workers:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_workers_of_a_killed_crawl_process_exit():
    """SIGKILL of the crawl process alone (no process group), as ``kill -9 PID`` or the OOM
    killer does: its workers ignore SIGTERM and nothing shuts the pool down, yet they go."""
    proc = subprocess.Popen([sys.executable, "-c", POOL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in proc.stdout.readline().split()]
        assert workers and all(_alive(pid) for pid in workers)
        proc.kill()
        proc.wait()
        assert _gone(workers, within=30)
    finally:
        _kill(proc, workers)


#: a crawl process killed while its workers are still starting (importing, warming up): the
#: work is submitted, the workers' pids printed, and the process kills itself at once
POOL_KILLED_EARLY = """
import asyncio, multiprocessing, os, signal
from scrapy.utils.reactor import install_reactor
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from scrapy_dedup.crawl.workers import ExtractionPool
pool = ExtractionPool(2)
loop = asyncio.get_event_loop()
tasks = [loop.create_task(pool.run(abs, -1)) for _ in range(2)]
loop.run_until_complete(asyncio.sleep(0))
print(*(p.pid for p in multiprocessing.active_children() if 'Resource' not in p.name), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_workers_of_a_crawl_process_killed_while_they_start_exit():
    """A crawl process killed before its workers have started (a spawned worker takes seconds to
    import and warm up on a busy machine): they find themselves adopted from the start, and go."""
    proc = subprocess.Popen([sys.executable, "-c", POOL_KILLED_EARLY], stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        workers = [int(pid) for pid in proc.stdout.readline().split()]
        proc.wait()
        assert workers and proc.returncode == -signal.SIGKILL
        assert _gone(workers, within=60)
    finally:
        _kill(proc, workers)


#: Ctrl-C in a terminal while the workers are still starting: the whole process group gets
#: SIGINT, the crawl process (here a handler that notes it) stops gracefully and waits for
#: the work in flight, which the workers must still do
POOL_INTERRUPTED_EARLY = """
import asyncio, os, signal
from scrapy.utils.reactor import install_reactor
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from scrapy_dedup.crawl.workers import ExtractionPool
signal.signal(signal.SIGINT, lambda *_: print("interrupted", flush=True))
pool = ExtractionPool(2)
loop = asyncio.get_event_loop()
tasks = [loop.create_task(pool.run(abs, -1)) for _ in range(2)]
loop.run_until_complete(asyncio.sleep(0))
os.killpg(0, signal.SIGINT)
print(*loop.run_until_complete(asyncio.gather(*tasks)), flush=True)
pool.close()
"""


def test_a_ctrl_c_while_the_workers_start_leaves_them_working():
    """The workers ignore SIGINT from their first instruction, not only once they have imported
    what they run: one that died of a Ctrl-C during its start failed every item in flight and
    printed a KeyboardInterrupt traceback per worker."""
    proc = subprocess.run(
        [sys.executable, "-c", POOL_INTERRUPTED_EARLY], capture_output=True, text=True, timeout=120,
        start_new_session=True,
    )
    assert proc.stdout.split("\n")[:2] == ["interrupted", "1 1"], proc.stderr[-2000:]
    assert "KeyboardInterrupt" not in proc.stderr
