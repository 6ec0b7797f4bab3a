"""Tool approval gates from the shell: `tarry approve`, and how `status`, `show`, `list`,
`watch` and `send` show calls that wait for a person. The installed entry point runs as
its own process against the test server, served by the test's in-process worker."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tarry.client import RunHandle
from tarry.contracts import ChatMessage, DecisionRecord, Phase, RunState, WaitingFor
from tarry.core.identities import Caller
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.cli import LIST_HEADER, Cli, until_listed
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}
WRITE = call("write_file", {"path": "a.md", "content": "x"}, id="call_write")
WRITE_LINE = 'write_file(path="a.md", content="x")'
WRITE_PREVIEW = ["    a.md: new file, 1 line", "    a.md:", "    │ x"]
"""What a person deciding on `WRITE` is shown of it (`tarry.cli.previews`)."""


async def gated_run(agent: Agent, *steps: Any, **input: Any) -> RunHandle:
    """A run whose first answer calls `write_file`, gated, and now waits for a decision."""
    agent.model.add(*(steps or (WRITE, say("done"))))
    run = await agent.start("write a.md", require_approval=["write_file"], **input)
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    return run


async def until_state(run: RunHandle, check: Callable[[RunState], bool]) -> RunState:
    """Polls the run's state until `check` holds; a query is the only view of it."""
    async with asyncio.timeout(deadline(30)):
        while not check(state := await run.state()):
            await asyncio.sleep(0.05)
    return state


async def tool_message(run: RunHandle) -> ChatMessage:
    return next(m for m in await run.transcript() if m.role == "tool")


async def decision_of(run: RunHandle) -> DecisionRecord:
    decision = (await tool_message(run)).decision
    assert decision is not None
    return decision


async def decisions_in_history(agent: Agent, run: RunHandle) -> list[str]:
    """The `decide` updates the run accepted (a validator's refusal leaves none). The
    CLI's own view of the run polls the event stream meanwhile, with updates of its own."""
    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    accepted = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    return [name for name in accepted if name == "decide"]


def clock(at: datetime) -> str:
    """A pattern for how `at` is shown: local time, after its date on another day than today."""
    return rf"(\d{{4}}-\d\d-\d\d )?{at.astimezone():%H:%M:%S}"


def workspace(agent: Agent, run: RunHandle) -> Path:
    return agent.workspace_root / run.id


# --- Deciding ---------------------------------------------------------------------------


