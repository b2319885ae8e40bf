"""Sphinx configuration of the scrapy-dedup manual (``make docs``)."""

from __future__ import annotations

import sys
from importlib.metadata import version as _version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "scrapy-dedup"
author = "the scrapy-dedup developers"
copyright = "the scrapy-dedup developers"
release = _version("scrapy-dedup")
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    # scrapy dedup's subcommands rendered from its argument parser; the setting role
    "dedup_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
# [text](#heading) links inside a page and [text](page.md#heading) across pages
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "furo"
html_title = f"scrapy-dedup {release}"
