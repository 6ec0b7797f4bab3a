"""Cost and budgets: a profile's prices give each call its cost, and a run that has
spent its budget waits for a person to raise it instead of failing."""

from __future__ import annotations

from typing import Any

import pytest

from tarry.client import TarryError
from tarry.config.settings import Prices
from tarry.contracts import (
    COST_ATTRIBUTE,
    WAITING_FOR_ATTRIBUTE,
    Budget,
    ErrorCode,
    Phase,
    RunState,
    Usage,
    WaitingFor,
)
from tarry.testing.scripted_model import call, say
from tests.cli import Cli, until_listed
from tests.conftest import Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}
# $2 per million prompt tokens, $10 per million completion tokens.
PRICES = Prices(input=2.0, output=10.0)


def used(prompt: int, completion: int) -> Usage:
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


async def over_budget_run(agent: Agent, *script: Any, **input: Any) -> Any:
    """A run whose first answer (a tool call of 120 tokens) spends its 100-token budget:
    it waits at the turn boundary after the tool's result."""
    agent.model.add(call("list_files", id="c1", usage=used(100, 20)), *script)
    input.setdefault("budget", Budget(max_total_tokens=100))
    run = await agent.start("look around", **input)
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.BUDGET
    return run


async def test_a_run_that_spent_its_budget_waits_for_it_to_be_raised(agent: Agent) -> None:
    run = await over_budget_run(agent)

    state = await run.state()

    assert state.warning is ErrorCode.BUDGET_EXCEEDED
    assert state.usage.total_tokens == 120
    assert state.budget == Budget(max_total_tokens=100)
    assert [m.role for m in await run.transcript()] == ["user", "assistant", "tool"]
    assert len(agent.model.requests) == 1  # the next call was never made
    await until_listed(agent.tarry.client, f"{WAITING_FOR_ATTRIBUTE.name} = 'budget'", run.id)


async def test_a_reply_waits_for_the_budget_and_raising_it_goes_on(agent: Agent) -> None:
    run = await over_budget_run(agent, say("Three files.", usage=used(150, 10)))

    replied = await run.send("go on, please")

    # The reply is queued, not answered: the run still waits for its budget.
    assert replied.waiting_for is WaitingFor.BUDGET
    assert replied.pending_inputs == 1
    assert len(agent.model.requests) == 1

    raised = await run.raise_budget(max_total_tokens=1000)

    assert raised.phase is Phase.WAITING_USER
    assert raised.waiting_for is WaitingFor.INPUT
    assert raised.warning is None
    assert raised.budget == Budget(max_total_tokens=1000)
    assert raised.usage.total_tokens == 280
    transcript = await run.transcript()
    assert [(m.role, m.content) for m in transcript if m.role != "tool"] == [
        ("user", "look around"),
        ("assistant", None),
        ("user", "go on, please"),
        ("assistant", "Three files."),
    ]
    assert [c.id for c in transcript[1].tool_calls or []] == ["c1"]
    assert transcript[2].tool_call_id == "c1"
    assert (await agent.updates(run))[-2:] == ["send", "raise_budget"]


