"""How Tarry's long-running processes (`tarry worker`, `tarry dev`, `python -m workers`) log.

The SDK logs every failed activity attempt with its full traceback. For the failures
Tarry raises on purpose, an `ApplicationError` with one of its error codes (a model
profile that does not exist, a provider's 429), the traceback only buries the one line
that matters: such records keep their message and that line, and lose the traceback.
Anything else (a bug) keeps its traceback.
"""

from __future__ import annotations

import logging

from temporalio.exceptions import ApplicationError

from tarry.contracts import ErrorCode

__all__ = [
    "FORMAT",
    "ExpectedFailures",
    "configure_command_logging",
    "configure_logging",
]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ExpectedFailures(logging.Filter):
    """Shortens a record of an expected failure to one line (see the module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ApplicationError) and error.type in set(ErrorCode):
            record.msg = f"{record.getMessage()}: {error.type}: {error.message}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


class _Line(logging.Formatter):
    """`warning: message`, like a command's own `error: ...` lines."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def configure_command_logging() -> None:
    """How a one-shot command (`tarry start`, `tarry send`) logs: what the client warns
    of, such as a start whose tool check waits for a worker none polls for, is one
    line on standard error, and nothing below a warning is."""
    logging.basicConfig(level=logging.WARNING, handlers=[command_log_handler()])


def command_log_handler() -> logging.Handler:
    """A one-shot command's log lines (`warning: message`) on standard error, as it is
    when this is called: apart so that a command run inside a process that goes on (as
    the tests run most) logs its lines where its own standard error is."""
    handler = logging.StreamHandler()
    handler.setFormatter(_Line())
    return handler


def configure_logging(level: int = logging.INFO) -> None:
    """Logs to standard error, one line per expected failure."""
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ExpectedFailures())
