"""MCP servers as tools: real servers nobody here wrote (`mcp-server-time`,
`mcp-server-git` from PyPI, over stdio) and one built with the `mcp` package's server
API (`tests/mcp_servers.py`, over stdio and streamable HTTP), called by agents on a
real dev server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.testing import ActivityEnvironment

from activities.mcp_tools import McpHost, tool_name
from tarry.config.settings import McpServer, TarrySettings
from tarry.contracts import ErrorCode, Phase, WaitingFor
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.conftest import MCP_TIMEOUTS, Agent, tool_result
from tests.deadline import TIMEOUT, deadline

TEST_SERVER = Path(__file__).parent / "mcp_servers.py"
TIME = McpServer(command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"])


def our_server(*args: str) -> McpServer:
    """The test server over stdio."""
    return McpServer(command=sys.executable, args=[str(TEST_SERVER), "stdio", *args])


@dataclasses.dataclass
class HttpServer:
    url: str
    process: asyncio.subprocess.Process


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServer]:
    """The test server over streamable HTTP on 127.0.0.1, as its own process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(TEST_SERVER), "http", "--port", str(port),
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    async with asyncio.timeout(deadline(30)):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            break
    yield HttpServer(f"http://127.0.0.1:{port}/mcp", process)
    if process.returncode is None:
        process.kill()
        await process.wait()


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    """Where the test server's slow tools say which process serves them."""
    path = tmp_path / "marks"
    path.mkdir()
    return path


def servers_of(marks: Path, tool: str) -> list[int]:
    """The pids of the server processes that started a call of `tool`."""
    return sorted(int(p.suffix.removeprefix(".")) for p in marks.glob(f"{tool}.*"))


async def kill_when_marked(marks: Path, tool: str) -> int:
    """SIGKILLs the server process once a call of `tool` is under way; its pid."""
    async with asyncio.timeout(deadline(30)):
        while not (found := servers_of(marks, tool)):
            await asyncio.sleep(0.05)
    os.kill(found[0], signal.SIGKILL)
    return found[0]


async def activity_summaries(agent: Agent, run: Any) -> list[tuple[str, str]]:
    """(activity type, summary) of every activity the run scheduled, in order, local
    activities (the tools a server marks read-only and idempotent) included."""
    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    steps = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            name = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.marker_recorded_event_attributes.marker_name == "core_local_activity":
            marker = e.marker_recorded_event_attributes.details["data"].payloads[0]
            name = json.loads(marker.data)["activity_type"]
        else:
            continue
        steps.append((name, json.loads(e.user_metadata.summary.data)))
    return steps


def tool_messages(transcript: list[Any]) -> list[Any]:
    return [m for m in transcript if m.role == "tool"]


def offered(request_body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request_body["tools"]]


async def test_an_agent_calls_a_tool_of_mcp_server_time_over_stdio_and_one_over_http(
    agent_factory: Any, http_server: HttpServer
) -> None:
    notes = McpServer(url=http_server.url)
    agent = await agent_factory(mcp_servers={"time": TIME, "notes": notes})
    agent.model.add(
        call("time__get_current_time", {"timezone": "Europe/Paris"}),
        call("notes__lookup", {"key": "answer"}),
        say("It is late, and the answer is 42."),
    )
    run = await agent.start("What time is it, and what is the answer?")

    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    clock, note = tool_messages(await run.transcript())
    assert json.loads(tool_result(clock)["data"])["timezone"] == "Europe/Paris"
    assert tool_result(note) == {"ok": True, "data": "answer is 42"}
    assert {"time__get_current_time", "notes__lookup"} <= set(offered(agent.model.requests[0].body))
    assert [s for s in await activity_summaries(agent, run) if s[0] == "mcp_tool"] == [
        ("mcp_tool", "time: get_current_time Europe/Paris"),
        ("mcp_tool", "notes: lookup answer"),
    ]


