"""Retries visible: while a model call is retried, the run still reads as `Running`, so
its state, `tarry status` and `tarry watch` say which call fails, how often, and when it
is tried next (from what Temporal records of the pending activity)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime

from tarry.client import RunHandle
from tarry.contracts import ErrorCode, Phase, Retrying, RunState
from tarry.testing.scripted_model import fail, say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline

OUTAGE = tuple(fail(503, content="upstream down") for _ in range(2))
LONG_OUTAGE = tuple(fail(503, content="upstream down") for _ in range(4))
"""Retried after 1, 2, 4 and 8 s: time for a command to start while it lasts."""


async def retrying_state(
    run: RunHandle, until: Callable[[Retrying], bool] = lambda _: True
) -> RunState:
    """The run's state once it shows a call being retried, and `until` holds of that."""
    async with asyncio.timeout(deadline(30)):
        while (retrying := (state := await run.state()).retrying) is None or not until(retrying):
            await asyncio.sleep(0.1)
    return state


def waits_at_least(seconds: float) -> Callable[[Retrying], bool]:
    """Whether a retry's next attempt is `seconds` or more away."""

    def check(retrying: Retrying) -> bool:
        at = retrying.next_attempt_at
        return at is not None and (at - datetime.now(UTC)).total_seconds() >= seconds

    return check


async def test_while_the_model_fails_the_state_shows_the_retry_and_its_next_time(
    agent: Agent,
) -> None:
    agent.model.add(*OUTAGE, say("back online"))
    run = await agent.start("hello")

    state = await retrying_state(run)

    assert state.phase is Phase.RUNNING
    retrying = state.retrying
    assert retrying is not None
    assert retrying.call == "model"
    assert retrying.attempt >= 2
    assert retrying.last_error is not None
    assert retrying.last_error.code is ErrorCode.LLM_HTTP_ERROR
    assert "upstream down" in retrying.last_error.message
    assert retrying.next_attempt_at is not None


async def test_once_the_model_answers_the_state_shows_no_retry(agent: Agent) -> None:
    agent.model.add(*OUTAGE, say("back online"))
    run = await agent.start("hello")
    await retrying_state(run)

    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    assert (await run.state()).retrying is None


async def test_status_shows_the_model_unreachable_with_attempt_and_next_time(cli: Cli) -> None:
    cli.agent.model.add(*LONG_OUTAGE, say("back online"))
    run = await cli.agent.start("hello")
    # The next attempt's time shows only while the call waits for it: wait for the
    # outage's longest wait (8 s), so a command slow to start still finds it waiting.
    await retrying_state(run, waits_at_least(5))

    out = await cli.ok("status", run.id)

    [row] = [line for line in out.splitlines() if line.startswith("retrying")]
    assert "model unreachable, attempt " in row
    assert ", next in " in row
    assert "LLM_HTTP_ERROR: model 'default' answered HTTP 503" in row


async def test_watch_shows_each_retry_of_the_model_then_its_answer(cli: Cli) -> None:
    cli.agent.model.add(*LONG_OUTAGE, say("back online"))
    run = await cli.agent.start("hello")

    out = await cli.ok("watch", run.id, "--json")

    events = [json.loads(line) for line in out.splitlines()]
    retries = [e["retrying"] for e in events if e["kind"] == "retrying"]
    assert retries
    assert {r["call"] for r in retries} == {"model"}
    assert events[-1]["kind"] == "stop"
    assert events[-1]["state"]["last_assistant_text"] == "back online"
