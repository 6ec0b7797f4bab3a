"""The tour, run as a person runs it from the README's "Five minutes with the
CLI": `tarry dev` in one terminal, then the tour's shell commands one by one in another,
read from the README itself, so a README that drifts from the code fails here. Offline:
the model is `tarry dev`'s own, playing the built-in tour script over real HTTP."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from activities.workspaces import make_workspace
from tarry.cli import tour
from tarry.client import Tarry
from tarry.contracts import ChatMessage, ErrorCode, Phase, RunState, ToolResult, WaitingFor
from tests.deadline import deadline
from tests.test_devstack import (
    Ports,
    assert_nothing_left,
    client_of,
    interrupt,
    read_until,
    stack_env,
)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
COMMAND_TIMEOUT = deadline(60)
ASSIGNMENT = re.compile(r"(?:export )?(?P<name>[A-Za-z_]\w*)=\$\((?P<command>.+)\)$")
"""`RUN=$(tarry start ...)`: a command whose output the later commands use (`export X=$(...)`:
the commands they run too; each line of a tour runs in a shell of its own, with them)."""
TOLD = {"start", "watch", "send", "approve", "budget"}
"""The commands the tour is about, which the tests below follow."""


def shell_commands(markdown: str) -> list[list[str]]:
    """Each ```sh block of `markdown` as its lines that hold a command (neither blank nor
    only a comment)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)
    return [[line for line in block.splitlines() if _command(line)] for block in blocks]


def _command(line: str) -> str:
    """The line without its comment (`shlex` knows a `#` inside quotes is no comment)."""
    return shlex.join(shlex.split(line, comments=True))


def readme_tour() -> tuple[list[str], list[str]]:
    """The README tour's two blocks: the stack's terminal, and the tour's commands."""
    text = README.read_text()
    section = text.split("## Five minutes with the CLI", 1)[1]
    section = re.split(r"^##+ ", section, maxsplit=1, flags=re.MULTILINE)[0]
    stack, commands = shell_commands(section)
    return stack, commands


def verb(command: str) -> str:
    """The `tarry` command a tour line runs: `approve` for `tarry approve $RUN`."""
    if found := ASSIGNMENT.match(command):
        command = found["command"]
    words = shlex.split(command, comments=True)
    assert words[0] == "tarry", command
    return words[1]


@dataclass(frozen=True)
class Step:
    command: str
    output: str
    state: RunState
    """The run's state once the command returned."""
    in_the_inbox: list[str]
    """The runs the inbox lists as waiting for an approval then (`GET /v1/runs`)."""


@dataclass(frozen=True)
class Tour:
    run_id: str
    steps: list[Step]
    transcript: list[ChatMessage]
    """The run's whole transcript once the tour is over."""
    workspace: Path

    def step(self, name: str) -> Step:
        """The tour's `tarry NAME` command, what it printed and the run's state after it."""
        (step,) = [s for s in self.steps if verb(s.command) == name]
        return step

    def after(self, name: str) -> RunState:
        return self.step(name).state


