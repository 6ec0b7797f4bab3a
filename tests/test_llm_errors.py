"""How the run meets a misbehaving provider, each fault served over real HTTP."""

from __future__ import annotations

from tarry.contracts import ErrorCode, Phase
from tarry.testing.scripted_model import ScriptStep, fail, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}


async def test_auth_failure_fails_fast_after_one_attempt_naming_the_profile(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(fail(401), say("never asked"))
    run = await agent.start("hello")

    result = await run.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_AUTH_FAILED
    assert "'default'" in result.error.message
    assert len(agent.model.requests) == 1
    assert await agent.retries(run) == []


async def test_rate_limit_is_retried_after_the_delay_its_retry_after_asks_for(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(fail(429, headers={"Retry-After": "2"}), say("there you are"))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "there you are"
    assert await agent.retries(run) == [(2, ErrorCode.LLM_RATE_LIMITED)]
    # The failure asked Temporal for that delay before the next attempt.
    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    [retried] = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.activity_task_started_event_attributes.attempt == 2
    ]
    assert retried.last_failure.application_failure_info.next_retry_delay.seconds == 2


async def test_server_errors_are_retried_until_an_answer_comes(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(fail(500), fail(503), say("back again"))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "back again"
    assert state.error is None
    assert await agent.retries(run) == [(3, ErrorCode.LLM_HTTP_ERROR)]


async def test_a_client_error_is_not_retried(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(fail(400), say("never asked"))
    run = await agent.start("hello")

    result = await run.result()

    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_HTTP_ERROR
    assert len(agent.model.requests) == 1


async def test_garbage_answers_fail_the_run_after_their_small_budget(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(*(ScriptStep(body="<html>oops</html>") for _ in range(3)), say("never"))
    run = await agent.start("hello", bad_response_attempts=3)

    result = await run.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_BAD_RESPONSE
    assert len(agent.model.requests) == 3


async def test_one_garbage_answer_is_retried(agent: Agent) -> None:
    agent.model.add(ScriptStep(body='{"choices": []}'), say("sorry, here it is"))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "sorry, here it is"


async def test_a_slow_answer_times_out_and_is_retried(agent_factory: object) -> None:
    agent: Agent = await agent_factory(request_timeout=0.5)  # type: ignore[operator]
    agent.model.add(say("too slow", delay=3), say("quick this time"))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "quick this time"
    assert await agent.retries(run) == [(2, ErrorCode.LLM_TIMEOUT)]
    assert agent.model.requests[0].cancelled
    assert [m.content for m in await run.transcript()] == ["hello", "quick this time"]
