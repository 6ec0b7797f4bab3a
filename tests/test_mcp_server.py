"""`tarry mcp`, driven as an MCP client drives it: the real command over stdio, spoken
to with the `mcp` package's client, against a real dev server and worker."""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from tarry.contracts import ErrorCode, Phase, WaitingFor
from tarry.testing.scripted_model import call, say
from tests.cli import agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.gated_writes import OVERWRITE, gated_write
from tests.search_stores import until_found
from tests.test_run_ids import BAD_IDS

TARRY = Path(sys.executable).parent / "tarry"


def mcp_client(
    agent: Agent, payload_store: Path, *args: str, env: dict[str, str] | None = None
) -> Client:
    """A client of `tarry mcp ARGS` for the agent's task queue, with `env` on top of the
    variables that name it, to enter in the test: the SDK's transports must be left by the
    task that entered them, and an async fixture's teardown runs in another."""
    env = (env or {}) | {
        "TEMPORAL_ADDRESS": agent.tarry.client.service_client.config.target_host,
        "TARRY_TASK_QUEUE": agent.tarry.task_queue,
        "TARRY_STORAGE_DIR": str(payload_store),
    }
    return Client(StdioServerParameters(command=str(TARRY), args=["mcp", *args], env=env))


@pytest.fixture
def tarry_mcp(agent: Agent, payload_store: Path) -> Client:
    return mcp_client(agent, payload_store)


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


async def test_a_run_waiting_for_a_decision_shows_an_mcp_client_each_calls_preview_whole(
    agent: Agent, tarry_mcp: Client
) -> None:
    run = await gated_write(agent, OVERWRITE)

    async with tarry_mcp as client:
        result = await client.call_tool("run_state", {"run_id": run.id})

    _, described = result.content
    assert isinstance(described, TextContent)
    lines = described.text.splitlines()
    assert lines[0].startswith("Show the person each call's preview, whole, before deciding")
    assert "write_file, call_id 'w1':" in lines
    assert "    notes.md: 6 lines removed, 1 added" in lines
    assert "    │ -- Ana drafts the customer email by Thursday." in lines


async def test_an_mcp_client_starts_a_run_with_rules_and_remembers_a_decision(
    agent: Agent, tarry_mcp: Client
) -> None:
    drafts = {"tool": "write_file", "when": {"/path": "drafts/*"}, "decision": "ask"}
    write = [call("write_file", {"path": f"drafts/{n}.md", "content": "x"}) for n in "ab"]
    agent.model.add(*write, say("Drafted."))

    async with tarry_mcp as client:
        started = await use(client, "start_run", prompt="Draft.", approval_rules=[drafts])
        agent.runs.append(agent.tarry.get(started["run_id"]))
        waiting = await use(client, "run_state", run_id=started["run_id"], wait_seconds=30)
        decided = await use(
            client, "decide", run_id=started["run_id"], approved=True, remember="run"
        )
        transcript = await use(client, "run_transcript", run_id=started["run_id"])

    assert [p["rule"] for p in waiting["pending_approvals"]] == [1]
    assert decided["last_assistant_text"] == "Drafted."
    users = [m["decision"]["user"] for m in transcript if m["role"] == "tool"]
    assert users[1] == "remembered"


async def test_a_decision_through_mcp_is_recorded_as_taken_through_mcp(
    agent: Agent, tarry_mcp: Client
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "# A"}), say("Written."))

    async with tarry_mcp as client:
        started = await use(
            client, "start_run", prompt="Write a.md.", require_approval=["write_file"]
        )
        agent.runs.append(agent.tarry.get(started["run_id"]))
        await use(client, "run_state", run_id=started["run_id"], wait_seconds=30)
        await use(client, "decide", run_id=started["run_id"], approved=True)
        transcript = await use(client, "run_transcript", run_id=started["run_id"])

    (tool_message,) = [m for m in transcript if m["role"] == "tool"]
    assert tool_message["decision"]["approved"] is True
    assert (tool_message["decision"]["by"], tool_message["decision"]["source"]) == (
        "update",
        "mcp",
    )
    shown = await tarry_show(agent, started["run_id"])
    assert "\n    ✓ approved via mcp " in shown, shown
    # The start and the decision both came through the MCP door.
    records = (await agent.tarry.audit(run=started["run_id"])).records
    assert [(r.act, r.door) for r in records] == [("start", "mcp"), ("decision", "mcp")]


async def test_decide_is_marked_destructive_so_a_host_asks_its_user_first(
    tarry_mcp: Client,
) -> None:
    async with tarry_mcp as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}

    annotations = tools["decide"].annotations
    assert annotations is not None
    assert (annotations.destructive_hint, annotations.read_only_hint) == (True, False)