async def test_a_reply_to_a_run_that_spent_its_budget_stays_queued_until_it_is_raised(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello!", usage=used(90, 20)), say("Goodbye!"))
    run = await agent.start("hi", budget=Budget(max_total_tokens=100))
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.INPUT  # spent after answering

    replied = await run.send("bye")

    assert replied.waiting_for is WaitingFor.BUDGET
    assert replied.warning is ErrorCode.BUDGET_EXCEEDED
    assert [m.content for m in await run.transcript()] == ["hi", "Hello!"]
    raised = await run.raise_budget(max_total_tokens=500)
    assert raised.last_assistant_text == "Goodbye!"
    assert [m.content for m in await run.transcript()] == ["hi", "Hello!", "bye", "Goodbye!"]


async def test_a_budget_not_above_what_was_spent_is_refused(agent: Agent) -> None:
    run = await over_budget_run(agent)

    with pytest.raises(TarryError) as refused:
        await run.raise_budget(max_total_tokens=120)

    assert refused.value.code is ErrorCode.BUDGET_INVALID
    assert "spent 120 tokens" in str(refused.value)
    assert (await run.state()).budget == Budget(max_total_tokens=100)
    assert "raise_budget" not in await agent.updates(run)  # a rejection leaves no trace


async def test_a_run_whose_calls_are_priced_shows_their_cost(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(prices=PRICES)
    agent.model.add(say("Hello!", usage=used(1000, 100)))
    run = await agent.start("hi")

    state = await run.wait_for(WAITING, TIMEOUT)

    # 1000 * $2/M + 100 * $10/M
    assert state.usage.cost_usd == pytest.approx(0.003)
    cli = Cli.of(agent)
    status = dict(line.split(maxsplit=1) for line in (await cli.ok("status", run.id)).splitlines())
    assert status["usage"] == "1100 tokens (1000 prompt, 100 completion), $0.0030"
    await until_listed(agent.tarry.client, f"{COST_ATTRIBUTE.name} > 0.0029", run.id)


async def test_a_run_that_spent_its_cost_budget_waits_and_goes_on_when_raised(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(prices=PRICES)
    run = await over_budget_run(
        agent, say("Done.", usage=used(10, 1)), budget=Budget(max_cost_usd=0.0001)
    )
    assert (await run.state()).usage.cost_usd == pytest.approx(0.0004)

    state = await run.raise_budget(max_cost_usd=0.01)

    assert state.waiting_for is WaitingFor.INPUT
    assert state.last_assistant_text == "Done."


async def test_status_says_a_spent_budget_holds_while_the_run_waits_for_an_approval(
    agent: Agent,
) -> None:
    agent.model.add(
        call("write_file", {"path": "a.md", "content": "hi"}, usage=Usage(total_tokens=120))
    )
    run = await agent.start(
        "write it", budget=Budget(max_total_tokens=100), require_approval=["write_file"]
    )
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    status = await Cli.of(agent).ok("status", run.id)

    [budget] = [line for line in status.splitlines() if line.startswith("budget")]
    assert budget.split(maxsplit=1)[1] == (
        "100 tokens (spent: the run waits for a raise before its next model call)"
    )


async def test_budget_raises_it_from_the_command_line(agent: Agent) -> None:
    run = await over_budget_run(agent, say("Three files."))
    cli = Cli.of(agent)

    out = await cli.ok("budget", run.id, "--tokens", "5000", "--json")

    state = RunState.model_validate_json(out)
    assert state.budget == Budget(max_total_tokens=5000)
    assert state.waiting_for is WaitingFor.INPUT
    assert state.last_assistant_text == "Three files."


async def test_start_gives_a_run_its_budget_from_the_command_line(agent: Agent) -> None:
    agent.model.add(call("list_files", usage=used(100, 20)))
    cli = Cli.of(agent)

    run = await cli.start("--max-tokens", "100", "--max-cost", "2", "look around")

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.budget == Budget(max_total_tokens=100, max_cost_usd=2.0)
    assert state.waiting_for is WaitingFor.BUDGET


def test_cached_input_is_priced_at_its_own_rates() -> None:
    prices = Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = Usage(
        prompt_tokens=1_000_000,  # all input, the cached part included
        cache_read_tokens=600_000,
        cache_write_tokens=200_000,
        completion_tokens=100_000,
    )

    full_price, reads, writes, output = 200_000 * 3.0, 600_000 * 0.3, 200_000 * 3.75, 1.5e6
    assert prices.cost_of(usage) == pytest.approx((full_price + reads + writes + output) / 1e6)
    assert Prices(input=3.0, output=15.0).cost_of(usage) == pytest.approx((3e6 + 1.5e6) / 1e6)
