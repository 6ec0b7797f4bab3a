"""Leaving a process that used a Temporal client without tripping upstream sdk-python #300.

The SDK's Rust core can abort the interpreter during its normal shutdown
(`Fatal Python error: PyGILState_Release`, exit code 134) after all work is done.
Every entry point therefore flushes what it wrote and leaves through `os._exit`,
which skips the interpreter finalisation where that abort happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

__all__ = [
    "exit_now",
    "run_main",
]


def exit_now(code: int) -> NoReturn:
    """Flushes logs and standard streams, then ends the process with `code`."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe: nothing more can be written anyway.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def run_main(main: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Runs an async `main` returning an exit code, then exits through `exit_now`."""
    try:
        code = asyncio.run(main())
    except KeyboardInterrupt:
        code = 130
    exit_now(code)