async def test_an_idempotent_mcp_tool_whose_server_is_killed_mid_call_runs_again_and_succeeds(
    agent_factory: Any, marks: Path
) -> None:
    agent = await agent_factory(mcp_servers={"work": our_server("--marks", str(marks))})
    agent.model.add(call("work__slow_count", {"seconds": 2}), say("Counted."))
    run = await agent.start("Count to two.")

    killed = await kill_when_marked(marks, "slow_count")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    (message,) = tool_messages(await run.transcript())
    assert tool_result(message) == {"ok": True, "data": "counted 2.0 seconds"}
    assert await agent.retries(run) == [(2, "MCP_CONNECTION_LOST")]
    served = servers_of(marks, "slow_count")
    assert len(served) == 2  # a new server process served the second attempt
    assert killed in served


async def test_a_non_idempotent_mcp_tool_whose_server_is_killed_mid_call_is_outcome_unknown(
    agent_factory: Any, marks: Path
) -> None:
    agent = await agent_factory(mcp_servers={"work": our_server("--marks", str(marks))})
    agent.model.add(call("work__slow_append", {"line": "paid", "seconds": 2}), say("I will check."))
    run = await agent.start("Append a line.")

    await kill_when_marked(marks, "slow_append")
    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    (message,) = tool_messages(await run.transcript())
    assert tool_result(message)["error"]["code"] == ErrorCode.TOOL_OUTCOME_UNKNOWN
    assert len(servers_of(marks, "slow_append")) == 1  # not run again
    assert state.last_assistant_text == "I will check."  # the run went on


