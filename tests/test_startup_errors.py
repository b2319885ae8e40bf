"""A crawl that cannot start says why in one line that names the setting or the path.

Each test runs ``scrapy crawl`` in a subprocess, in a Scrapy project made in tmp_path the way
``scrapy startproject`` lays one out (a spider that yields ``{url, title, html}``), and reads
its stderr: one ERROR line, no traceback, a non-zero exit status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_site import LocalSite

SPIDER = """
import scrapy

class PagesSpider(scrapy.Spider):
    name = "pages"

    def __init__(self, start_url=None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start_urls = [start_url]

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get(), "html": response.text}
"""

#: runs Scrapy's command line in a process that cannot import ``redis``: the import fails for
#: real (a finder in front of sys.meta_path refuses it), as on a machine without the package
WITHOUT_REDIS = """
import sys

class RefuseRedis:
    def find_spec(self, name, path=None, target=None):
        if name == "redis" or name.startswith("redis."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, RefuseRedis())
from scrapy.cmdline import execute
sys.argv = ["scrapy", *sys.argv[1:]]
execute()
"""


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    (root / "proj" / "spiders").mkdir(parents=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (root / "proj" / "__init__.py").write_text("")
    (root / "proj" / "spiders" / "__init__.py").write_text("")
    (root / "proj" / "spiders" / "pages.py").write_text(SPIDER)
    (root / "proj" / "settings.py").write_text(
        'BOT_NAME = "proj"\nSPIDER_MODULES = ["proj.spiders"]\nADDONS = {"scrapy_dedup.Addon": 500}\n'
        "TELNETCONSOLE_ENABLED = False\nLOG_LEVEL = 'INFO'\n"
    )
    return root


@pytest.fixture(scope="module")
def site():
    page = b"<html><head><title>One</title></head><body><p>" + b"A page about one thing. " * 40 + b"</p></body></html>"
    with LocalSite(lambda path: (200, {}, page)) as served:
        yield served


def crawl(project: Path, site: LocalSite, settings: dict[str, str], *, without_redis: bool = False,
          spider: str = "pages"):
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    command = [sys.executable, "-c", WITHOUT_REDIS] if without_redis else [sys.executable, "-m", "scrapy"]
    command += ["crawl", spider, "-a", f"start_url={site.url}/"]
    for name, value in {"DEDUP_STORE": str(project / "store"), **settings}.items():
        command += ["-s", f"{name}={value}"]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=120)


def one_error(proc: subprocess.CompletedProcess, *names: str) -> str:
    """The one ERROR line of a crawl that failed to start; it names each of ``names``."""
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, errors
    assert "scrapy-dedup cannot start: " in errors[0]
    for name in names:
        assert name in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("DEDUP_MAX_DISTANCE", "9"),
        ("DEDUP_EXTRACT_MODE", "fast"),
        ("DEDUP_MIN_JACCARD", "many"),
        ("DEDUP_HOST_RULES", '{"example.com": 5}'),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting(project, site, setting, value):
    one_error(crawl(project, site, {setting: value}), setting)


def test_a_misspelt_setting_is_a_warning_with_the_one_meant(project, site):
    proc = crawl(project, site, {"DEDUP_MAX_DISTANSE": "5"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if " WARNING: " in line and "DEDUP_" in line]
    assert len(warnings) == 1, warnings
    assert "DEDUP_MAX_DISTANSE" in warnings[0] and "did you mean DEDUP_MAX_DISTANCE?" in warnings[0]
    assert "Traceback" not in proc.stderr


def test_a_store_path_that_is_a_file(project, site, tmp_path):
    path = tmp_path / "store-file"
    path.write_text("not a store")
    one_error(crawl(project, site, {"DEDUP_STORE": str(path)}), "DEDUP_STORE", str(path))
    assert path.read_text() == "not a store"


@pytest.mark.parametrize("where", ["under a file", "under /proc"])
def test_a_store_path_nobody_can_write(project, site, tmp_path, where):
    # CI runs as root, who writes anywhere a mode allows: these are places root cannot make a
    # directory in either (a regular file is no directory; /proc takes no new entries)
    if where == "under a file":
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        path = blocker / "store"
    else:
        path = Path("/proc/scrapy-dedup-test/store")
    one_error(crawl(project, site, {"DEDUP_STORE": str(path)}), "DEDUP_STORE", str(path))


def test_a_redis_store_without_the_redis_package(project, site):
    url = "redis://crawler:hunter2@127.0.0.1:1/0"
    proc = crawl(project, site, {"DEDUP_STORE": url}, without_redis=True)
    line = one_error(proc, "DEDUP_STORE", "No module named 'redis'", "pip install 'scrapy-dedup[redis]'")
    assert "hunter2" not in proc.stderr, line


def store_meta(path: Path) -> dict:
    """The store's metadata records: the run count, what keys and text were made with, the job."""
    from scrapy_dedup.store.base import META
    from scrapy_dedup.store.open import open_existing

    store = open_existing(str(path))
    try:
        return dict(store.scan(META))
    finally:
        store.close()


def test_a_store_another_spider_left_interrupted(project, tmp_path):
    """One DEDUP_STORE for a project's spiders: a crawl of another spider resumed the requests
    the interrupted crawl of the first owed (their pages crawled, and emitted, as its own); it
    fails at start instead, and the first spider resumes its crawl."""

    def reply(path: str):
        links = "".join(f'<a href="/{i}">{i}</a> ' for i in range(8))
        return 200, {}, f"<html><body><p>Page {path}: {'words of a page ' * 30}</p>{links}</body></html>".encode()

    (project / "proj" / "spiders" / "linked.py").write_text(
        "from proj.spiders.pages import PagesSpider\n\n"
        "class LinkedSpider(PagesSpider):\n"
        "    name = 'linked'\n\n"
        "    def parse(self, response):\n"
        "        yield from super().parse(response)\n"
        "        yield from response.follow_all(css='a')\n\n"
        "class OtherSpider(LinkedSpider):\n"
        "    name = 'other'\n"
    )
    with LocalSite(reply) as links_site:
        first = crawl(project, links_site, {"CLOSESPIDER_PAGECOUNT": "1", "CONCURRENT_REQUESTS": "1"}, spider="linked")
        assert "interrupted: " in first.stderr, first.stderr[-2000:]
        before = store_meta(project / "store")
        # with another extraction setting: a refused start records nothing of it
        refused = crawl(project, links_site, {"DEDUP_EXTRACT_TABLES": "False"}, spider="other")
        error = one_error(refused, str(project / "store"), "'linked'", "'other'")
        assert "scrapy crawl linked" in error
        assert store_meta(project / "store") == before
        resumed = crawl(project, links_site, {}, spider="linked")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming the pending requests" in resumed.stderr and ": complete" in resumed.stderr
