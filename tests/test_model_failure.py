"""When the model keeps failing, a person is asked: a model call failing the same
transient way past `Timeouts.llm_ask_after` moves the run to `WaitingUser` with
`waiting_for: "model"` and the error, instead of retrying for hours. The person can
retry, switch the run to another profile, or reply (which retries with the reply)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr

from tarry.client import TarryError
from tarry.config.settings import ModelProfile
from tarry.contracts import ErrorCode, Phase, Timeouts, WaitingFor
from tarry.testing.scripted_model import ScriptedModel, fail, say
from tests.cli import Cli
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import HEARTBEAT, TIMEOUT

ASK_SOON = Timeouts(llm_heartbeat=HEARTBEAT, llm_attempt=30, tool=10, llm_ask_after=3)
"""Retries at 1 and 2 s: the third second passes with the model still failing."""
WAITING = {Phase.WAITING_USER}


@pytest.fixture
async def backup() -> AsyncIterator[ScriptedModel]:
    """A second model server, that works."""
    async with ScriptedModel() as model:
        yield model


async def failing_agent(agent_factory: Any, backup: ScriptedModel) -> Agent:
    """An agent whose `default` model answers HTTP 500 to everything, with a profile
    `backup` on a working one."""
    profile = ModelProfile(base_url=backup.base_url, model="backup", api_key=SecretStr(CANARY_KEY))
    made: Agent = await agent_factory(more_profiles={"backup": profile})
    made.model.add(*(fail(500, content="Failed to parse tool call arguments") for _ in range(30)))
    return made


@pytest.fixture
async def agent(agent_factory: Any, backup: ScriptedModel) -> Agent:
    return await failing_agent(agent_factory, backup)


async def test_a_model_failing_past_the_bound_makes_the_run_wait_for_a_person(
    agent: Agent,
) -> None:
    run = await agent.start("hello", timeouts=ASK_SOON)

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.waiting_for is WaitingFor.MODEL
    assert state.error is not None
    assert state.error.code is ErrorCode.LLM_HTTP_ERROR
    assert "HTTP 500" in state.error.message
    assert "Failed to parse tool call arguments" in state.error.message


async def test_a_retry_with_the_model_still_failing_waits_for_a_person_again(
    agent: Agent,
) -> None:
    run = await agent.start("hello", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)
    asked = len(agent.model.requests)

    state = await run.retry()

    assert state.waiting_for is WaitingFor.MODEL
    assert len(agent.model.requests) > asked


async def test_switching_the_profile_and_retrying_finishes_the_turn(
    agent: Agent, backup: ScriptedModel
) -> None:
    backup.add(say("Hello from the backup."))
    run = await agent.start("hello", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)

    switched = await run.set_model("backup")
    state = await run.retry()

    assert switched.model == "backup"
    assert (state.phase, state.waiting_for) == (Phase.WAITING_USER, WaitingFor.INPUT)
    assert state.error is None
    assert state.last_assistant_text == "Hello from the backup."
    assert backup.requests[0].body["messages"][0] == {"role": "user", "content": "hello"}


async def test_the_transcript_shows_the_failure_and_the_switch(
    agent: Agent, backup: ScriptedModel
) -> None:
    backup.add(say("Hello from the backup."))
    run = await agent.start("hello", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)
    await run.set_model("backup")
    await run.retry()

    transcript = await run.transcript()

    assert [m.role for m in transcript] == ["user", "system", "system", "assistant"]
    failure, switch = (m.content or "" for m in transcript[1:3])
    assert failure.startswith("The model kept failing (LLM_HTTP_ERROR: model 'default'")
    assert switch == "The model profile is now 'backup'."


async def test_a_reply_to_a_run_waiting_for_its_model_asks_again_with_the_reply(
    agent: Agent, backup: ScriptedModel
) -> None:
    backup.add(say("Both heard."))
    run = await agent.start("hello", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)
    await run.set_model("backup")

    state = await run.send("are you there?")

    assert state.last_assistant_text == "Both heard."
    sent = [m["content"] for m in backup.requests[0].body["messages"] if m["role"] == "user"]
    assert sent == ["hello", "are you there?"]
    assert (await run.transcript())[-2].content == "are you there?"


async def test_retry_of_a_run_that_waits_for_a_reply_is_refused(
    agent: Agent, backup: ScriptedModel
) -> None:
    backup.add(say("Hi."))
    run = await agent.start("hello", model="backup", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await run.retry()

    assert refused.value.code is ErrorCode.RETRY_NOT_WAITING


async def test_from_the_command_line_status_shows_the_failure_then_model_and_retry_go_on(
    agent: Agent, backup: ScriptedModel
) -> None:
    backup.add(say("Hello from the backup."))
    cli = Cli.of(agent)
    run = await agent.start("hello", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)

    status = await cli.ok("status", run.id)
    switched = await cli.ok("model", run.id, "backup")
    retried = await cli.ok("retry", run.id)

    assert "waiting for  model" in status
    assert "LLM_HTTP_ERROR: model 'default' answered HTTP 500" in status
    assert switched.strip() == f"run {run.id} now asks model profile backup"
    assert retried.strip() == "agent: Hello from the backup."
    state = await run.state()
    assert (state.waiting_for, state.last_assistant_text) == (
        WaitingFor.INPUT,
        "Hello from the backup.",
    )


async def test_switching_to_a_profile_the_worker_lacks_is_refused_and_changes_nothing(
    agent: Agent,
) -> None:
    run = await agent.start("hello", timeouts=ASK_SOON)
    await run.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await run.set_model("bakcup")

    assert refused.value.code is ErrorCode.LLM_UNKNOWN_PROFILE
    assert "no model profile 'bakcup'" in str(refused.value)
    assert "configured: backup, default" in str(refused.value)
    assert (await run.state()).model is None
