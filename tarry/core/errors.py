"""Tarry's errors: every error a caller can act on is a `TarryError` with an `ErrorCode`,
never a raw RPC or update error. The ground floor the client, the HTTP API, the CLI and
the action links stand on, and the settings and the command line's help, which raise or
catch it, start without loading any client. How the client turns Temporal's errors into
these: `tarry.client.temporal_errors`.
"""

from __future__ import annotations

from tarry.contracts import ErrorCode

__all__ = ["RetryLater", "TarryError"]


class TarryError(Exception):
    """An error with a structured code, e.g. `RUN_NOT_FOUND` or `INPUT_EMPTY`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class RetryLater(TarryError):
    """A refusal that the same request may not meet after `retry_after` seconds: the
    HTTP API says when, in `Retry-After`."""

    def __init__(self, code: ErrorCode, message: str, retry_after: int) -> None:
        super().__init__(code, message)
        self.retry_after = retry_after
