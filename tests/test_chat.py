"""`tarry chat` as a person meets it: the installed entry point in a pseudo-terminal,
typed at, read from the screen, against the test server and the test's worker."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pexpect
import pytest

from tarry.client import RunHandle
from tarry.contracts import Mode, Phase
from tarry.testing.scripted_model import call, say
from tests.cli import TARRY, Gate, agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}
PROMPT = "you> "


@dataclass
class Chat:
    """One `tarry chat` process; waiting on its screen runs in a thread, so the test's
    worker, on this event loop, keeps serving meanwhile."""

    child: Any
    screen: io.StringIO

    async def see(self, text: str) -> None:
        await asyncio.to_thread(self.child.expect_exact, text)

    async def see_match(self, pattern: str) -> re.Match[str]:
        await asyncio.to_thread(self.child.expect, pattern)
        match: re.Match[str] = self.child.match
        return match

    def type(self, line: str) -> None:
        self.child.sendline(line)

    async def exit_code(self) -> int:
        await asyncio.to_thread(self.child.expect, pexpect.EOF)
        self.child.close()
        code: int = self.child.exitstatus
        return code


@pytest.fixture
def open_chat(agent: Agent) -> Iterator[Callable[..., Chat]]:
    """Starts `tarry chat ARGS` against `agent`'s task queue; ends leftovers after the test."""
    chats: list[Chat] = []

    def open_(*args: str, on: Agent = agent) -> Chat:
        env = agent_env(on)
        # A dumb terminal: no colour codes and no spinner between the words on screen.
        env["TERM"] = "dumb"
        screen = io.StringIO()
        child = pexpect.spawn(
            str(TARRY),
            ["chat", *args],
            env=env,
            encoding="utf-8",
            timeout=deadline(30),
            dimensions=(24, 200),
        )
        child.logfile_read = screen
        chats.append(Chat(child, screen))
        return chats[-1]

    yield open_
    for chat in chats:
        if chat.child.isalive():
            chat.child.terminate(force=True)


async def chat_with_a_waiting_run(
    agent: Agent, open_chat: Callable[..., Chat]
) -> tuple[RunHandle, Chat]:
    """A run that answered "Hello!" and waits, and a chat with it at its prompt."""
    agent.model.add(say("Hello!"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    chat = open_chat(run.id)
    await chat.see(PROMPT)
    return run, chat


async def test_a_new_chat_shows_tool_calls_and_answers_and_leaves_the_run_waiting(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    agent.model.add(call("list_files"), say("You have no files."), say("You're welcome."))
    chat = open_chat()
    await chat.see(PROMPT)

    chat.type("list my files")
    run_id = (await chat.see_match(r"run (run-[0-9a-f]+)")).group(1)
    run = agent.tarry.get(run_id)
    agent.runs.append(run)
    await chat.see("→ list_files()")
    await chat.see("← []")
    await chat.see("agent: You have no files.")
    await chat.see(PROMPT)
    chat.type("thanks")
    await chat.see("agent: You're welcome.")
    await chat.see(PROMPT)
    chat.type("/status")
    await chat.see("WaitingUser")
    await chat.see(PROMPT)
    chat.type("/quit")
    await chat.see(f"left {run_id} waiting; `tarry chat {run_id}` picks it up")

    assert await chat.exit_code() == 0
    # What the person typed is on screen once, as typed, not repeated as a transcript line.
    assert "you: thanks" not in chat.screen.getvalue()
    assert [(m.role, m.content) for m in await run.transcript() if m.role != "tool"] == [
        ("user", "list my files"),
        ("assistant", None),
        ("assistant", "You have no files."),
        ("user", "thanks"),
        ("assistant", "You're welcome."),
    ]
    assert (await run.state()).phase is Phase.WAITING_USER


async def test_pause_on_a_waiting_run_says_it_already_waits_and_sends_nothing(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run, chat = await chat_with_a_waiting_run(agent, open_chat)

    chat.type("/pause")
    await chat.see("the run is already waiting for you; nothing to pause")
    await chat.see(PROMPT)
    chat.type("/quit")

    assert await chat.exit_code() == 0
    assert "WORKFLOW_EXECUTION_SIGNALED" not in await agent.event_types(run)


async def test_chat_with_a_run_shows_the_transcript_so_far_and_continues_it(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    agent.model.add(say("Hello! Your name?"), say("Hi, Ada."))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    chat = open_chat(run.id)

    await chat.see("you: hi")
    await chat.see("agent: Hello! Your name?")
    await chat.see(PROMPT)
    chat.type("Ada")
    await chat.see("agent: Hi, Ada.")
    await chat.see(PROMPT)
    chat.child.sendeof()

    assert await chat.exit_code() == 0
    assert [m.content for m in await run.transcript()] == [
        "hi",
        "Hello! Your name?",
        "Ada",
        "Hi, Ada.",
    ]


async def test_chat_says_when_the_run_ends_and_exits(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    agent.model.add(say("Shall I finish?"), call("finish", {"result": "all done"}))
    run = await agent.start("do it")
    await run.wait_for(WAITING, TIMEOUT)
    chat = open_chat(run.id)
    await chat.see(PROMPT)

    chat.type("yes")
    await chat.see("← all done")
    await chat.see("run completed")

    assert await chat.exit_code() == 0
    assert (await run.result()).output == "all done"


async def test_chat_with_an_ended_run_shows_it_and_exits(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    agent.model.add(say("42"))
    run = await agent.start("six times seven?", mode=Mode.TASK)
    await run.result()
    chat = open_chat(run.id)

    await chat.see("agent: 42")
    await chat.see("run completed")

    assert await chat.exit_code() == 0
    assert PROMPT not in chat.screen.getvalue()


async def test_stop_in_the_chat_ends_the_run(agent: Agent, open_chat: Callable[..., Chat]) -> None:
    run, chat = await chat_with_a_waiting_run(agent, open_chat)

    chat.type("/stop")
    await chat.see("run completed")

    assert await chat.exit_code() == 0
    assert (await run.result()).phase is Phase.COMPLETED


async def test_ctrl_c_while_the_agent_works_pauses_the_run(
    agent_factory: Callable[..., Awaitable[Agent]], open_chat: Callable[..., Chat]
) -> None:
    gate = Gate()
    agent = await agent_factory(tools=[gate.tool()])
    agent.model.add(call("gate"), say("never asked"))
    chat = open_chat(on=agent)
    await chat.see(PROMPT)
    chat.type("go")
    run = agent.tarry.get((await chat.see_match(r"run (run-[0-9a-f]+)")).group(1))
    agent.runs.append(run)
    await gate.entered.wait()

    chat.child.sendintr()
    await chat.see("pausing at the next turn boundary")
    gate.opened.set()
    await chat.see("← opened")
    await chat.see(PROMPT)

    state = await run.state()
    assert (state.phase, state.turn) == (Phase.WAITING_USER, 1)
    assert len(agent.model.requests) == 1
    chat.type("/quit")
    assert await chat.exit_code() == 0


async def test_a_run_ended_elsewhere_ends_the_chat(
    agent: Agent, open_chat: Callable[..., Chat]
) -> None:
    run, chat = await chat_with_a_waiting_run(agent, open_chat)

    # Terminated by an operator: its last state still says it waits.
    await agent.tarry.client.get_workflow_handle(run.id).terminate("operator")
    chat.type("anyone there?")
    await chat.see("error: RUN_ENDED: ")

    assert await chat.exit_code() == 0