async def test_a_read_only_server_offers_only_the_tools_that_change_nothing(
    agent: Agent, payload_store: Path
) -> None:
    async with mcp_client(agent, payload_store, "--read-only") as client:
        tools = (await client.list_tools()).tools

    assert sorted(t.name for t in tools) == [
        "list_runs",
        "list_schedules",
        "run_state",
        "run_transcript",
        "search_messages",
        "waiting_runs",
    ]
    assert all(t.annotations and t.annotations.read_only_hint for t in tools)


async def test_an_mcp_client_finds_a_message_by_its_words(
    agent_factory: Any, payload_store: Path, tmp_path: Path
) -> None:
    index = str(tmp_path / "search.db")
    agent = await agent_factory(worker_settings={"tarry_search_index": index})
    agent.model.add(say("The zanzibar trip is booked."))
    run = await agent.start("book it")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await until_found(tmp_path / "search.db", "zanzibar")

    async with mcp_client(agent, payload_store, env={"TARRY_SEARCH_INDEX": index}) as client:
        hits = await use(client, "search_messages", text="zanzibar trip")

    assert [(h["run_id"], h["index"], h["role"]) for h in hits] == [(run.id, 1, "assistant")]
    assert "[zanzibar] [trip]" in hits[0]["snippet"]


async def test_the_server_reports_tarry_and_its_version(tarry_mcp: Client) -> None:
    async with tarry_mcp as client:
        info = client.server_info

    assert info is not None
    assert (info.name, info.version) == ("tarry", version("tarry"))


async def test_a_reused_run_id_is_refused_with_run_exists(agent: Agent, tarry_mcp: Client) -> None:
    agent.model.add(say("Hello!"))

    async with tarry_mcp as client:
        first = await use(client, "start_run", prompt="hi", run_id="run-mcp-twice")
        agent.runs.append(agent.tarry.get(first["run_id"]))
        again = await client.call_tool("start_run", {"prompt": "hi", "run_id": "run-mcp-twice"})

    assert error_code(again) == ErrorCode.RUN_EXISTS


async def test_start_run_hands_its_model_profile_to_the_run(
    agent: Agent, tarry_mcp: Client
) -> None:
    async with tarry_mcp as client:
        refused = await client.call_tool("start_run", {"prompt": "hi", "model": "gpt-9"})

    # The worker names the profile it lacks, and those it has.
    assert error_code(refused) == ErrorCode.LLM_UNKNOWN_PROFILE
    assert "'gpt-9' on this worker; configured: default" in text_of(refused)
    assert agent.model.requests == []


async def test_every_bad_run_id_form_is_a_run_id_invalid_tool_error(tarry_mcp: Client) -> None:
    async with tarry_mcp as client:
        codes = {
            (form, tool): error_code(await client.call_tool(tool, arguments))
            for form, run_id in BAD_IDS.items()
            for tool, arguments in [
                ("start_run", {"prompt": "hi", "run_id": run_id}),
                ("run_state", {"run_id": run_id}),
            ]
        }

    assert set(codes.values()) == {ErrorCode.RUN_ID_INVALID}
    assert len(codes) == 2 * len(BAD_IDS)


async def tarry_show(agent: Agent, run_id: str) -> str:
    """What `tarry show RUN` prints."""
    env = agent_env(agent)
    process = await asyncio.create_subprocess_exec(
        str(TARRY), "show", run_id, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=deadline(60))
    assert process.returncode == 0
    return out.decode()


def error_code(result: CallToolResult) -> str | None:
    """The code of a tool error; fails the test on a success."""
    assert result.is_error, result.structured_content
    assert result.structured_content is not None
    code: str | None = result.structured_content["code"]
    return code


def text_of(result: CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


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


async def test_a_decision_by_a_user_outside_the_approvers_is_approval_not_allowed(
    agent: Agent, payload_store: Path
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "# A"}), say("Written."))
    run = await agent.start(
        "Write a.md.", require_approval=["write_file"], approvers={"write_file": ["alice"]}
    )
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    async with mcp_client(agent, payload_store, env={"TARRY_USER": "mallory"}) as client:
        result = await client.call_tool("decide", {"run_id": run.id, "approved": True})

    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["code"] == ErrorCode.APPROVAL_NOT_ALLOWED
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL


@pytest.mark.parametrize("limit", [0, 1001])
async def test_a_list_limit_outside_the_api_s_bounds_is_a_tool_error(
    tarry_mcp: Client, limit: int
) -> None:
    async with tarry_mcp as client:
        result = await client.call_tool("list_runs", {"limit": limit})

    assert result.is_error


async def test_a_rule_too_costly_to_search_is_a_tool_error_and_starts_nothing(
    agent: Agent, tarry_mcp: Client
) -> None:
    costly = {"tool": "write_file", "when": {"/path": {"regex": "[ab]{999}"}}, "decision": "ask"}

    async with tarry_mcp as client:
        result = await client.call_tool(
            "start_run", {"prompt": "Draft.", "approval_rules": [costly]}
        )

    assert result.is_error
    assert "too costly to search" in text_of(result)
    assert not agent.model.requests
