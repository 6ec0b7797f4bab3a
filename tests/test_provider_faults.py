"""A provider that goes away or pushes back: the run waits it out and goes on.

Related tests elsewhere: a wrong key fails fast with `LLM_AUTH_FAILED` naming the
profile (`test_llm_errors.py::test_auth_failure_fails_fast_after_one_attempt_naming_the_profile`);
a provider down for minutes, and past the retry window (`test_provider_outage.py`); an
answer slower than the request timeout (`test_llm_errors.py::
test_a_slow_answer_times_out_and_is_retried`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import Client

from tarry.client import RunHandle
from tarry.contracts import LLM_ACTIVITY, ErrorCode, Mode, Phase, Timeouts
from tarry.testing.scripted_model import ScriptedModel, fail, say
from tests.conftest import Agent
from tests.deadline import HEARTBEAT, deadline
from tests.faults import (
    Attempt,
    activity_attempts,
    assert_transcript,
    assistant,
    finished,
    user,
    wait_until,
)

SHORT_ATTEMPTS = Timeouts(llm_heartbeat=HEARTBEAT, llm_attempt=2, tool=10)


async def model_calls(agent: Agent, run: RunHandle) -> list[Attempt]:
    """The run's model calls, without its other activities (the tool catalogue)."""
    attempts = await activity_attempts(agent.tarry.client, run.id)
    return [a for a in attempts if a.activity == LLM_ACTIVITY]


async def test_a_provider_refusing_connections_is_waited_out_until_it_is_back(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory()
    port = int(agent.model.base_url.split(":")[-1].split("/")[0])
    await agent.model.close()  # nothing listens there now: connections are refused
    run = await agent.start("hello", mode=Mode.TASK, timeouts=SHORT_ATTEMPTS)
    handle = agent.tarry.client.get_workflow_handle(run.id)

    async def third_attempt_refused() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        # The 4th attempt waits: three were refused, over longer than one attempt may take.
        return bool(pending) and pending[0].attempt >= 4

    await wait_until(third_attempt_refused, timeout=deadline(30), what="three refused attempts")
    pending = (await handle.describe()).raw_description.pending_activities[0]
    assert "ConnectError" in pending.last_failure.message
    async with ScriptedModel([say("back again")], port=port) as model:
        result = await finished(run)

    assert result.phase is Phase.COMPLETED
    assert result.output == "back again"
    assert_transcript(await run.transcript(), [user("hello"), assistant("back again")])
    assert len(model.requests) == 1
    [llm] = await model_calls(agent, run)
    assert (llm.attempts, llm.last_failure) == (4, ErrorCode.LLM_HTTP_ERROR)


async def test_a_rate_limited_provider_is_asked_again_only_after_its_retry_after(
    agent_factory: Any, time_skipping: Client
) -> None:
    agent: Agent = await agent_factory(client=time_skipping)
    # Rate-limited for a minute: two answers of 429, each asking for 30 s.
    agent.model.add(
        fail(429, headers={"Retry-After": "30"}),
        fail(429, headers={"Retry-After": "30"}),
        say("there you are"),
    )
    run = await agent.start("hello", mode=Mode.TASK)

    result = await finished(run)

    assert result.phase is Phase.COMPLETED
    assert_transcript(await run.transcript(), [user("hello"), assistant("there you are")])
    # The test server records the attempt but not the failure before it; the two failed
    # attempts were the two 429s, which the worker reports as LLM_RATE_LIMITED
    # (`test_llm_errors.py::test_rate_limit_with_retry_after_is_retried` reads that code
    # from the dev server's history).
    [llm] = await model_calls(agent, run)
    assert llm.attempts == 3
    assert [(r.step, r.answered) for r in agent.model.requests] == [(0, True), (1, True), (2, True)]
    # Event times on the time-skipping server are workflow time: a minute passed there,
    # where the retry policy alone would have waited 1 s + 2 s.
    assert timedelta(seconds=llm.started - llm.scheduled) >= timedelta(seconds=60)
