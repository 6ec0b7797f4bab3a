"""What every `tarry` command shares: connecting, the one-line errors, the output.

Every command that prints data takes `--json` for scripts: plain JSON on stdout, never
colour. Errors are one line on stderr (`error: CODE: message`) and a non-zero exit,
never a traceback. Connection settings come from the environment and the Temporal
profile (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_PROFILE`, ...: see
`tarry.temporal.connection`) and `TARRY_TASK_QUEUE`, as for every Tarry process; a bad setting,
config file or certificate is refused before anything starts, and a TLS handshake the
server refuses ends the command, both with exit code 2.
The command modules (`runs`, `watching`, `approvals`, `model`, `local`, `serve`) use
only this layer to do so, so every command fails and prints alike.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from rich.console import Console, RenderableType
from temporalio.service import RPCError

from tarry.cli.render import print_stop_line
from tarry.config.logs import configure_command_logging
from tarry.config.settings import ConfigError, TarrySettings
from tarry.contracts import ErrorCode, Phase, RunState, run_id_problem
from tarry.core.errors import TarryError
from tarry.core.text import shorten
from tarry.temporal.codec import EncryptionKeyError
from tarry.temporal.connection import ConnectError
from tarry.temporal.entrypoint import CONFIG_ERROR_EXIT, settings_or_exit

if TYPE_CHECKING:
    from tarry.client import RunHandle, Tarry

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)

console = Console(highlight=False)


class Panel(StrEnum):
    """The groups `tarry --help` shows the commands in: one per command module."""

    RUNS = "Runs"
    WATCHING = "Watching runs"
    APPROVALS = "Approvals and budget"
    MODEL = "Model"
    LOCAL = "Local stack"
    SERVERS = "Servers"
    SCHEDULES = "Schedules"
    EVALUATION = "Evaluation"
    MEMORY = "Memory"


RunId = Annotated[
    str, typer.Argument(metavar="RUN", help="The run id, as `tarry start` printed it.")
]
Message = Annotated[
    str, typer.Argument(metavar="TEXT", help="The message; `-` reads it from standard input.")
]
FLAG = ""
"""The metavar of an on/off option: typer would show `<bool>`, as if it took a value."""
AsJson = Annotated[
    bool, typer.Option("--json", metavar=FLAG, help="Print plain JSON instead of text.")
]


class CliError(Exception):
    """A failure this command line diagnoses itself, with what to do about it."""


# --- Running a command: connect, run, turn errors into one line ---------------------


def fail(message: str, exit_code: int = 1) -> NoReturn:
    """Ends the command with `message` as its one error line."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(exit_code)


RUN_BUSY_ADVICE = (
    "the agent is working; try again when it waits, or start the run with"
    " --on-reply-while-running queue"
)
"""What `RUN_BUSY` tells a person at the command line: the run's own message names the
API's field, not the option."""


LIMITS_REFUSALS = frozenset(
    {ErrorCode.MODEL_NOT_ALLOWED, ErrorCode.BUDGET_NOT_ALLOWED, ErrorCode.TOO_MANY_RUNS}
)
"""Refusals by the config's `[limits]`: they exit 2, as a bad setting does, not 1, as a
run's state may (a script tells them apart: `TOO_MANY_RUNS` passes once a run ends)."""


def run_command(main: Coroutine[Any, Any, T]) -> T:
    """Runs a command's async body; every error a person can act on becomes one line."""
    try:
        return asyncio.run(main)
    except TarryError as e:
        if e.code is ErrorCode.RUN_BUSY:
            fail(f"{e.code}: {RUN_BUSY_ADVICE}")
        fail(f"{e.code}: {e.message}", 2 if e.code in LIMITS_REFUSALS else 1)
    except (CliError, EncryptionKeyError) as e:
        fail(str(e))
    except ConnectError as e:
        fail(str(e), e.exit_code)
    except ConfigError as e:  # a Temporal profile's file that changed since the start
        fail(str(e), CONFIG_ERROR_EXIT)
    except RPCError as e:
        fail(f"{e.status.name}: {e.message}")
    except ValidationError as e:
        fail(shorten(str(e), 300))
    except TimeoutError:
        fail("timed out waiting for the run")
    except OSError as e:
        fail(str(e))


