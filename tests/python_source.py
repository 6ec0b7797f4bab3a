"""Python source parsed for the suite's checks of its own code (deadlines, layers, tiers,
the compatibility ledger), with the garbage collector held off meanwhile.

CPython 3.11 can fail `ast.parse` with "SystemError: AST constructor recursion depth
mismatch" when a finalizer runs Python code while the tree is built (cpython gh-106905).
In the suite, a test process holds what earlier tests left for the collector (an
a2a-sdk server's tasks, destroyed pending, log as they go), so a check of the test files
failed once that way in a whole run."""

from __future__ import annotations

import ast
import gc

__all__ = ["parsed"]


def parsed(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source)`, with no collection, and so no finalizer, while it runs."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if collecting:
            gc.enable()
