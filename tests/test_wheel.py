"""The release: ``python -m build`` makes an sdist and a wheel (the wheel from the sdist), the
wheel holds every file of the package, and a venv with only the wheel installed (not editable, no
source tree on its path) crawls a local site and reads its store with ``scrapy dedup``.

The venv (``.venv-wheel``) is kept between runs with the wheel's dependencies; the package itself
is reinstalled from the new wheel each time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from local_site import LocalSite

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-wheel"
PYTHON = VENV / "bin" / "python"


def source_files(*under: str) -> list[str]:
    """The files of the checkout git knows of (tracked, or new and not ignored), else every file
    on disk but caches and build output."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", *under],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        listed = []
    if listed:
        return sorted(f for f in listed if (ROOT / f).is_file())
    skip = {"__pycache__", ".git", ".venv", ".venv-oldest", ".venv-wheel", "build", "dist", "_build"}
    base = [ROOT / u for u in under] or [ROOT]
    return sorted(
        p.relative_to(ROOT).as_posix()
        for b in base
        for p in b.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(ROOT).parts) and ".egg-info" not in p.as_posix()
    )


def package_files() -> list[str]:
    return source_files("scrapy_dedup")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    # built from a copy of the checkout: no egg-info or build/ left by an earlier build can add a file
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    # --no-isolation: the build backend comes from the test extra, so no download is needed
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (sdist,), (wheel,) = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    return {"sdist": sdist, "wheel": wheel}


def test_wheel_holds_every_package_file(dist):
    from scrapy_dedup import __version__

    assert dist["wheel"].name == f"scrapy_dedup-{__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    expected = package_files()
    assert "scrapy_dedup/store/redis/functions.lua" in expected and "scrapy_dedup/py.typed" in expected
    assert [f for f in expected if f not in names] == []
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert any(n.endswith("licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    meta = zipfile.ZipFile(dist["wheel"]).read(metadata).decode()
    assert f"Version: {__version__}" in meta and "Requires-Dist: scrapy>=2.13" in meta


def test_sdist_holds_the_package_and_the_release_files(dist):
    with tarfile.open(dist["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = [f for f in [*package_files(), "LICENSE", "README.md", "pyproject.toml"] if f not in names]
    assert missing == []


SPIDER = '''
import scrapy


class Site(scrapy.Spider):
    name = "site"
    custom_settings = {
        "ADDONS": {"scrapy_dedup.Addon": 500},
        "DEDUP_WORKERS": 1,
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, start_url, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.page)

    def page(self, response):
        yield {"url": response.url, "html": response.text}
'''


def article(title: str, words: str) -> bytes:
    body = " ".join(f"{words} sentence {i} of the article about {title}." for i in range(12))
    return f"<html><head><title>{title}</title></head><body><nav>Home</nav><article><h1>{title}</h1><p>{body}</p></article></body></html>".encode()


PAGES = {
    "/": b'<html><body><a href="/a.html">a</a> <a href="/a.html?utm_source=x">a again</a> '
    b'<a href="/mirror/a.html">mirror</a> <a href="/b.html">b</a></body></html>',
    "/a.html": article("Vacuum", "reclaiming storage occupied by dead tuples"),
    "/mirror/a.html": article("Vacuum", "reclaiming storage occupied by dead tuples"),
    "/b.html": article("Analyze", "collecting statistics about the contents of tables"),
}


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_installed_wheel_crawls(dist, tmp_path):
    if not PYTHON.exists():
        assert run([sys.executable, "-m", "venv", str(VENV)], ROOT).returncode == 0
    # the package from the wheel (replacing the one a run before installed), then what it needs
    wheel = str(dist["wheel"])
    for args in (["--force-reinstall", "--no-deps", wheel], [f"{wheel}[redis]"]):
        proc = run([str(PYTHON), "-m", "pip", "install", "--quiet", *args], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]

    check = run([str(PYTHON), "-c", (
        "import scrapy_dedup, scrapy_dedup.store.redis.functions as f, sys;"
        "print(scrapy_dedup.__file__); print(scrapy_dedup.__version__); print(f.LIBRARY_VERSION)"
    )], tmp_path)
    assert check.returncode == 0, check.stderr[-3000:]
    where, version, library = check.stdout.split()
    assert Path(where).is_relative_to(VENV) and "site-packages" in where, where  # not the source tree
    from scrapy_dedup import __version__

    assert version == __version__ and int(library) > 0  # the Lua library was read from the wheel

    (tmp_path / "site_spider.py").write_text(SPIDER, encoding="utf-8")
    store = tmp_path / "store"
    with LocalSite(lambda path: (200, {}, PAGES[path]) if path in PAGES else (404, {}, b"")) as site:
        crawl = run([
            str(VENV / "bin" / "scrapy"), "runspider", "site_spider.py", "-a", f"start_url={site.url}/",
            "-s", f"DEDUP_STORE={store}", "-O", "items.jsonl",
        ], tmp_path)
    assert crawl.returncode == 0, crawl.stderr[-3000:]
    items = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text(encoding="utf-8").splitlines()]
    # the tracking variant is dropped before the fetch, the mirror as an exact copy: two documents
    # (the mirror may come first and be superseded by /a.html, the representative, upserted by id)
    documents = {i["dedup"]["document_id"]: i["url"].split("/", 3)[3] for i in items}
    assert sorted(documents.values()) == ["a.html", "b.html"]
    # the one a later, better copy supersedes is emitted again as that copy
    assert {i["dedup"]["status"] for i in items} <= {"new", "exact_duplicate"}
    assert "'dedup/doc/exact_duplicate': 1" in crawl.stderr and "'dedup/url/dropped/seen': 1" in crawl.stderr

    provenance = run([str(VENV / "bin" / "scrapy"), "dedup", "provenance", "--store", str(store), "--format", "jsonl"], tmp_path)
    assert provenance.returncode == 0, provenance.stderr[-3000:]
    reasons = {json.loads(line)["url"].split("/", 3)[3]: json.loads(line)["reason"] for line in provenance.stdout.splitlines()}
    assert reasons["mirror/a.html"] == "exact_content" and reasons["a.html"] is None