async def summaries_once(agent: Agent, run: Any, prefix: str) -> list[str]:
    """The summaries of the run's activities once one starts with `prefix`. A read-only
    tool runs as a local activity, which history records only once it has finished: the
    run may read as waiting for a decision before that."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            found = [summary for _, summary in await activity_summaries(agent, run)]
            if any(summary.startswith(prefix) for summary in found):
                return found
            await asyncio.sleep(0.1)


async def test_a_destructive_mcp_tool_waits_for_approval_while_a_read_only_one_runs_at_once(
    agent_factory: Any, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    for command in (
        ["init", "-q", str(repo)],
        ["-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
         "--allow-empty", "-m", "start"],
    ):  # fmt: skip
        git_done = await asyncio.create_subprocess_exec("git", *command)
        assert await git_done.wait() == 0
    git = McpServer(command=sys.executable, args=["-m", "mcp_server_git", "-r", str(repo)])
    agent = await agent_factory(mcp_servers={"git": git})
    agent.model.add(
        calls(
            ScriptedToolCall(name="git__git_reset", arguments={"repo_path": str(repo)}),
            ScriptedToolCall(name="git__git_status", arguments={"repo_path": str(repo)}),
        ),
        say("Reset and checked."),
    )
    run = await agent.start("Reset the index and show the status.")

    waiting = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    assert waiting.waiting_for is WaitingFor.APPROVAL
    assert [p.tool for p in waiting.pending_approvals] == ["git__git_reset"]
    summaries = await summaries_once(agent, run, "git: git_status")
    assert not any(s.startswith("git: git_reset") for s in summaries)
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL

    await run.decide(waiting.pending_approvals[0].call_id, approved=True)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    reset, status = tool_messages(await run.transcript())
    assert tool_result(reset)["ok"] is True
    assert reset.decision is not None
    assert reset.decision.approved
    assert "On branch" in tool_result(status)["data"]


async def test_require_approval_gates_an_mcp_tool_by_its_server_prefixed_name(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(mcp_servers={"time": TIME})
    agent.model.add(call("time__get_current_time", {"timezone": "UTC"}))
    run = await agent.start("What time is it?", require_approval=["time__get_current_time"])

    waiting = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    assert waiting.waiting_for is WaitingFor.APPROVAL
    assert [p.tool for p in waiting.pending_approvals] == ["time__get_current_time"]
    # The call did not run: only its preview was made. (The tools came with the start.)
    assert [t for t, _ in await activity_summaries(agent, run)] == ["call_llm", "preview_calls"]
    agent.model.add(say("Never mind."))
    await run.decide(waiting.pending_approvals[0].call_id, approved=False, reason="not now")
    (message,) = tool_messages(await run.transcript())
    assert tool_result(message)["error"]["code"] == ErrorCode.TOOL_REJECTED


async def test_a_run_naming_an_mcp_tool_the_server_does_not_list_is_refused_at_start(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(mcp_servers={"time": TIME})

    with pytest.raises(Exception, match="time__get_the_weather") as refused:
        await agent.start("Hello", tools=["time__get_the_weather"])

    assert getattr(refused.value, "code", None) == ErrorCode.TOOL_NOT_FOUND


SILENT = McpServer(command=sys.executable, args=["-c", "import time; time.sleep(600)"])
"""A stdio server that starts and never answers."""


async def test_a_server_that_does_not_answer_in_time_is_named_with_the_time_it_had() -> None:
    host = McpHost({"silent": SILENT})
    step = ActivityEnvironment()
    step.info = dataclasses.replace(step.info, start_to_close_timeout=timedelta(seconds=2))
    try:
        listing = await step.run(host.listing)
    finally:
        await host.aclose()

    assert listing.tools == []
    assert listing.unavailable == [
        "MCP server 'silent' listed no tools: no answer within 1 s "
        "(half the step's `timeouts.tool`; a stdio server's start counts)"
    ]


async def test_a_run_in_flight_keeps_its_catalogue_when_its_restarted_worker_lists_other_tools(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(mcp_servers={"work": our_server("--variant", "a")})
    agent.model.add(call("work__lookup", {"key": "x"}), say("x is 42."))
    run = await agent.start("Look x up.")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    # The server is upgraded: `lookup` is gone, `lookup_v2` is new.
    await agent.restart_worker(mcp_servers={"work": our_server("--variant", "b")})
    agent.model.add(
        calls(
            ScriptedToolCall(name="work__lookup", arguments={"key": "y"}),
            ScriptedToolCall(name="work__lookup_v2", arguments={"key": "z"}),
        ),
        say("Done."),
    )
    await run.send("Now y and z.")

    before, after = agent.model.requests[0].body, agent.model.requests[-1].body
    assert "work__lookup" in offered(before)
    assert offered(after) == offered(before)
    _, gone, new = tool_messages(await run.transcript())
    assert tool_result(gone)["error"]["code"] == ErrorCode.TOOL_FAILED
    assert tool_result(gone)["error"]["details"] == {"server": "work", "tool": "lookup"}
    assert tool_result(new)["error"]["code"] == ErrorCode.TOOL_NOT_FOUND
    # A new run is offered what the server lists now.
    agent.model.add(say("Hello."))
    fresh = await agent.start("Hello.")
    await fresh.wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert "work__lookup_v2" in offered(agent.model.requests[-1].body)
    assert "work__lookup" not in offered(agent.model.requests[-1].body)


async def test_a_gated_mcp_call_shows_its_arguments_with_a_long_string_as_a_text_block(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(mcp_servers={"work": our_server()})
    what = "the ledger's entries for March,\nand the backups of them"
    agent.model.add(call("work__erase", {"what": what}, id="e1"))
    run = await agent.start("Clean up.")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    (pending,) = (await run.state()).pending_approvals

    assert pending.preview is not None
    assert [(b.kind, b.label, b.text) for b in pending.preview.blocks] == [("text", "what", what)]
    assert pending.preview.summary == "what: 2 lines"


async def test_an_mcp_error_result_reaches_the_model_as_a_failed_tool_message_with_its_text(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(mcp_servers={"work": our_server()})
    agent.model.add(call("work__broken"), say("It is locked."))
    run = await agent.start("Try it.")

    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    (message,) = tool_messages(await run.transcript())
    assert tool_result(message)["error"] == {
        "code": ErrorCode.TOOL_FAILED,
        "message": "Error executing tool broken: the ledger is locked",
        "details": {"server": "work", "tool": "broken"},
    }


async def test_an_image_result_is_kept_as_mcp_gave_it_and_summarised_for_the_model(
    agent_factory: Any,
) -> None:
    agent = await agent_factory(mcp_servers={"work": our_server()})
    agent.model.add(call("work__picture"), say("A pixel."))
    run = await agent.start("Draw.")

    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    (message,) = tool_messages(await run.transcript())
    assert tool_result(message)["data"] == "a single pixel\n[image: image/png, 70 bytes]"
    assert message.blocks is not None
    assert [b["type"] for b in message.blocks] == ["text", "image"]
    assert message.blocks[1]["mimeType"] == "image/png"
    sent = agent.model.requests[-1].body["messages"]
    assert "iVBOR" not in json.dumps(sent)  # the model read the summary, not the image


REACHABLE_SERVER_TIMEOUTS = MCP_TIMEOUTS.model_copy(update={"tool": deadline(15)})
"""For an HTTP server already answering: no process of its own to start at the listing."""


async def test_an_mcp_server_that_is_down_answers_the_model_tool_failed_naming_it(
    agent_factory: Any, http_server: HttpServer
) -> None:
    agent = await agent_factory(mcp_servers={"notes": McpServer(url=http_server.url)})
    agent.model.add(say("Ready."))
    # A call asks a server that is down again until 80 % of its attempt's `tool` time is
    # spent: 48 s at the suite's MCP default. A server already up lists in a moment.
    run = await agent.start("Get ready.", timeouts=REACHABLE_SERVER_TIMEOUTS)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    http_server.process.kill()  # the server goes away for good
    await http_server.process.wait()
    agent.model.add(call("notes__lookup", {"key": "answer"}), say("The notes are gone."))

    await run.send("Look the answer up.")

    (message,) = tool_messages(await run.transcript())
    error = tool_result(message)["error"]
    assert error["code"] == ErrorCode.TOOL_FAILED
    assert "MCP server 'notes' is unreachable" in error["message"]


def test_a_tool_name_is_server_and_tool_joined_by_two_underscores() -> None:
    assert tool_name("time", "get_current_time") == "time__get_current_time"


def test_a_name_a_provider_would_refuse_is_made_safe_and_stays_distinct() -> None:
    dotted, underscored = tool_name("fs", "read.file"), tool_name("fs", "read_file")
    long_a, long_b = tool_name("server", "x" * 70 + "a"), tool_name("server", "x" * 70 + "b")

    for name in (dotted, long_a, long_b):
        assert len(name) <= 64
        assert all(c.isalnum() or c in "_-" for c in name)
    assert dotted.startswith("fs__read_file_")
    assert dotted != underscored
    assert long_a != long_b
    assert tool_name("server", "x" * 70 + "a") == long_a  # the same on every worker


def test_the_worker_config_names_mcp_servers_and_its_old_variable_still_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(
        '[profiles.fast]\nmodel = "m"\n'
        '[mcp_servers.time]\ncommand = "python"\nargs = ["-m", "mcp_server_time"]\n'
        '[mcp_servers.notes]\nurl = "http://127.0.0.1:8000/mcp"\n'
        'headers = { Authorization = "Bearer x" }\n'
    )
    monkeypatch.setenv("TARRY_MODELS_FILE", str(config))

    settings = TarrySettings()

    assert set(settings.model_profiles()) == {"default", "fast"}
    assert settings.mcp_servers() == {
        "time": McpServer(command="python", args=["-m", "mcp_server_time"]),
        "notes": McpServer(url="http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer x"}),
    }


def test_an_mcp_server_needs_a_command_or_a_url_not_both() -> None:
    with pytest.raises(ValidationError, match="either `command`"):
        McpServer(command="python", url="http://127.0.0.1:8000/mcp")
