"""Outages that last minutes, on the time-skipping test server: the retry backoff
passes in an instant, the HTTP calls to the scripted model are real."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import Client

from tarry.contracts import ErrorCode, Mode, Phase, Timeouts
from tarry.testing.scripted_model import fail, say
from tests.conftest import Agent
from tests.deadline import HEARTBEAT

TEN_MINUTE_WINDOW = Timeouts(llm_heartbeat=HEARTBEAT, llm_retry_window=timedelta(minutes=10))


async def test_a_provider_down_for_minutes_is_waited_out(
    agent_factory: Any, time_skipping: Client
) -> None:
    agent: Agent = await agent_factory(client=time_skipping)
    # Backoff 1, 2, 4, ... 60 s: eight failures span about four minutes.
    agent.model.add(*(fail(503) for _ in range(8)), say("back online"))
    run = await agent.start("hello", mode=Mode.TASK, timeouts=TEN_MINUTE_WINDOW)

    result = await run.result()

    assert result.phase is Phase.COMPLETED
    assert result.output == "back online"
    assert len(agent.model.requests) == 9


async def test_a_provider_down_past_the_retry_window_fails_the_run_with_its_last_error(
    agent_factory: Any, time_skipping: Client
) -> None:
    agent: Agent = await agent_factory(client=time_skipping)
    agent.model.add(*(fail(503) for _ in range(40)))
    # Asking a person no sooner than the window ends: the run fails, as before.
    never_ask = TEN_MINUTE_WINDOW.model_copy(update={"llm_ask_after": timedelta(minutes=10)})
    run = await agent.start("hello", timeouts=never_ask)

    result = await run.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_HTTP_ERROR
    assert "503" in result.error.message
    assert 8 < len(agent.model.requests) < 40
