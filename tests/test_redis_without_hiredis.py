"""The Redis store with redis-py alone: hiredis is optional, as the ``redis`` extra says.

scrapy-redis installs ``redis`` without hiredis, so a scrapy-redis user who adds scrapy-dedup
runs the store on redis-py's own parser. A virtualenv of its own (the test venv has hiredis)
holds the project without hiredis and the newest redis-py; redis-py 5, the oldest the extra
allows, sits beside it in a directory put first on the path for the second crawl. Each crawls
the demo site into a real redis-server and must end complete.

The virtualenv is built once and kept in ``.venv-nohiredis`` (ignored by git), rebuilt when
pyproject.toml changes: about 30 s the first time, nothing after.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from testing import demo_server, run_crawl  # noqa: F401 - demo_server is a fixture

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-nohiredis"
#: the oldest redis-py the ``redis`` extra allows, installed beside the newest
OLDEST = "redis==5.0.*"


def _pip(python: Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *args], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"pip install {' '.join(args)} failed:\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="session")
def nohiredis():
    """(python of a virtualenv with the project and the newest redis-py but no hiredis, a
    directory holding redis-py 5 to put first on its path)."""
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + sys.version.encode()).hexdigest()[:16]
    python, oldest, stamp = VENV / "bin" / "python", VENV / "redis-oldest", VENV / f".installed-{key}"
    if not stamp.exists():
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        # the project's own dependencies (no extra: no hiredis), then redis-py alone
        _pip(python, "-e", str(ROOT))
        _pip(python, "--upgrade", "redis")
        _pip(python, "--target", str(oldest), OLDEST)
        stamp.touch()
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util, redis; print(redis.__version__, importlib.util.find_spec('hiredis'))"],
        capture_output=True, text=True, timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[1] == "None", "hiredis must not be installed in the venv"
    return python, oldest


def _version(python: Path, path: str) -> str:
    proc = subprocess.run([str(python), "-c", "import redis; print(redis.__version__)"], capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": path})
    return proc.stdout.strip()


@pytest.mark.parametrize("redis_py", ["newest", "oldest"])
def test_a_crawl_on_redis_without_hiredis_ends_complete(nohiredis, redis_py, demo_server, tmp_path, redis_single,
                                                        monkeypatch):
    python, oldest = nohiredis
    path = str(oldest) if redis_py == "oldest" else ""
    monkeypatch.setenv("PYTHONPATH", path)
    version = _version(python, path)
    assert version.startswith("5.0.") if redis_py == "oldest" else int(version.split(".")[0]) >= 8, version
    result = run_crawl(
        demo_server.url + "/", tmp_path,
        {"DEDUP_STORE": redis_single.url, "DEDUP_REDIS_PREFIX": f"test:{uuid.uuid4().hex[:12]}", "DEDUP_WORKERS": 1},
        python=str(python), timeout=300,
    )
    assert "Traceback" not in result.log
    assert "closed, run 1: complete" in result.log
    assert len(result.items) > 10
    assert result.stat("dedup/doc/new") > 10
