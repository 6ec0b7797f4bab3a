"""The `tarry` command line for tests, against the test server and served by the test's
in-process worker: run in this process through Typer's `CliRunner` (`Cli.__call__`,
`ok`, `start`), or as the installed entry point's own process (`Cli.spawn`,
`Cli.process`) where the process is what a test specifies: Ctrl-C, a terminal, standard
input read as it comes, output read while the command runs, the exit at interpreter
shutdown (sdk-python #300).

In this process a command runs in a thread of its own, since it calls `asyncio.run`
and the test's event loop (and its worker) must go on meanwhile; with the environment it
would have as a process, and its log lines on its own standard error."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client
from typer.testing import CliRunner

from activities.tool_calls import Tool, tool
from tarry.cli.app import run
from tarry.client import RunHandle
from tarry.config.logs import command_log_handler
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline

TARRY = Path(sys.executable).parent / "tarry"
CLOSED_PORT = "127.0.0.1:1"
LIST_HEADER = ["run", "phase", "turns", "profile", "waiting", "for", "started", "summary"]
"""The words of `tarry list`'s header line."""


def cli_env(address: str, task_queue: str) -> dict[str, str]:
    """This environment without Tarry's or Temporal's settings, pointed at the test server."""
    return connected_env({"TEMPORAL_ADDRESS": address}, task_queue)


def connected_env(connection: dict[str, str], task_queue: str) -> dict[str, str]:
    """This environment without Tarry's or Temporal's settings, connecting with the
    `TEMPORAL_*` variables of `connection`. Its connect timeout scales with the suite's
    deadlines: on a busy machine a TLS handshake alone can take longer than 5 s."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OPENAI_", "TARRY_", "TEMPORAL_"))
    }
    ours = {"TARRY_TASK_QUEUE": task_queue, "TARRY_CONNECT_TIMEOUT": str(deadline(5))}
    return env | connection | ours | {"NO_COLOR": "1"}


def agent_env(agent: Agent) -> dict[str, str]:
    """The environment of a command line that `agent`'s worker serves."""
    return cli_env(agent.tarry.client.service_client.config.target_host, agent.tarry.task_queue)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def assert_one_error_line(self, starting: str) -> None:
        """Failed with one line on stderr that starts with `starting`, and no traceback."""
        assert self.code != 0, self.out
        assert len(self.err.splitlines()) == 1, self.err
        assert self.err.startswith(starting), self.err
        assert "Traceback" not in self.out + self.err


@dataclass
class Cli:
    """Runs `tarry` commands with `env` as their whole environment; awaiting one keeps
    the test's worker serving."""

    env: dict[str, str]
    agent: Agent

    @classmethod
    def of(cls, agent: Agent, **env: str) -> Cli:
        """The command line that `agent`'s worker serves, with `env` besides."""
        return cls(agent_env(agent) | env, agent)

    async def __call__(self, *args: str, stdin: str = "") -> Result:
        """The command run in this process, `stdin` its whole standard input."""
        return await asyncio.to_thread(invoke, self.env, args, stdin)

    async def spawn(self, *args: str) -> asyncio.subprocess.Process:
        """The command as its own process, for a test to talk to while it runs."""
        return await asyncio.create_subprocess_exec(
            str(TARRY),
            *args,
            env=self.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def process(self, *args: str, stdin: str = "") -> Result:
        """The command run as its own process, to its end."""
        return await finish(await self.spawn(*args), stdin)

    async def ok(self, *args: str, stdin: str = "") -> str:
        """Standard output of a command that must succeed quietly."""
        result = await self(*args, stdin=stdin)
        assert (result.code, result.err) == (0, ""), result
        return result.out

    async def start(self, *args: str, stdin: str = "") -> RunHandle:
        """`tarry start --json ...`; the run joins the agent's runs for the replay check."""
        run_id = json.loads(await self.ok("start", "--json", *args, stdin=stdin))["run_id"]
        run = self.agent.tarry.get(run_id)
        self.agent.runs.append(run)
        return run


_ONE_AT_A_TIME = threading.Lock()
"""A command in this process has the process's standard streams and environment to
itself while it runs (`CliRunner` swaps them): two at once would mix theirs."""


def invoke(env: dict[str, str], args: tuple[str, ...], stdin: str) -> Result:
    """Runs `tarry *args` in this thread as the entry point runs it (`tarry.cli.app.run`),
    with `env` as its whole environment."""
    overrides: dict[str, str | None] = {name: None for name in os.environ if name not in env}
    overrides.update(env)
    # A command left running by a test that timed out must not hang every later one.
    if not _ONE_AT_A_TIME.acquire(timeout=TIMEOUT):
        raise TimeoutError("another command still runs in this process")
    try:
        with (
            CliRunner().isolation(input=stdin, env=overrides) as (out, err, _),
            _command_logging(),
        ):
            code = run(args)
            sys.stdout.flush()
            sys.stderr.flush()
            return Result(code, out.getvalue().decode(), err.getvalue().decode())
    finally:
        _ONE_AT_A_TIME.release()


@contextmanager
def _command_logging() -> Iterator[None]:
    """The log lines a command process writes on its standard error (`tarry.config.logs`): here
    only this thread's, since the test's worker logs in the same process meanwhile. Its
    own `logging.basicConfig` does nothing here, where pytest's handlers are already on
    the root logger."""
    handler = command_log_handler()
    handler.setLevel(logging.WARNING)
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


async def finish(process: asyncio.subprocess.Process, stdin: str = "") -> Result:
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout=deadline(60))
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


@dataclass
class Gate:
    """A tool that blocks until the test opens it: a run held mid-turn, without sleeps."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    def tool(self) -> Tool:
        async def gate() -> str:
            """Waits for the test."""
            self.entered.set()
            await self.opened.wait()
            return "opened"

        return tool(gate)


async def until_listed(client: Client, query: str, run_id: str) -> None:
    """Visibility trails history by a moment; wait until `query` finds the run."""
    query = f"{query} AND WorkflowId = '{run_id}'"
    async with asyncio.timeout(deadline(10)):
        # Visibility has no change notification to wait on.
        while not (await client.count_workflows(query)).count:
            await asyncio.sleep(0.05)