async def connect(settings: TarrySettings) -> Tarry:
    """A client of the settings' server. One that refuses or is not there is a
    `ConnectError` that says what to do (`tarry.temporal.connection`); one that hangs, too.
    The client is imported here, by the commands that connect: `tarry --help`, an
    argument's error and the commands that need no server start without it."""
    from tarry.client import Tarry

    try:
        async with asyncio.timeout(settings.tarry_connect_timeout):
            return await Tarry.connect(settings)
    except TimeoutError:
        raise ConnectError(
            f"cannot reach Temporal at {settings.temporal_address} (no answer in "
            f"{settings.tarry_connect_timeout:g} s); start it with `tarry dev` or set "
            "TEMPORAL_ADDRESS (or a longer TARRY_CONNECT_TIMEOUT)"
        ) from None


def with_tarry(action: Callable[[Tarry], Awaitable[T]]) -> T:
    """Runs `action` with a client of the environment's server, as a command's body."""
    configure_command_logging()
    settings = settings_or_exit()

    async def connected() -> T:
        return await action(await connect(settings))

    return run_command(connected())


def with_run(run_id: str, action: Callable[[RunHandle], Awaitable[T]]) -> T:
    """Runs `action` on run `run_id`, its id checked first, as a command's body."""
    check_id(run_id)
    return with_tarry(lambda tarry: action(tarry.get(run_id)))


def check_id(run_id: str | None) -> None:
    """A run id checked before anything connects (`run_id_problem`, the one rule), so a
    bad one is its own error even with no server to reach."""
    if run_id is not None and (problem := run_id_problem(run_id)):
        fail(f"{ErrorCode.RUN_ID_INVALID}: {problem}", exit_code=2)


# --- Input --------------------------------------------------------------------------


def read(text: str) -> str:
    """The text itself, or standard input for `-` (without its final newline)."""
    return sys.stdin.read().rstrip("\r\n") if text == "-" else text


def one_of(option: str, value: str, choices: type[E]) -> E:
    """An option's value among `choices`, any case, checked here rather than by typer so
    a typo is one plain line, like every error."""
    by_name = {choice.lower(): choice for choice in choices}
    if (chosen := by_name.get(value.lower())) is None:
        fail(f"unknown {option} {value!r}; use one of {', '.join(choices)}", exit_code=2)
    return chosen


# --- Output -------------------------------------------------------------------------


def emit(data: Any) -> None:
    """One JSON document on its own line: no colour, no wrapping, flushed at once so a
    reader of `watch --json` sees each message as it comes."""
    sys.stdout.write(json.dumps(to_jsonable_python(data)) + "\n")
    sys.stdout.flush()


def output(data: Any, as_json: bool, view: RenderableType) -> None:
    """`data` as JSON for scripts, or its rich `view` for people."""
    if as_json:
        emit(data)
    else:
        console.print(view)


def stop_point(state: RunState, run_id: str, *, as_json: bool = False) -> None:
    """Where `send`, `approve`, `retry` and `watch` leave the run `run_id`: its state as
    JSON or its stop line (whose commands and connect links name the run); a failed run
    is an error, on stderr with a non-zero exit, as for any error."""
    if as_json:
        emit(state)
    elif state.phase is not Phase.FAILED:
        print_stop_line(console, state, run_id=run_id)
    fail_if_failed(state)


def fail_if_failed(state: RunState) -> None:
    """A failed run ends the command with its error as the one error line."""
    if state.phase is Phase.FAILED:
        error = state.error
        fail(f"run failed: {error.code}: {error.message}" if error else "run failed")