async def test_approve_runs_the_tool_and_shows_its_result_and_the_answer(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    out = await cli.ok("approve", run.id)

    assert (workspace(cli.agent, run) / "a.md").read_text() == "x"
    decision = await decision_of(run)
    assert (decision.approved, decision.by) == (True, "update")
    lines = out.splitlines()
    assert lines[0].startswith("    ✓ approved in the CLI/API ")
    assert lines[1:] == ['    ← {"path": "a.md", "bytes": 1}', "agent: done"]


async def test_approve_json_prints_the_run_state_at_the_next_stop_point(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    state = RunState.model_validate_json(await cli.ok("approve", run.id, "call_write", "--json"))

    assert (state.phase, state.waiting_for, state.last_assistant_text) == (
        Phase.WAITING_USER,
        WaitingFor.INPUT,
        "done",
    )
    assert state.pending_approvals == []


async def test_reject_with_a_reason_tells_the_model_and_the_tool_does_not_run(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    out = await cli.ok("approve", run.id, "--reject", "--reason", "too risky")

    assert not (workspace(cli.agent, run) / "a.md").exists()
    seen = cli.agent.model.requests[1].body["messages"][-1]
    assert seen["role"] == "tool"
    assert json.loads(seen["content"])["error"] == {
        "code": "TOOL_REJECTED",
        "message": "too risky",
    }
    assert "    ← TOOL_REJECTED: too risky" in out.splitlines()
    assert out.splitlines()[-1] == "agent: done"


async def test_edited_arguments_are_what_the_tool_runs_with(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    edited = {"path": "b.md", "content": "edited"}

    await cli.ok("approve", run.id, "call_write", "--args", json.dumps(edited))

    assert (workspace(cli.agent, run) / "b.md").read_text() == "edited"
    assert not (workspace(cli.agent, run) / "a.md").exists()
    assert (await decision_of(run)).arguments == edited


async def test_edited_arguments_without_a_call_id_go_to_the_one_pending_call(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    await cli.ok("approve", run.id, "--args", '{"path": "b.md", "content": "edited"}')

    assert (workspace(cli.agent, run) / "b.md").read_text() == "edited"


async def test_approving_one_of_two_calls_returns_while_the_other_still_waits(cli: Cli) -> None:
    both = calls(
        ScriptedToolCall(name="write_file", arguments={"path": "a.md", "content": "x"}, id="c_a"),
        ScriptedToolCall(name="write_file", arguments={"path": "b.md", "content": "y"}, id="c_b"),
    )
    run = await gated_run(cli.agent, both, say("both done"))

    first = await cli.ok("approve", run.id, "c_a")
    second = await cli.ok("approve", run.id, "c_b")

    assert first.splitlines() == [
        'waiting for approval: write_file(path="b.md", content="y") [c_b]',
        "    b.md: new file, 1 line",
        "    b.md:",
        "    │ y",
    ]
    assert second.splitlines()[-1] == "agent: both done"
    assert sorted(p.name for p in workspace(cli.agent, run).iterdir()) == ["a.md", "b.md"]


# --- Gated runs started from the command line ---------------------------------------------


async def test_start_require_approval_holds_the_named_tool_for_a_decision(cli: Cli) -> None:
    cli.agent.model.add(WRITE, say("done"))

    run = await cli.start("write a.md", "--require-approval", "write_file")

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    assert [(p.call_id, p.tool, p.deadline) for p in state.pending_approvals] == [
        ("call_write", "write_file", None)
    ]
    assert not (workspace(cli.agent, run) / "a.md").exists()


async def test_start_approval_timeout_and_default_approve_run_the_call_at_its_deadline(
    cli: Cli,
) -> None:
    cli.agent.model.add(WRITE, say("Written at the deadline."))

    run = await cli.start(
        "write a.md", "--require-approval", "write_file",
        "--approval-timeout", "0.5", "--approval-default", "approve",
    )  # fmt: skip

    await until_state(run, lambda s: s.last_assistant_text == "Written at the deadline.")
    decision = await decision_of(run)
    assert (decision.approved, decision.by) == (True, "deadline")
    assert (workspace(cli.agent, run) / "a.md").read_text() == "x"


# --- Decisions the run refuses: one error line, nothing in history ------------------------


async def test_an_unknown_call_id_is_one_error_line_and_no_update(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    result = await cli("approve", run.id, "call_nope")

    result.assert_one_error_line("error: APPROVAL_UNKNOWN_CALL: ")
    assert await decisions_in_history(cli.agent, run) == []
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL


async def test_a_call_decided_already_is_one_error_line_and_no_update(cli: Cli) -> None:
    both = calls(
        ScriptedToolCall(name="write_file", arguments={"path": "a.md", "content": "x"}, id="c_a"),
        ScriptedToolCall(name="write_file", arguments={"path": "b.md", "content": "y"}, id="c_b"),
    )
    run = await gated_run(cli.agent, both, say("done"))
    await run.approve("c_a")  # the signal: no update in history
    await until_state(run, lambda s: [p.call_id for p in s.pending_approvals] == ["c_b"])

    result = await cli("approve", run.id, "c_a", "--reject")

    result.assert_one_error_line("error: APPROVAL_ALREADY_DECIDED: ")
    assert await decisions_in_history(cli.agent, run) == []


async def test_nothing_pending_is_one_error_line_and_no_update(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.agent.start("hi", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)

    result = await cli("approve", run.id)

    result.assert_one_error_line("error: APPROVAL_NOTHING_PENDING: ")
    assert await decisions_in_history(cli.agent, run) == []


async def test_edited_arguments_that_do_not_fit_the_tool_are_one_error_line_and_no_update(
    cli: Cli,
) -> None:
    run = await gated_run(cli.agent)

    result = await cli("approve", run.id, "call_write", "--args", '{"path": 1}')

    result.assert_one_error_line("error: APPROVAL_INVALID_ARGUMENTS: ")
    assert "write_file" in result.err
    assert await decisions_in_history(cli.agent, run) == []
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL


async def test_args_that_are_not_json_are_one_error_line_and_no_update(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    result = await cli("approve", run.id, "call_write", "--args", "{path: b.md}")

    result.assert_one_error_line("error: APPROVAL_INVALID_ARGUMENTS: --args is not JSON")
    assert await decisions_in_history(cli.agent, run) == []


async def test_args_with_reject_is_a_usage_error(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    result = await cli("approve", run.id, "--reject", "--args", '{"path": "b.md"}')

    result.assert_one_error_line("error: --args ")
    assert result.code == 2
    assert await decisions_in_history(cli.agent, run) == []


async def test_approving_an_unknown_run_is_one_error_line(cli: Cli) -> None:
    result = await cli("approve", "run-nosuchrun")

    result.assert_one_error_line("error: RUN_NOT_FOUND: no run 'run-nosuchrun'")


# --- Seeing what waits and what was decided ----------------------------------------------


async def test_status_shows_that_the_run_waits_for_approval_of_the_pending_call(
    cli: Cli,
) -> None:
    run = await gated_run(cli.agent)

    out = await cli.ok("status", run.id)

    rows, preview = out.split("\ncall_write:\n")
    fields = dict(line.split("  ", 1) for line in rows.splitlines())
    assert fields["waiting for"].strip() == "approval"
    assert fields["approvals"].strip() == f"{WRITE_LINE} [call_write]"
    assert preview.splitlines() == WRITE_PREVIEW


async def test_status_shows_the_deadline_of_a_pending_call(cli: Cli) -> None:
    run = await gated_run(cli.agent, approval_timeout=timedelta(hours=1))
    deadline = (await run.state()).pending_approvals[0].deadline
    assert deadline is not None

    out = await cli.ok("status", run.id)

    line = next(line for line in out.splitlines() if line.startswith("approvals"))
    assert re.search(rf"\[call_write\] · deadline {clock(deadline)}$", line), line


async def test_show_says_who_approved_a_call_and_when(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    await cli.ok("approve", run.id)
    at = (await decision_of(run)).at

    out = await cli.ok("show", run.id)

    you, called, decided, result, answer = out.splitlines()
    assert (you, called) == ("you: write a.md", f"    → {WRITE_LINE}")
    by = re.escape(cli.agent.tarry.caller.user)  # the CLI's user is this test's: `cli:$USER`
    assert re.fullmatch(rf"    ✓ approved in the CLI/API {clock(at)} by {by}", decided), decided
    assert (result, answer) == ('    ← {"path": "a.md", "bytes": 1}', "agent: done")


async def test_show_says_who_rejected_a_call_and_why(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    await run.approve(approved=False, reason="too risky")
    await run.wait_for(WAITING, TIMEOUT)
    at = (await decision_of(run)).at

    out = await cli.ok("show", run.id)

    decided = next(line for line in out.splitlines() if "✗" in line)
    by = re.escape(run.caller.user)
    expected = rf'    ✗ rejected by signal {clock(at)} by {by}: "too risky"'
    assert re.fullmatch(expected, decided), decided


async def test_show_notes_edited_arguments(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    await cli.ok("approve", run.id, "--args", '{"path": "b.md", "content": "y"}')

    out = await cli.ok("show", run.id)

    lines = out.splitlines()
    decided = next(i for i, line in enumerate(lines) if "✓ approved" in line)
    assert lines[decided + 1] == '    ✎ ran with edited arguments: path="b.md", content="y"'
    assert lines[decided + 2] == '    ← {"path": "b.md", "bytes": 1}'


async def test_show_says_a_call_expired_at_its_deadline(cli: Cli) -> None:
    cli.agent.model.add(WRITE, say("Nobody answered."))
    run = await cli.agent.start(
        "write a.md", require_approval=["write_file"], approval_timeout=timedelta(seconds=0.5)
    )
    # The deadline passes, the default (reject) applies and the agent answers.
    await until_state(run, lambda s: s.last_assistant_text == "Nobody answered.")
    at = (await decision_of(run)).at

    out = await cli.ok("show", run.id)

    decided = next(line for line in out.splitlines() if "✗" in line)
    assert re.fullmatch(rf"    ✗ expired at deadline {clock(at)}", decided), decided
    assert "    ← TOOL_APPROVAL_EXPIRED: " in out
    assert tool_result(await tool_message(run))["error"]["code"] == "TOOL_APPROVAL_EXPIRED"


# --- Stop points and listing --------------------------------------------------------------


async def test_watch_stops_at_a_call_waiting_for_approval_and_says_so(cli: Cli) -> None:
    run = await gated_run(cli.agent)

    out = await cli.ok("watch", run.id)

    assert out.splitlines() == [
        "you: write a.md",
        f"    → {WRITE_LINE}",
        f"waiting for approval: {WRITE_LINE} [call_write]",
        *WRITE_PREVIEW,
    ]


async def test_send_stops_at_a_call_waiting_for_approval_and_says_so(cli: Cli) -> None:
    cli.agent.model.add(say("What shall I write?"), WRITE, say("done"))
    run = await cli.agent.start("hi", require_approval=["write_file"])
    await run.wait_for(WAITING, TIMEOUT)

    out = await cli.ok("send", run.id, "x into a.md")

    assert out.splitlines() == [
        f"    → {WRITE_LINE}",
        f"waiting for approval: {WRITE_LINE} [call_write]",
        *WRITE_PREVIEW,
    ]


async def test_list_waiting_for_approval_finds_runs_waiting_for_approval_not_for_input(
    cli: Cli,
) -> None:
    approval = await gated_run(cli.agent)
    cli.agent.model.add(say("Hello!"))
    reply = await cli.agent.start("hi")
    await reply.wait_for(WAITING, TIMEOUT)
    client = cli.agent.tarry.client
    await until_listed(client, "TarryWaitingFor = 'approval'", approval.id)
    await until_listed(client, "TarryWaitingFor = 'input'", reply.id)

    out = await cli.ok("list", "--waiting-for", "approval", "--limit", "1000", "--json")

    rows = {row["run_id"]: row for row in json.loads(out)}
    assert rows[approval.id]["waiting_for"] == "approval"
    assert reply.id not in rows
    assert {row["waiting_for"] for row in rows.values()} == {"approval"}


async def test_list_shows_what_a_run_waits_for(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    await until_listed(cli.agent.tarry.client, "TarryWaitingFor = 'approval'", run.id)

    out = await cli.ok("list", "--phase", "WaitingUser", "--waiting-for", "approval")

    assert out.splitlines()[0].split() == LIST_HEADER
    row = next(line.split() for line in out.splitlines() if run.id in line)
    assert row[:5] == [run.id, "WaitingUser", "1", "default", "approval"]


async def test_an_invalid_waiting_for_is_one_error_line(cli: Cli) -> None:
    result = await cli("list", "--waiting-for", "coffee")

    result.assert_one_error_line(
        "error: unknown --waiting-for 'coffee'; use one of input, approval"
    )
    assert result.code == 2


# --- Who decides ------------------------------------------------------------------------


async def test_a_decision_by_a_user_outside_the_approvers_is_one_error_line_and_nothing(
    cli: Cli,
) -> None:
    run = await gated_run(cli.agent, approvers={"write_file": ["alice"]})
    mallory = Cli(cli.env | {"TARRY_USER": "mallory"}, cli.agent)

    result = await mallory("approve", run.id)

    result.assert_one_error_line("error: APPROVAL_NOT_ALLOWED: mallory may not decide write_file")
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL
    assert await decisions_in_history(cli.agent, run) == []


async def test_the_cli_decides_as_cli_and_the_login_name_by_default(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    login = {"LOGNAME": "pat", "USER": "pat"}

    await Cli(cli.env | login, cli.agent).ok("approve", run.id)

    assert (await decision_of(run)).user == "cli:pat"


async def test_tarry_user_decides_with_the_groups_of_the_config_file(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text('[api.groups]\nops = ["carol"]\n')
    run = await gated_run(cli.agent, approvers={"write_file": ["ops"]})
    carol = Cli(cli.env | {"TARRY_USER": "carol", "TARRY_CONFIG": str(config)}, cli.agent)

    await carol.ok("approve", run.id)

    assert (await decision_of(run)).user == "carol"
    assert (workspace(cli.agent, run) / "a.md").read_text() == "x"


async def test_start_names_the_approvers_of_each_tool(cli: Cli) -> None:
    cli.agent.model.add(WRITE, say("done"))

    run = await cli.start(
        "write a.md",
        "--require-approval",
        "write_file",
        "--approver",
        "write_file=ops, alice",
        "--approver",
        "*=bob",
    )

    state = await until_state(run, lambda s: s.waiting_for is WaitingFor.APPROVAL)
    assert [p.approvers for p in state.pending_approvals] == [["ops", "alice"]]


async def test_an_approver_option_without_a_tool_is_refused(cli: Cli) -> None:
    result = await cli("start", "hi", "--approver", "ops")

    result.assert_one_error_line("error: --approver 'ops': give TOOL=USER_OR_GROUP")


async def test_status_says_who_stopped_the_run(cli: Cli) -> None:
    run = await gated_run(cli.agent)
    await cli.agent.tarry.get(run.id, Caller("bob")).stop("enough")
    await run.result()

    out = await cli.ok("status", run.id)

    assert ["stopped", "by", "bob"] in [line.split() for line in out.splitlines()]
