"""`tarry mcp`, driven as an MCP client drives it: the real command over stdio, spoken
to with the `mcp` package's client, against a real dev server and worker."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from tarry.contracts import ErrorCode
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent

TARRY = Path(sys.executable).parent / "tarry"


@pytest.fixture
def tarry_mcp(agent: Agent, payload_store: Path) -> Client:
    """A client of `tarry mcp` for the agent's task queue, to enter in the test: the
    SDK's transports must be left by the task that entered them, and an async fixture's
    teardown runs in another."""
    env = {
        "TEMPORAL_ADDRESS": agent.tarry.client.service_client.config.target_host,
        "TARRY_TASK_QUEUE": agent.tarry.task_queue,
        "TARRY_STORAGE_DIR": str(payload_store),
    }
    return Client(StdioServerParameters(command=str(TARRY), args=["mcp"], env=env))


async def use(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool's structured result; fails the test on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    structured = result.structured_content
    # A list comes wrapped, as MCP's structured content must be an object.
    return structured["result"] if set(structured) == {"result"} else structured


async def test_an_mcp_client_starts_a_run_sees_it_waiting_replies_and_reads_the_answer(
    agent: Agent, tarry_mcp: Client
) -> None:
    agent.model.add(say("Who should own the action items?"), say("Priya owns them now."))

    async with tarry_mcp as client:
        started = await use(client, "start_run", prompt="Assign the action items.")
        agent.runs.append(agent.tarry.get(started["run_id"]))
        waiting = await use(client, "run_state", run_id=started["run_id"], wait_seconds=30)
        listed = await use(client, "waiting_runs", waiting_for="input")
        answered = await use(client, "reply", run_id=started["run_id"], text="Priya, please")
        transcript = await use(client, "run_transcript", run_id=started["run_id"])

    assert (waiting["phase"], waiting["waiting_for"]) == ("WaitingUser", "input")
    assert waiting["last_assistant_text"] == "Who should own the action items?"
    assert [(r["run_id"], r["summary"]) for r in listed] == [
        (started["run_id"], "Assign the action items.")
    ]
    assert answered["last_assistant_text"] == "Priya owns them now."
    assert [(m["role"], m["content"]) for m in transcript] == [
        ("user", "Assign the action items."),
        ("assistant", "Who should own the action items?"),
        ("user", "Priya, please"),
        ("assistant", "Priya owns them now."),
    ]


async def test_an_mcp_client_decides_a_pending_approval(agent: Agent, tarry_mcp: Client) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "# A"}), say("Written."))

    async with tarry_mcp as client:
        started = await use(
            client, "start_run", prompt="Write a.md.", require_approval=["write_file"]
        )
        agent.runs.append(agent.tarry.get(started["run_id"]))
        waiting = await use(client, "run_state", run_id=started["run_id"], wait_seconds=30)
        (pending,) = waiting["pending_approvals"]
        decided = await use(
            client, "decide", run_id=started["run_id"], call_id=pending["call_id"], approved=True
        )

    assert (waiting["waiting_for"], pending["tool"]) == ("approval", "write_file")
    assert decided["last_assistant_text"] == "Written."
    assert (agent.workspace_root / started["run_id"] / "a.md").read_text() == "# A"


async def test_an_mcp_client_gets_the_same_error_codes_as_everywhere(
    agent: Agent, tarry_mcp: Client
) -> None:
    async with tarry_mcp as client:
        result = await client.call_tool("reply", {"run_id": "run-nobody", "text": "Hello"})

    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["code"] == ErrorCode.RUN_NOT_FOUND
    (content,) = result.content
    assert isinstance(content, TextContent)
    assert content.text.startswith(f"{ErrorCode.RUN_NOT_FOUND}: no run 'run-nobody'")
