"""Every dotted path the manual documents resolves, to the object the code uses; the manual's
layout tree is the package's tree; every request meta key the code uses is documented."""

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from scrapy_dedup.crawl.addon import Addon
from scrapy_dedup.crawl.downloadermw import DedupDownloaderMiddleware
from scrapy_dedup.crawl.dupefilter import DedupDupeFilter
from scrapy_dedup.crawl.pending import PendingDownloaderMiddleware, PendingSpiderMiddleware
from scrapy_dedup.crawl.pipeline import DedupPipeline
from scrapy_dedup.crawl.settings import DEFAULTS
from scrapy_dedup.crawl.spidermw import DedupSpiderMiddleware
from scrapy_dedup.store.base import STORE_FORMAT, DedupStore
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.memory import MemoryStore
from scrapy_dedup.store.redis.keys import LAYOUT
from scrapy_dedup.store.redis.store import RedisStore

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def manual_text() -> str:
    """The README and every page of the manual, as one text."""
    pages = sorted(p for p in DOCS.rglob("*") if p.suffix in (".md", ".rst") and "_build" not in p.parts)
    return "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *pages])

#: the documented path -> the object it must be (not a copy: isinstance checks and the add-on rely on it)
DOCUMENTED = {
    "scrapy_dedup.Addon": Addon,
    "scrapy_dedup.addon.Addon": Addon,
    "scrapy_dedup.dupefilter.DedupDupeFilter": DedupDupeFilter,
    "scrapy_dedup.spidermw.DedupSpiderMiddleware": DedupSpiderMiddleware,
    "scrapy_dedup.downloadermw.DedupDownloaderMiddleware": DedupDownloaderMiddleware,
    "scrapy_dedup.pipeline.DedupPipeline": DedupPipeline,
    "scrapy_dedup.crawl.pending.PendingSpiderMiddleware": PendingSpiderMiddleware,
    "scrapy_dedup.crawl.pending.PendingDownloaderMiddleware": PendingDownloaderMiddleware,
    "scrapy_dedup.store.leveldb.LevelDBStore": LevelDBStore,
    "scrapy_dedup.store.memory.MemoryStore": MemoryStore,
    "scrapy_dedup.store.redis.store.RedisStore": RedisStore,
    # the store interface and the store's format numbers (docs: how it works, contributing)
    "scrapy_dedup.store.base.DedupStore": DedupStore,
    "scrapy_dedup.store.base.STORE_FORMAT": STORE_FORMAT,
    "scrapy_dedup.store.redis.keys.LAYOUT": LAYOUT,
}


def documented_paths() -> set[str]:
    # dotted paths to a class: a module path, then a capitalised name
    return set(re.findall(r"\bscrapy_dedup(?:\.[a-z_]+)*\.[A-Z]\w*", manual_text()))


def test_the_manual_documents_only_paths_this_test_knows():
    paths = documented_paths()
    assert paths, "the manual names no dotted path"
    assert paths <= set(DOCUMENTED), sorted(paths - set(DOCUMENTED))


@pytest.mark.parametrize("path", sorted(DOCUMENTED))
def test_documented_path_is_the_object_in_use(path):
    assert load_object(path) is DOCUMENTED[path]


def test_default_store_backend_is_the_leveldb_store():
    assert load_object(DEFAULTS["DEDUP_STORE_BACKEND"]) is LevelDBStore


def addon_settings(**user):
    settings = Settings()
    for name, value in user.items():
        settings.set(name, value, "project")
    Addon().update_settings(settings)
    return settings


def ours(components, cls):
    return [c for c in components if isinstance(load_object(c), type) and issubclass(load_object(c), cls)]


@pytest.mark.parametrize(
    ("setting", "cls"),
    [
        ("ITEM_PIPELINES", DedupPipeline),
        ("DOWNLOADER_MIDDLEWARES", DedupDownloaderMiddleware),
        ("SPIDER_MIDDLEWARES", DedupSpiderMiddleware),
    ],
)
@pytest.mark.parametrize("spelling", ["class", "documented path", "module path"])
def test_addon_installs_a_component_once_however_it_is_listed(setting, cls, spelling):
    given = {
        "class": cls,
        "documented path": f"scrapy_dedup.{cls.__module__.rsplit('.', 1)[1]}.{cls.__name__}",
        "module path": f"{cls.__module__}.{cls.__name__}",
    }[spelling]
    settings = addon_settings(**{setting: {given: 123}})
    components = settings.getdict(setting)
    assert ours(components, cls) == [given]
    assert components[given] == 123  # the user's priority stands


