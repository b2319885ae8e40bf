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


class MovedMethod:
    """A method that became a function taking its object first: ``obj.name(*args)`` (and
    ``Class.name(obj, *args)``) calls ``name(obj, *args)`` of the module ``new``, imported only
    then, with a DeprecationWarning that names it. A descriptor, not a method: the class's
    interface no longer lists it."""

    def __init__(self, owner: str, name: str, new: str, first: str) -> None:
        self.owner, self.name, self.new, self.first = owner, name, new, first

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        function = getattr(importlib.import_module(self.new), self.name)
        warnings.warn(
            f"{self.owner}.{self.name} is deprecated: call {self.new}.{self.name}({self.first}, ...)",
            DeprecationWarning,
            stacklevel=2,
        )
        return function if obj is None else types.MethodType(function, obj)
