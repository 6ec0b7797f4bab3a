"""Tool errors reach the model as tool messages with a code; the run goes on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from activities.tool_calls import tool
from tarry.contracts import ErrorCode, Phase, Timeouts
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, tool_result
from tests.deadline import HEARTBEAT, TIMEOUT, deadline


async def tool_error_of(agent: Agent, *script_call: Any, run_id: str | None = None) -> Any:
    """Runs one scripted tool call and returns the error the model was shown."""
    agent.model.add(call(*script_call), say("noted"))
    run = await agent.start("go", run_id=run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    tool_message = (await run.transcript())[2]
    result = tool_result(tool_message)
    assert result["ok"] is False
    # The model's next call saw exactly that message.
    assert agent.model.requests[1].body["messages"][-1]["content"] == tool_message.content
    return result["error"]


async def test_arguments_that_are_not_json(agent: Agent) -> None:
    error = await tool_error_of(agent, "read_file", '{"path": "a.txt"')
    assert error["code"] == ErrorCode.TOOL_INVALID_ARGUMENTS


async def test_arguments_that_do_not_fit_the_schema(agent: Agent) -> None:
    error = await tool_error_of(agent, "write_file", {"path": "a.txt"})
    assert error["code"] == ErrorCode.TOOL_INVALID_ARGUMENTS
    assert "content" in json.dumps(error["details"])


async def test_an_unknown_tool(agent: Agent) -> None:
    error = await tool_error_of(agent, "send_email", {"to": "x@example.com"})
    assert error["code"] == ErrorCode.TOOL_NOT_FOUND
    assert "read_file" in error["message"]


async def test_a_tool_not_allowed_in_this_run(agent: Agent) -> None:
    agent.model.add(call("write_file", {"path": "a", "content": "x"}), say("noted"))
    run = await agent.start("go", tools=["read_file"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    result = tool_result((await run.transcript())[2])
    assert result["error"]["code"] == ErrorCode.TOOL_NOT_FOUND
    offered = [t["function"]["name"] for t in agent.model.requests[0].body["tools"]]
    assert offered == ["read_file", "finish"]
    assert not (agent.workspace_root / run.id / "a").exists()


async def test_path_traversal(agent: Agent) -> None:
    error = await tool_error_of(agent, "read_file", {"path": "../../etc/passwd"})
    assert error["code"] == ErrorCode.TOOL_FORBIDDEN


async def test_symlink_escape(agent: Agent, tmp_path: Any) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret")
    workspace = agent.workspace_root / "run-symlink"
    workspace.mkdir(parents=True)
    (workspace / "door").symlink_to(outside)

    error = await tool_error_of(
        agent, "read_file", {"path": "door/secret.txt"}, run_id="run-symlink"
    )

    assert error["code"] == ErrorCode.TOOL_FORBIDDEN
    assert "s3cret" not in json.dumps(error)


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("the flux capacitor is out of flux")


async def test_a_raising_tool(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(tools=[explode])

    error = await tool_error_of(agent, "explode", {})

    assert error["code"] == ErrorCode.TOOL_FAILED
    assert "out of flux" in error["message"]


STARTS: dict[str, int] = {}


async def _hang(name: str) -> str:
    STARTS[name] = STARTS.get(name, 0) + 1
    await asyncio.sleep(60)
    return "unreachable in these tests"


@tool(idempotent=False)
async def charge_card(amount: int) -> str:
    """Charges the card; must never run twice."""
    return await _hang("charge_card")


@tool
async def fetch_quote(symbol: str) -> str:
    """Fetches a quote; harmless to repeat."""
    return await _hang("fetch_quote")


ONE_SECOND_TOOLS = Timeouts(llm_heartbeat=HEARTBEAT, tool=1)


async def test_a_non_idempotent_tool_cut_short_runs_once_and_its_outcome_is_unknown(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(tools=[charge_card])
    agent.model.add(call("charge_card", {"amount": 5}), say("I'll check before retrying."))
    run = await agent.start("charge 5", timeouts=ONE_SECOND_TOOLS)

    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    error = tool_result((await run.transcript())[2])["error"]
    assert error["code"] == ErrorCode.TOOL_OUTCOME_UNKNOWN
    assert STARTS["charge_card"] == 1


async def test_an_idempotent_tool_cut_short_is_retried(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(tools=[fetch_quote])
    agent.model.add(call("fetch_quote", {"symbol": "TMP"}), say("The quote service is slow."))
    run = await agent.start("quote TMP", timeouts=ONE_SECOND_TOOLS)

    await run.wait_for({Phase.WAITING_USER}, timeout=deadline(30))

    error = tool_result((await run.transcript())[2])["error"]
    assert error["code"] == ErrorCode.TOOL_TIMEOUT
    assert STARTS["fetch_quote"] == 3