def test_addon_keeps_a_component_the_user_disabled():
    settings = addon_settings(ITEM_PIPELINES={DedupPipeline: None})
    assert settings.getdict("ITEM_PIPELINES") == {DedupPipeline: None}


def test_addon_installs_every_component_when_none_is_listed():
    settings = addon_settings(ITEM_PIPELINES={"scrapy.pipelines.images.ImagesPipeline": 1})
    assert len(ours(settings.getdict("ITEM_PIPELINES"), DedupPipeline)) == 1
    assert len(ours(settings.getdict("SPIDER_MIDDLEWARES"), DedupSpiderMiddleware)) == 1
    assert len(ours(settings.getdict("DOWNLOADER_MIDDLEWARES"), DedupDownloaderMiddleware)) == 1
    assert load_object(settings["DUPEFILTER_CLASS"]) is DedupDupeFilter


def test_addon_recognises_a_subclass_as_its_component():
    class MyPipeline(DedupPipeline):
        pass

    settings = addon_settings(ITEM_PIPELINES={MyPipeline: 300})
    assert settings.getdict("ITEM_PIPELINES") == {MyPipeline: 300}


def documented_layout() -> set[str]:
    """The files and folders the "Layout of the code" tree (docs/contributing.md) lists, as paths."""
    text = (DOCS / "contributing.md").read_text(encoding="utf-8")
    block = text[text.index("**Layout of the code.**"):]
    block = block[block.index("```text\n") + 8:]
    block = block[: block.index("```")]
    paths, parents = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        parents[depth:] = [name.rstrip("/")]
        paths.add("/".join(parents))
    return paths


def test_documented_layout_is_the_tree():
    root = ROOT
    package = root / "scrapy_dedup"
    tree = {"scrapy_dedup"}
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(root)
        tree.add(relative.as_posix())
        tree.update(parent.as_posix() for parent in relative.parents if parent.as_posix() != ".")
    listed = documented_layout()
    assert sorted(tree - listed) == [], "in the tree, not in docs/contributing.md"
    assert sorted(listed - tree) == [], "in docs/contributing.md, not in the tree"


def test_every_request_meta_key_the_code_uses_is_documented():
    package = ROOT / "scrapy_dedup"
    used = set()
    for path in package.rglob("*.py"):
        used |= set(re.findall(r"""["'](dont_dedup|dedup_[a-z_]+)["']""", path.read_text(encoding="utf-8")))
    text = (DOCS / "items-and-stats.md").read_text(encoding="utf-8")
    table = text[text.index("## Request meta keys"):]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    # "dedup" is the item field and "dedup_store_error" a finish reason, not meta keys
    used -= {"dedup_store_error"}
    assert used - {"dedup"} and used <= documented, sorted(used - documented)
    assert documented <= used, sorted(documented - used)


def test_a_moved_module_keeps_its_old_path():
    import importlib
    import sys

    import scrapy_dedup.store
    from scrapy_dedup._moved import moved_module
    from scrapy_dedup.store import open as store_open

    old = "scrapy_dedup.store.not_here_any_more"
    moved_module(old, "scrapy_dedup.store.open")
    try:
        module = importlib.import_module(old)
        assert module is sys.modules[old] is scrapy_dedup.store.not_here_any_more
        with pytest.warns(DeprecationWarning, match=f"^{old} is deprecated: import open_store from scrapy_dedup.store.open$"):
            assert module.open_store is store_open.open_store
        with pytest.warns(DeprecationWarning):
            assert load_object(f"{old}.DEFAULT_BACKEND") == store_open.DEFAULT_BACKEND
        with pytest.raises(AttributeError):
            module.__wrapped__  # noqa: B018 - the import system's probes get no warning and no value
    finally:
        sys.modules.pop(old, None)
        vars(scrapy_dedup.store).pop("not_here_any_more", None)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("scrapy_dedup.store.redis_store.RedisStore", "scrapy_dedup.store.redis.store"),
        ("scrapy_dedup.store.redis_keys.LAYOUT", "scrapy_dedup.store.redis.keys"),
        ("scrapy_dedup.store.redis_functions.RetryPolicy", "scrapy_dedup.store.redis.functions"),
        ("scrapy_dedup.store.redis_wire.FunctionsMissing", "scrapy_dedup.store.redis.wire"),
    ],
)
def test_the_redis_modules_old_paths_still_work(old, new):
    """Settings and imports written before the Redis modules moved into store/redis/."""
    name = old.rpartition(".")[2]
    with pytest.warns(DeprecationWarning, match=f"^{old.rpartition('.')[0]} is deprecated: import {name} from {new}$"):
        assert load_object(old) is load_object(f"{new}.{name}")
