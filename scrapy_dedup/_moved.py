"""The old import paths of moved modules: each name read through one is the new module's own,
with a DeprecationWarning that names the new place."""

from __future__ import annotations

import importlib
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
