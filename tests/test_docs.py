"""The manual in docs/ says what the code does: every setting with its default, every stat key,
every subcommand, the version and the store format; the release files are where users look."""

from __future__ import annotations

import ast
import re
from importlib.metadata import version
from pathlib import Path
from types import FunctionType

import scrapy_dedup
from scrapy_dedup.commands.dedup import SUBCOMMANDS
from scrapy_dedup.crawl.settings import DEFAULTS
from scrapy_dedup.store.base import STORE_FORMAT, DedupStore, StoreBatch
from scrapy_dedup.store.redis.keys import LAYOUT

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "scrapy_dedup"


def package_sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


# -- settings ---------------------------------------------------------------------------------

ENTRY = re.compile(
    r"^\.\. setting:: (?P<name>\w+)\n\n(?P=name)\n\^+\n\n:Type: (?P<type>.+)\n:Default: ``(?P<default>[^`]*)``",
    re.M,
)


def documented_settings() -> dict[str, str]:
    """name -> the default as the settings reference writes it (a Python literal)."""
    text = (DOCS / "settings.rst").read_text(encoding="utf-8")
    entries = {m["name"]: m["default"] for m in ENTRY.finditer(text)}
    # an entry this pattern cannot read (a missing Type or Default) is an error too
    targets = re.findall(r"^\.\. setting:: (\w+)$", text, re.M)
    assert sorted(entries) == sorted(targets), "an entry without its heading, :Type: or :Default:"
    return entries


def test_every_setting_has_one_entry_with_its_default():
    documented = documented_settings()
    assert sorted(set(DEFAULTS) - set(documented)) == [], "settings without an entry in docs/settings.rst"
    assert sorted(set(documented) - set(DEFAULTS)) == [], "entries of settings the code does not have"
    wrong = {name: (written, DEFAULTS[name]) for name, written in documented.items() if ast.literal_eval(written) != DEFAULTS[name]}
    assert wrong == {}, "documented default != the code's default"


def test_every_dedup_setting_named_in_the_code_is_documented():
    named = set()
    for text in package_sources().values():
        named |= set(re.findall(r"\bDEDUP_[A-Z_]*[A-Z]\b", text))
    assert named, "no DEDUP_ name found in the package"
    # the misspelling unknown_settings' doctest answers with "did you mean"
    named.discard("DEDUP_MAX_DISTANSE")
    assert sorted(named - set(documented_settings())) == []


def test_each_entry_has_an_example():
    text = (DOCS / "settings.rst").read_text(encoding="utf-8")
    for block in re.split(r"^\.\. setting:: ", text, flags=re.M)[1:]:
        name = block.split("\n", 1)[0]
        assert "Example::" in block, name


# -- stats --------------------------------------------------------------------------------------

STAT_GROUPS = ("url", "doc", "canonical", "frontier", "chunks", "settle", "error")


def code_stat_patterns() -> set[str]:
    """Every stat key the crawl counts, as regular expressions (an f-string's field matches any part)."""
    groups = "|".join(STAT_GROUPS)
    literal = re.compile(r"""(?:\bf)?["'](?:dedup/)?((?:""" + groups + r""")/[a-z_/{}.\[\]]+)["']""")
    keys = set()
    for path, text in package_sources().items():
        if "crawl" in path.parts:
            keys |= {m for m in literal.findall(text) if not m.endswith("/")}
    return {re.sub(r"\\\{[^}]*\\\}", "[a-z_]+", re.escape(k)) for k in keys}


def documented_stats() -> set[str]:
    text = (DOCS / "items-and-stats.md").read_text(encoding="utf-8")
    table = text[text.index("## Stats") : text.index("\n## ", text.index("## Stats") + 1)]
    keys = set()
    for row in re.findall(r"^\| (.+?) \| .+ \|$", table, re.M):
        cells = re.findall(r"`([^`]+)`", row)
        prefix = ""
        for cell in cells:
            if cell.startswith("dedup/"):
                prefix = cell.rsplit("/", 1)[0] + "/"
                keys.add(cell)
            elif cell.startswith(".../"):
                keys.add(prefix + cell[4:])
            else:  # `dedup/doc/new`, `updated`, ...: the same group
                keys.add(prefix + cell)
    return {k[len("dedup/"):] for k in keys}


