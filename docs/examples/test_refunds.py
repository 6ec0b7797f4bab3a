"""Tests of a refund agent: its model scripted, its runs real (docs/guides/testing.md)."""

import pytest

from tarry import Phase, WaitingFor, tool
from tarry.testing import StartAgent, call, say

pytest_plugins = ["tarry.testing.fixtures"]
pytestmark = pytest.mark.asyncio(loop_scope="session")


@tool(approval=True)
def refund(order: str) -> str:
    """Refunds an order in full."""
    return f"order {order} refunded"


async def test_the_agent_answers_and_waits_for_the_user(start_agent: StartAgent) -> None:
    agent = await start_agent(tools=[refund])
    agent.model.add(say("Hello! Which order?"))

    run = await agent.start("I want my money back")
    state = await run.wait_for({Phase.WAITING_USER})

    assert state.last_assistant_text == "Hello! Which order?"


async def test_a_refund_runs_once_a_person_approves_it(start_agent: StartAgent) -> None:
    agent = await start_agent(tools=[refund])
    agent.model.add(call("refund", {"order": "A1"}), say("Order A1 is refunded."))

    run = await agent.start("Refund order A1")
    state = await run.wait_for({Phase.WAITING_USER})
    assert state.waiting_for is WaitingFor.APPROVAL
    assert [p.tool for p in state.pending_approvals] == ["refund"]

    state = await run.decide(approved=True)

    assert state.last_assistant_text == "Order A1 is refunded."
    transcript = await run.transcript()
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]
    assert "order A1 refunded" in (transcript[2].content or "")
