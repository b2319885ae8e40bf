"""The package's import graph, read from the source (every import, at module level, in a
function or under TYPE_CHECKING): no module imports itself back through others, and the
packages import one another in one direction only (docs/contributing.md, "The house")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "scrapy_dedup"

#: what each package may import besides itself: data flows one way, core <- store <- decide <- crawl;
#: reports read the store (and decide's readers), the query side needs the core alone
ALLOWED = {
    "core": set(),
    "extraction": {"core"},
    "store": {"core"},
    "decide": {"core", "extraction", "store"},
    "crawl": {"core", "extraction", "store", "decide"},
    "reports": {"core", "extraction", "store", "decide"},
    "commands": {"core", "extraction", "store", "decide", "crawl", "reports"},
    "query": {"core"},
}


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from pkg import name`` is an edge to the
    submodule pkg.name when there is one, else to pkg."""
    mods = modules(root)
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == top)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package, up level - 1
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] != top:
                    continue
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    deps.add(sub if sub in mods else module)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


#: root modules every package may import: helpers that import nothing of the package
SHARED = {"scrapy_dedup._moved"}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert "scrapy_dedup.core.fingerprints" in graph["scrapy_dedup.query.diversifier"]
    assert "scrapy_dedup.crawl.state" in graph["scrapy_dedup.crawl.pipeline"]
    assert "scrapy_dedup.core.urls" in graph["scrapy_dedup.core"]  # relative: from . import urls


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_a_cycle_is_found(tmp_path):
    pkg = tmp_path / "scrapy_dedup"
    (pkg / "crawl").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "crawl" / "__init__.py").write_text("")
    (pkg / "crawl" / "a.py").write_text("from scrapy_dedup.crawl import b\n")
    (pkg / "crawl" / "b.py").write_text("def f():\n    from scrapy_dedup.crawl.c import g\n")
    (pkg / "crawl" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                        "    from scrapy_dedup.crawl.a import x\n")
    assert cycles(import_graph(pkg)) == [["scrapy_dedup.crawl.a", "scrapy_dedup.crawl.b", "scrapy_dedup.crawl.c"]]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_one_way(package):
    wrong = sorted(
        f"{module} imports {dep}"
        for module, deps in import_graph().items() if package_of(module) == package
        for dep in deps
        if package_of(dep) not in (package, *ALLOWED[package]) and dep not in SHARED
    )
    assert wrong == []


def test_the_shared_helpers_import_nothing_of_the_package():
    graph = import_graph()
    assert {module: graph[module] for module in SHARED} == {module: set() for module in SHARED}


def test_only_the_commands_and_the_documented_paths_import_the_crawl():
    importers = {module for module, deps in import_graph().items()
                 if any(package_of(d) == "crawl" for d in deps) and package_of(module) != "crawl"}
    # the root's documented component paths (scrapy_dedup.addon, ...) re-export from crawl/
    assert {m for m in importers if package_of(m) is not None} == {"scrapy_dedup.commands.dedup"}


#: check/repair and migration: they reach a store through its public methods only
MAINTENANCE = (
    "scrapy_dedup.store.maintenance", "scrapy_dedup.store.leveldb.repair", "scrapy_dedup.store.leveldb.migrate"
)


def private_names(path: Path) -> list[str]:
    """What a module reads of another's private names: ``from m import _x``, and ``obj._x`` on
    anything but ``self``/``cls``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            found += [f"from {node.module} import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_private_names_are_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from scrapy_dedup.store.leveldb import _x\n\ndef f(store, self):\n"
                      "    return store._db, self._mine, store.__class__\n")
    assert private_names(module) == ["from scrapy_dedup.store.leveldb import _x", "line 4: store._db"]


@pytest.mark.parametrize("module", MAINTENANCE)
def test_check_repair_and_migrate_use_the_stores_public_methods(module):
    assert private_names(modules()[module]) == []


def shared_reads(root: Path = PACKAGE) -> list[str]:
    """Where a module outside ``store/`` reads whether a store is shared (``store.shared``, or
    ``getattr(store, "shared", ...)``): "module:line" of each. Every backend serves the crawl and
    the decisions by one path; what differs between backends is a store method that says what
    to do (``claim_pending``, ``held_pending``, ``writing_elsewhere``...), not a branch."""
    found = []
    for name, path in modules(root).items():
        if package_of(name) == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "shared":
                found.append(f"{name}:{node.lineno}")
            elif (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == "shared"
            ):
                found.append(f"{name}:{node.lineno}")
    return sorted(found)


def test_only_the_store_knows_whether_it_is_shared():
    assert shared_reads() == []


def test_a_read_of_shared_outside_the_store_is_found(tmp_path):
    pkg = tmp_path / "scrapy_dedup"
    for sub in ("crawl", "decide", "store"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "crawl" / "a.py").write_text("def f(state):\n    return state.store.shared and 1\n")
    (pkg / "decide" / "b.py").write_text("def g(store):\n    return getattr(store, 'shared', False)\n")
    (pkg / "store" / "c.py").write_text("class S:\n    shared = True\n\ndef h(s):\n    return s.shared\n")
    (pkg / "dupefilter.py").write_text("import x\nif x.y.shared:\n    pass\n")
    assert shared_reads(pkg) == ["scrapy_dedup.crawl.a:2", "scrapy_dedup.decide.b:2", "scrapy_dedup.dupefilter:2"]