def test_every_stat_key_the_code_counts_is_documented():
    patterns = code_stat_patterns()
    # a documented key with a placeholder (`dedup/error/<where>`) stands for any name there
    documented = {re.sub(r"<[a-z]+>", "x", k) for k in documented_stats()}
    assert len(patterns) > 30 and len(documented) > 30, (sorted(patterns), sorted(documented))
    missing = sorted(p for p in patterns if not any(re.fullmatch(p, k) for k in documented))
    assert missing == [], "counted by the code, not in the stats table"
    unknown = sorted(k for k in documented if not any(re.fullmatch(p, k) for p in patterns))
    assert unknown == [], "in the stats table, counted nowhere in the code"


def test_each_place_an_internal_error_is_counted_is_documented():
    """``dedup/error/<where>``: every ``where`` the crawl counts is one word, listed in the row."""
    where = set()
    for path, text in package_sources().items():
        if "crawl" in path.parts:
            where |= set(re.findall(r"""\b_?failed\(\s*["']([^"']+)["']""", text))
    row = next(line for line in (DOCS / "items-and-stats.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `dedup/error/<where>` |"))
    listed = set(re.findall(r"`([a-z_]+)`", row.split(" | ", 1)[1]))
    assert len(where) > 10 and all(re.fullmatch(r"[a-z_]+", w) for w in where), sorted(where)
    assert where == listed - {"undecided"}


# -- commands ---------------------------------------------------------------------------------


def test_every_subcommand_is_rendered_from_the_parser():
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    rendered = re.findall(r"^```\{dedup-command\} (\w+)$", text, re.M)
    assert sorted(rendered) == sorted(SUBCOMMANDS), "one dedup-command directive per subcommand"


# -- version, store format, release files -------------------------------------------------------


def test_version_is_the_metadata_version():
    assert scrapy_dedup.__version__ == version("scrapy-dedup")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\nversion = "{scrapy_dedup.__version__}"\n' in pyproject


def test_changelog_has_this_version_and_its_store_format():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")

    def section(heading: str) -> str:
        text = changelog[changelog.index(heading) :]
        return text[: text.index("\n## [", 1)]

    # a format or layout changed since the last release is named under [Unreleased] until then
    unreleased = section("## [Unreleased]")
    named = unreleased if "Store format" in unreleased else section(f"## [{scrapy_dedup.__version__}]")
    assert f"Store format {STORE_FORMAT}" in named and f"`{LAYOUT}`" in named


def test_store_format_table_names_this_version_and_format():
    page = (DOCS / "how-it-works.md").read_text(encoding="utf-8")
    table = page[page.index("## Store format and versions") :]
    version = re.escape(scrapy_dedup.__version__)
    # the first row: this version's, or the unreleased one's when the layout changed since
    row = re.search(rf"^\| (?:{version}|unreleased) \| (\d+) \| .* \| `([^`]+)` \|$", table, re.M)
    assert row, "no row for this version in the store format table"
    assert (int(row[1]), row[2]) == (STORE_FORMAT, LAYOUT)


def test_code_and_docs_agree_on_the_leveldb_format():
    docstring = (PACKAGE / "store" / "leveldb" / "store.py").read_text(encoding="utf-8")
    assert f"Key layout (format {STORE_FORMAT}," in docstring


def test_release_files():
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert 'license = "BSD-3-Clause"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert (PACKAGE / "py.typed").exists()


def test_readme_is_the_pitch_and_links_to_the_manual():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert 'ADDONS = {"scrapy_dedup.Addon": 500}' in readme and "make demo" in readme and "make test" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


