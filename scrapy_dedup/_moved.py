"""The old import paths of moved modules: each name read through one is the new module's own,
with a DeprecationWarning that names the new place."""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any


def moved(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that reads each name from the module ``new``."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # dunders the import system and tools probe for
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(new), name)
        # stacklevel 2: the line that read the name (``from old import name`` included)
        warnings.warn(f"{old} is deprecated: import {name} from {new}", DeprecationWarning, stacklevel=2)
        return value

    return __getattr__


def moved_module(old: str, new: str) -> None:
    """Keep the module path ``old`` importable, without a file: a stand-in registered in
    ``sys.modules`` (and on its package) reads each name from ``new``, imported only then, as
    :func:`moved` does. A file left at the old path would make the move a rewrite of that file."""
    stand_in = types.ModuleType(old, f"Deprecated: moved to {new}.")
    vars(stand_in)["__getattr__"] = moved(old, new)
    stand_in = sys.modules.setdefault(old, stand_in)
    package, _, name = old.rpartition(".")
    if package in sys.modules:
        setattr(sys.modules[package], name, stand_in)
