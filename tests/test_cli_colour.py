"""The CLI at a terminal: colour only there (never through a pipe, with `NO_COLOR` or
with --json), and shell completion."""

from __future__ import annotations

import asyncio
import json
import os
import re

import pexpect

from tarry.cli.render import message_text
from tarry.contracts import Phase
from tarry.testing.scripted_model import say
from tests.cli import TARRY, agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline

ANSI = re.compile(r"\x1b\[([0-9;]*)m")
# SGR parameters that set a colour: foreground, background, and their bright variants.
_COLOUR_CODES = {*range(30, 39), *range(40, 49), *range(90, 98), *range(100, 108)}


def has_colour(screen: str) -> bool:
    """Whether any escape sequence sets a colour (bold and the like are not colour)."""
    return any(
        int(code) in _COLOUR_CODES
        for params in ANSI.findall(screen)
        for code in params.split(";")
        if code
    )


async def waiting_run(agent: Agent) -> str:
    agent.model.add(say("Which colour do you like?"))
    run = await agent.start("hello")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    return run.id


async def on_a_terminal(agent: Agent, *args: str, no_color: bool = False) -> str:
    """What `tarry ARGS` writes to a colour terminal (a pseudo-terminal)."""
    env = agent_env(agent) | {"TERM": "xterm-256color"}
    if not no_color:
        del env["NO_COLOR"]
    child = pexpect.spawn(str(TARRY), list(args), env=env, encoding="utf-8", timeout=deadline(30))
    # Blocking reads in a thread: the test's worker on this event loop answers the queries.
    await asyncio.to_thread(child.expect, pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return str(child.before)


async def test_a_terminal_gets_colour(agent: Agent) -> None:
    run_id = await waiting_run(agent)

    screen = await on_a_terminal(agent, "show", run_id)

    assert has_colour(screen)
    assert "Which colour do you like?" in ANSI.sub("", screen)


async def test_no_color_turns_colour_off_on_a_terminal(agent: Agent) -> None:
    run_id = await waiting_run(agent)

    screen = await on_a_terminal(agent, "show", run_id, no_color=True)

    assert not has_colour(screen)
    assert "Which colour do you like?" in screen


async def test_json_is_never_coloured_even_on_a_terminal(agent: Agent) -> None:
    run_id = await waiting_run(agent)

    screen = await on_a_terminal(agent, "show", run_id, "--json")

    assert not ANSI.search(screen)  # no styling at all
    assert json.loads(screen)[-1]["content"] == "Which colour do you like?"


async def test_a_pipe_gets_no_colour(agent: Agent) -> None:
    run_id = await waiting_run(agent)
    env = agent_env(agent)
    del env["NO_COLOR"]
    process = await asyncio.create_subprocess_exec(
        str(TARRY), "show", run_id, env=env, stdout=asyncio.subprocess.PIPE
    )

    out, _ = await process.communicate()

    assert process.returncode == 0
    assert not ANSI.search(out.decode())  # no styling at all
    assert str(message_text((await agent.tarry.get(run_id).transcript())[-1])) in out.decode()


async def test_shell_completion_completes_command_names() -> None:
    # What bash's completion function (`tarry --install-completion`) asks the CLI.
    ask = {"_TARRY_COMPLETE": "complete_bash", "COMP_WORDS": "tarry st", "COMP_CWORD": "1"}
    process = await asyncio.create_subprocess_exec(
        str(TARRY), env=os.environ | ask, stdout=asyncio.subprocess.PIPE
    )

    out, _ = await process.communicate()

    assert sorted(out.decode().split()) == ["start", "status", "stop"]