async def shell(command: str, env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """One line of a tour through bash, as typed in a terminal; its exit code and output.
    An assignment (`RUN=$(...)`) sets its variable in `env` for the lines after it."""
    assigned = ASSIGNMENT.match(command)
    script = f'{command}\nprintf %s "${assigned["name"]}"' if assigned else command
    process = await asyncio.create_subprocess_exec(
        "bash", "-ec", script,
        env=env, cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
    output = out.decode()
    assert process.returncode is not None
    if assigned and process.returncode == 0:
        env[assigned["name"]] = output
    return process.returncode, output


async def run_command(command: str, env: dict[str, str], cwd: Path) -> str:
    """A tour line that must succeed (`shell`); its output."""
    code, output = await shell(command, env, cwd)
    assert code == 0, f"{command}\n{output}"
    return output


@dataclass(frozen=True)
class Dev:
    """A `tarry dev` a tour runs beside: the environment its commands run in, and a
    client of its Temporal server to look at the runs with."""

    env: dict[str, str]
    tarry: Tarry
    api: str
    banner: list[str]
    """What `tarry dev` printed up to "Ctrl-C to stop"."""


@asynccontextmanager
async def tarry_dev(home: Path, bin_dir: Path, command: str) -> AsyncIterator[Dev]:
    """`command` (`tarry dev ...`, from a guide) started in `home` on free ports, with
    `tarry` the one in `bin_dir` (this venv's, or a venv the built wheel was installed
    into); Ctrl-C'd at the end, checked to exit 0 and leave nothing behind."""
    ports = Ports()
    env = stack_env(ports, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with (home / "dev.stderr").open("wb") as stderr:
        dev = await asyncio.create_subprocess_exec(
            *shlex.split(command, comments=True),
            env=env, cwd=home,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )  # fmt: skip
    try:
        banner = await read_until(dev, "Ctrl-C to stop", home / "dev.stderr")
        yield Dev(env, Tarry(await client_of(ports)), f"http://127.0.0.1:{ports.api}", banner)
        assert await interrupt(dev) == 0, (home / "dev.stderr").read_text()
    finally:
        if dev.returncode is None:
            dev.kill()
            await dev.wait()
    await assert_nothing_left(ports, home / ".tarry", set())


async def play_readme_tour(home: Path, bin_dir: Path) -> Tour:
    """The README's tour, played as a person plays it: `tarry dev` started as its first
    block says, then every command of its second block, each checked to exit 0, with the
    run's state after each."""
    stack, commands = readme_tour()
    assert [_command(line) for line in stack] == ["tarry dev"]
    async with (
        tarry_dev(home, bin_dir, stack[0]) as dev,
        httpx.AsyncClient(base_url=dev.api) as inbox,
    ):
        steps = []
        for command in commands:
            output = await run_command(command, dev.env, home)
            state = await dev.tarry.get(dev.env["RUN"]).state()
            listed = await inbox.get("/v1/runs", params={"waiting_for": "approval"})
            waiting = [run["id"] for run in listed.json()["runs"]]
            steps.append(Step(command, output, state, waiting))
        run_id = dev.env["RUN"]
        transcript = await dev.tarry.get(run_id).transcript()
    return Tour(run_id, steps, transcript, home / ".tarry" / "workspaces" / run_id)


@pytest.fixture(scope="module")
async def played(tmp_path_factory: pytest.TempPathFactory) -> Tour:
    """The README's tour, played once for the tests below with this venv's `tarry`."""
    return await play_readme_tour(tmp_path_factory.mktemp("tour"), Path(sys.executable).parent)


def tool_calls(transcript: list[ChatMessage]) -> list[str]:
    return [call.function.name for m in transcript for call in m.tool_calls or []]


def test_the_readme_tour_starts_a_run_replies_approves_and_raises_its_budget() -> None:
    _, commands = readme_tour()

    verbs = [verb(command) for command in commands]

    assert [v for v in verbs if v in TOLD] == ["start", "watch", "send", "approve", "budget"]


async def test_the_agent_lists_the_workspace_and_reads_the_seeded_notes(played: Tour) -> None:
    watched = played.after("watch")
    listed, read, *_ = [
        ToolResult.model_validate_json(m.content or "")
        for m in played.transcript
        if m.role == "tool"
    ]

    assert watched.waiting_for is WaitingFor.INPUT
    assert tool_calls(played.transcript)[:2] == ["list_files", "read_file"]
    assert listed.data == ["notes.md", "todo.md"]
    assert read.data == (tour.WORKSPACE / "notes.md").read_text()
    assert "Who should take it?" in (watched.last_assistant_text or "")


async def test_the_reply_brings_a_write_that_waits_for_approval(played: Tour) -> None:
    sent = played.after("send")

    assert sent.waiting_for is WaitingFor.APPROVAL
    assert [p.tool for p in sent.pending_approvals] == ["write_file"]
    assert "waiting for approval: write_file" in played.step("send").output


async def test_the_run_waiting_for_approval_is_listed_and_in_the_inbox(played: Tour) -> None:
    listing = played.step("list")
    [row] = [line for line in listing.output.splitlines() if played.run_id in line]

    assert "approval" in row.split()
    # Read after `tarry list` saw it: the inbox reads the same visibility records.
    assert listing.in_the_inbox == [played.run_id]


def as_printed(output: str) -> str:
    """Output with what differs from one tour to the next (the time, the user's login
    name) put the same way every time."""
    output = re.sub(r"\b\d\d:\d\d:\d\d\b", "HH:MM:SS", output)
    return re.sub(r"\bby cli:\S+", "by cli:USER", output).strip()


def printed_in_the_guide(command: str) -> str:
    """What getting-started shows `command` printing: the text block after its own."""
    block = re.escape(f"```sh\n{command}\n```\n\n```text\n")
    [printed] = re.findall(block + r"(.*?)```", GETTING_STARTED.read_text(), flags=re.DOTALL)
    return as_printed(printed)


async def test_the_approval_is_decided_in_the_terminal(played: Tour) -> None:
    [written] = [m for m in played.transcript if m.role == "tool" and m.decision is not None]

    assert written.decision is not None
    assert written.decision.approved
    assert written.decision.by == "update"  # `tarry approve` decides with the update
    assert written.decision.source is None  # a person's own client, not MCP
    assert "approved in the CLI/API" in played.step("approve").output
    approved = played.step("approve").output.replace(played.run_id, "RUN")  # the guide's name
    assert as_printed(approved) == printed_in_the_guide("tarry approve $RUN")
    assert (
        (played.workspace / "actions.md")
        .read_text()
        .endswith("- [ ] Write the Q3 launch blog post (Priya)\n")
    )


async def test_after_the_approval_the_run_pauses_on_its_budget(played: Tour) -> None:
    paused = played.after("approve")

    assert paused.phase is Phase.WAITING_USER
    assert paused.waiting_for is WaitingFor.BUDGET
    assert paused.warning is ErrorCode.BUDGET_EXCEEDED
    assert paused.budget is not None
    assert paused.budget.max_total_tokens is not None
    assert paused.usage.total_tokens >= paused.budget.max_total_tokens
    assert "finish" not in tool_calls(played.transcript[: paused.message_count])


async def test_the_raised_budget_lets_the_agent_finish(played: Tour) -> None:
    finished = played.after("budget")

    assert finished.phase is Phase.COMPLETED
    assert finished.budget is not None
    assert finished.budget.max_total_tokens == 10000
    assert tool_calls(played.transcript)[-1] == "finish"
    assert "run completed" in played.step("budget").output


def test_getting_started_walks_through_the_readme_tour_command_by_command() -> None:
    stack, commands = readme_tour()
    page = GETTING_STARTED.read_text().split("## Beyond the tour", 1)[0]

    walked = [_command(line) for block in shell_commands(page) for line in block]

    assert walked == [_command(line) for line in ["source .venv/bin/activate", *stack, *commands]]


def test_a_new_workspace_starts_with_the_tour_files(tmp_path: Path) -> None:
    workspace = tmp_path / "run-1"

    make_workspace(workspace, tour.WORKSPACE)

    assert sorted(p.name for p in workspace.iterdir()) == ["notes.md", "todo.md"]
    assert (workspace / "notes.md").read_text() == (tour.WORKSPACE / "notes.md").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["run-1"]  # nothing left beside it


def test_an_existing_workspace_keeps_its_files_and_gets_none_of_the_tour(tmp_path: Path) -> None:
    workspace = tmp_path / "run-1"
    workspace.mkdir()
    (workspace / "notes.md").write_text("my own notes")

    make_workspace(workspace, tour.WORKSPACE)

    assert [p.name for p in workspace.iterdir()] == ["notes.md"]
    assert (workspace / "notes.md").read_text() == "my own notes"