def protocol(cls: type) -> list[str]:
    """The public methods a class defines (properties and class methods included): the store
    protocol a backend implements or inherits. An old name kept with a deprecation (a
    descriptor, not a method) is not one of them."""
    kinds = (FunctionType, property, classmethod, staticmethod)
    return sorted(name for name, value in vars(cls).items() if not name.startswith("_") and isinstance(value, kinds))


def test_the_readme_counts_the_store_protocol():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = re.search(r"^\| `DedupStore` / `StoreBatch` public methods \| [^|]+ \| (\d+) / (\d+) \|", readme, re.M)
    assert row, "the README's Inside table counts the store's public methods"
    assert (int(row[1]), int(row[2])) == (len(protocol(DedupStore)), len(protocol(StoreBatch)))
    assert "frontier_mark_many" in protocol(DedupStore) and "get_url" not in protocol(DedupStore)


def test_the_readme_counts_the_redis_backend_lines():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = re.search(r"^\| Redis backend, Python \+ Lua lines \| [^|]+ \| ([\d,]+) \|", readme, re.M)
    assert row, "the README's Inside table counts the Redis backend's lines"
    files = sorted((ROOT / "scrapy_dedup" / "store" / "redis").glob("*.py")) + sorted(
        (ROOT / "scrapy_dedup" / "store" / "redis").glob("*.lua"))
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in files)
    assert int(row[1].replace(",", "")) == lines


def test_the_readme_gives_each_memory_bound_the_code_has():
    from scrapy_dedup.core import hostrules
    from scrapy_dedup.crawl import sources
    from scrapy_dedup.decide import chunk_layer, frontier
    from scrapy_dedup.store.leveldb import packed_tables
    from scrapy_dedup.store.redis import store as redis_store

    bounds = {
        "SCHEDULED_KEPT": frontier.SCHEDULED_KEPT,
        "MAX_SOURCES": sources.MAX_SOURCES,
        "_CACHE_LIMIT": hostrules._CACHE_LIMIT,
        "WAITING_MAX": redis_store.WAITING_MAX,
        "BOILERPLATE_GROUPS_KEPT": chunk_layer.BOILERPLATE_GROUPS_KEPT,
        "SIMHASH_SPEC": (packed_tables.SIMHASH_SPEC.l0_max, packed_tables.SIMHASH_SPEC.l1_max),
        "BANDS_SPEC": (packed_tables.BANDS_SPEC.l0_max, packed_tables.BANDS_SPEC.l1_max),
    }
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = {name: tuple(int(n.replace(",", "")) for n in value.split(" + "))
            for name, value in re.findall(r"`([A-Z_]+)` = ([\d,]+(?: \+ [\d,]+)?)", readme)}
    assert said == {name: bound if isinstance(bound, tuple) else (bound,) for name, bound in bounds.items()}
    assert f"`DEDUP_STORE_CACHE_MB` ({DEFAULTS['DEDUP_STORE_CACHE_MB']}:" in readme


#: the words the code uses that must each mean one thing (docs/glossary.md)
GLOSSARY_TERMS = ("page", "document", "URL record", "alias", "representative", "cluster", "member",
                  "provisional", "settled", "owed request", "hold", "canonical URL", "rel=canonical target",
                  "canonical text", "near duplicate", "exact duplicate", "fingerprint", "chunk", "scope",
                  "authority", "frontier")


def test_glossary_defines_each_word_once():
    text = (DOCS / "glossary.md").read_text(encoding="utf-8")
    block = text[text.index("```{glossary}") :]
    terms = re.findall(r"^(\S.*)$", block[block.index("\n") + 1 : block.rindex("```")], re.M)
    assert len(terms) == len(set(terms))
    assert set(GLOSSARY_TERMS) <= set(terms), sorted(set(GLOSSARY_TERMS) - set(terms))
