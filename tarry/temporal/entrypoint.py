"""What every entry point does at its start and at its end.

At its start it reads its configuration with `settings_or_exit`: a bad setting, config
file or Temporal profile (a missing certificate) is one line on stderr and exit code 2
(`CONFIG_ERROR_EXIT`), before any connection to Temporal, never a traceback.

At its end it leaves without tripping upstream sdk-python #300: the SDK's Rust core can
abort the interpreter during its normal shutdown (`Fatal Python error:
PyGILState_Release`, exit code 134) after all work is done. Every entry point therefore
flushes what it wrote and leaves through `os._exit`, which skips the interpreter
finalisation where that abort happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from tarry.config.settings import ConfigError, TarrySettings, load_settings
from tarry.temporal.connection import temporal_connection

__all__ = [
    "CONFIG_ERROR_EXIT",
    "exit_now",
    "run_main",
    "settings_or_exit",
]

CONFIG_ERROR_EXIT = 2
"""The exit code of a process refusing its configuration (2: a usage error, as click's)."""


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


def settings_or_exit() -> TarrySettings:
    """The checked settings (`load_settings`), with the Temporal connection checked too
    (`tarry.temporal.connection`: its profile, certificates and keys) and its address and
    namespace resolved, so that whatever names them names the server the process
    connects to. A problem with either ends the process with its one line on stderr and
    `CONFIG_ERROR_EXIT`."""
    try:
        settings = load_settings()
        connection = temporal_connection(settings)
    except ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        exit_now(CONFIG_ERROR_EXIT)
    return settings.model_copy(
        update={
            "temporal_address": connection.address,
            "temporal_namespace": connection.namespace,
        }
    )
