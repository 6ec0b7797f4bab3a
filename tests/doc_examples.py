"""The docs' code blocks as examples that run: collected from README.md and
docs/**/*.md, and run against a test stack, so the docs cannot drift from the code.

A block runs by its language:

- `python`: a script runs as `python FILE` and must exit 0. A fragment (top-level `await`)
  runs in a namespace holding what `tarry` exports, `tarry` (a client connected like
  `Tarry.connect()`) and `run` (a chat run of it, started with no prompt, waiting for its
  user); `python -m tests.doc_examples FILE` is that runner.
- `sh`: every command must be `tarry ...` or `temporal ...` (after `NAME=value`
  assignments); the block runs in bash with `set -e`, `RUN` standing for a run the stack
  started for it.
- `toml`: a worker's config file (`TARRY_CONFIG`), loaded by the settings' `ConfigFile`.
- `json`: parses.

Markers, HTML comment lines right before the opening fence (a page shows none of them):

- `<!-- not-run: REASON -->`: the block is not run, for the reason given (an API key, a
  server that runs until stopped, a config for another program).
- `<!-- model: [STEP, ...] -->`: what the scripted model answers the block's model calls,
  as `tarry scripted-model --script` takes it (`ScriptStep` objects); past them it echoes.

Any other block, and any block of another language, fails unless it is marked not-run."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
import shlex
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import CodeType

from pydantic import TypeAdapter
from temporalio.service import RPCError, RPCStatusCode

import tarry as exports
from tarry.cli import tour
from tarry.client import Tarry
from tarry.config.settings import ConfigError, ConfigFile
from tarry.contracts import Phase, RunInput
from tarry.testing.script import ScriptStep
from tarry.testing.scripted_model import ScriptedModel
from tests.deadline import TIMEOUT, deadline

ROOT = Path(__file__).resolve().parent.parent

COVERED_ELSEWHERE = {
    ("README.md", "Five minutes with the CLI"): "covered by tests/test_tour.py",
    ("docs/getting-started.md", "*"): "covered by tests/test_tour.py",
    ("docs/guides/evaluating.md", "Try it offline"): "covered by tests/test_evaluating_trial.py",
    **{
        (guide, "Try it offline"): "covered by tests/test_guide_tours.py"
        for guide in tour.TOURS.values()
    },
}
"""(page, `##` section, `*` for every one) whose blocks another test runs: the tour, which
tests/test_tour.py walks through command by command, in the README and in Getting started
(which it checks holds exactly the README's commands); the guides' offline tours,
which tests/test_guide_tours.py plays; and the evaluating guide's offline trial, which
tests/test_evaluating_trial.py plays."""

SHELL_COMMANDS = {"tarry", "temporal"}
"""The programs a shell block may run: the CLI and Temporal's, against the test stack."""

MARKER = re.compile(r"^<!-- (not-run|model): (.*\S) -->$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
"""An opening fence, indented or not (a list item's block is indented)."""
RUN_PLACEHOLDER = re.compile(r"\bRUN\b")
STEPS = TypeAdapter(list[ScriptStep])
BLOCK_TIMEOUT = deadline(120)


class Kind(StrEnum):
    SCRIPT = "python script"
    FRAGMENT = "python fragment"
    SHELL = "shell"
    TOML = "config file"
    JSON = "json"
    UNRUNNABLE = "unrunnable"


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, with what its markers say."""

    source: str
    """`path:line` of the opening fence, the path relative to the repository."""
    language: str
    code: str
    not_run: str | None = None
    """Why the block is not run; None runs it."""
    model: tuple[ScriptStep, ...] = ()

    def __str__(self) -> str:
        return self.source

    @property
    def kind(self) -> Kind:
        if self.language == "python":
            return _python_kind(self.code)
        if self.language in ("sh", "bash", "shell"):
            try:
                # `NAME=$(tarry ...)`: the assignment runs no program, its substitution does.
                programs = {_program(command) for command in _commands(self.code)} - {""}
            except ValueError:  # shlex: an unclosed quote
                return Kind.UNRUNNABLE
            return Kind.SHELL if programs <= SHELL_COMMANDS else Kind.UNRUNNABLE
        return {"toml": Kind.TOML, "json": Kind.JSON}.get(self.language, Kind.UNRUNNABLE)


def _python_kind(code: str) -> Kind:
    """A script compiles as it is; a fragment only with top-level `await` allowed (a
    block that compiles neither way is a script, so running it reports the error)."""
    try:
        compile(code, "<block>", "exec")
    except SyntaxError:
        try:
            compile(code, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:
            return Kind.SCRIPT
        return Kind.FRAGMENT
    return Kind.SCRIPT


def _commands(code: str) -> Iterator[list[str]]:
    """Each command of a shell block as words, comments and line continuations gone;
    `$(` is a command of its own, so a substitution's program is checked too."""
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|()"):
                if words:
                    yield words
                words = []
            else:
                words.append(token.removesuffix("$"))


def _program(words: list[str]) -> str:
    """The program a command runs, past its `NAME=value` assignments."""
    return next((w for w in words if not re.match(r"^\w+=", w)), "")


def collect(text: str, path: str, covered: Mapping[str, str] | None = None) -> list[Block]:
    """The fenced blocks of a markdown page; `covered` maps a `##` section's title (`*`:
    every section) to why its blocks are not run here."""
    blocks: list[Block] = []
    lines = text.splitlines()
    section, markers, i = "", dict[str, str](), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line)
        if marker:
            markers[marker.group(1)] = marker.group(2)
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```"))
            covering = covered or {}
            not_run = markers.get("not-run") or covering.get(section) or covering.get("*")
            steps = STEPS.validate_json(markers["model"]) if "model" in markers else []
            code = textwrap.dedent("\n".join(lines[i + 1 : end]) + "\n")
            blocks.append(Block(f"{path}:{i + 1}", fence.group(2), code, not_run, tuple(steps)))
            i = end
        if not marker:
            markers = {}
        i += 1
    return blocks


def doc_blocks(root: Path = ROOT) -> list[Block]:
    """Every block of README.md and the pages under docs/."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    blocks: list[Block] = []
    for page in pages:
        name = str(page.relative_to(root))
        covered = {s: why for (p, s), why in COVERED_ELSEWHERE.items() if p == name}
        blocks += collect(page.read_text(), name, covered)
    return blocks


@dataclass
class Stack:
    """What blocks run against: a worker on the `tarry` task queue and its scripted model,
    and the environment that points the CLI and clients at them."""

    tarry: Tarry
    model: ScriptedModel
    env: dict[str, str]

    async def end_runs(self, reason: str) -> None:
        """Terminates every run on the stack's queue that is still going."""
        client, queue = self.tarry.client, self.tarry.task_queue
        async for run in client.list_workflows(
            f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'"
        ):
            try:
                await client.get_workflow_handle(run.id).terminate(reason)
            except RPCError as e:
                # Visibility lags: a workflow listed as running may have ended since
                # (an audit record's `AuditAct` ends at once).
                if e.status is not RPCStatusCode.NOT_FOUND:
                    raise


async def run_block(block: Block, stack: Stack) -> str | None:
    """What went wrong running `block` against `stack`, or None when it ran."""
    if block.not_run is not None:
        raise ValueError(f"{block} is marked not-run: {block.not_run}")
    kind = block.kind
    if kind is Kind.UNRUNNABLE:
        return (
            f"a {block.language or 'plain'} block that does not run here: "
            "mark it `<!-- not-run: REASON -->`"
        )
    if kind is Kind.TOML:
        return _load_config(block.code)
    if kind is Kind.JSON:
        return _parse_json(block.code)
    stack.model.add(*block.model)
    try:
        failure = await _execute(block, kind, stack)
    finally:
        # The model answers every run of the stack from one script: a block's run still
        # mid-turn (a block may start one and exit) took the next block's answers on a
        # loaded machine.
        await stack.end_runs("its docs example ran")
    if failure is None and stack.model.remaining:
        failure = f"{stack.model.remaining} of the block's model answers were never asked for"
    return failure


def _load_config(code: str) -> str | None:
    """Read as a worker reads its `TARRY_CONFIG` file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tarry.toml"
        path.write_text(code)
        try:
            config = ConfigFile.read(path)
        except ConfigError as e:
            return str(e)
    return None if config.model_fields_set else "a config file that sets nothing"


def _parse_json(code: str) -> str | None:
    try:
        json.loads(code)
    except json.JSONDecodeError as e:
        return f"not JSON: {e}"
    return None


async def _execute(block: Block, kind: Kind, stack: Stack) -> str | None:
    with tempfile.TemporaryDirectory() as directory:
        if kind is Kind.SHELL:
            run = await stack.tarry.start(RunInput(prompt=""))
            # Signalled before its first workflow task is done, a run can answer
            # "Workflow is busy"; RUN stands for a run that waits for its user.
            await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
            code = RUN_PLACEHOLDER.sub(run.id, block.code)
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            script = Path(directory) / "example.py"
            script.write_text(block.code)
            fragment = ["-m", "tests.doc_examples"] if kind is Kind.FRAGMENT else []
            argv = [sys.executable, *fragment, str(script)]
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ROOT if kind is Kind.FRAGMENT else directory,
            env=stack.env | {"PYTHONPATH": str(ROOT)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), BLOCK_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            return f"still running after {BLOCK_TIMEOUT:.0f} s"
    if process.returncode != 0:
        return f"exit {process.returncode}\n{out.decode()[-2000:]}\n{err.decode()[-3000:]}"
    return None


async def _run_fragment(code: CodeType) -> None:
    """Runs a compiled fragment in the namespace the module's docstring describes."""
    client = await Tarry.connect()
    namespace = {name: getattr(exports, name) for name in exports.__all__}
    namespace |= {"tarry": client, "run": await client.start(RunInput(prompt=""))}
    result = eval(code, namespace)
    if inspect.isawaitable(result):
        await result


if __name__ == "__main__":
    fragment = Path(sys.argv[1])
    source = fragment.read_text()
    code = compile(source, str(fragment), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    # Importing tarry.client (above) guards this process's exit against sdk-python #300.
    asyncio.run(_run_fragment(code))
