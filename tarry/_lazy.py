"""A package's face whose names are imported on first use (PEP 562): `import tarry` and
`import tarry.testing` load nothing, and a caller pays only for the names it uses."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence


def lazy_face(package: str, homes: Mapping[str, Sequence[str]]) -> Callable[[str], object]:
    """The `__getattr__` of `package`, whose names each live in one module of `homes`
    (module: its names): a name's module is imported on the name's first use, and the
    name kept in the package, so the next use is a plain lookup."""
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> object:
        if (module := home_of.get(name)) is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
