"""The `tarry` command line as a person or a script meets it, against the test server,
served by the test's in-process worker: most commands run in this process, as the entry
point runs them, and the installed entry point runs as its own process where the process
is what a test specifies (`tests/cli.py`)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import uuid
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tarry.client import RunHandle, Tarry
from tarry.client.run_list import LATEST_SEGMENT
from tarry.contracts import SUMMARY_MEMO, ErrorCode, Phase, RunInput, RunState, Usage
from tarry.testing.scripted_model import ScriptedModel, call, fail, say
from tests.cli import (
    CLOSED_PORT,
    LIST_HEADER,
    TARRY,
    Cli,
    Gate,
    cli_env,
    finish,
    until_listed,
)
from tests.conftest import CANARY_KEY, FAST_TIMEOUTS, Agent
from tests.deadline import TIMEOUT, deadline
from tests.test_run_ids import BAD_IDS

WAITING = {Phase.WAITING_USER}


# --- Starting and reading runs ---------------------------------------------------------


async def test_start_prints_the_run_id_of_a_run_that_then_answers(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))

    out = await cli.ok("start", "hi")

    run = cli.agent.tarry.get(out.strip())
    cli.agent.runs.append(run)
    assert out == f"{run.id}\n"
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.last_assistant_text == "Hello!"


async def test_start_options_reach_the_run(cli: Cli) -> None:
    cli.agent.model.add(say("42"))
    run_id = f"run-{uuid.uuid4().hex[:8]}"

    run = await cli.start(
        "six times seven?", "--id", run_id, "--system", "Be brief.",
        "--tools", "read_file,list_files", "--tool", "write_file", "--mode", "task",
    )  # fmt: skip

    assert run.id == run_id
    result = await run.result()
    assert (result.phase, result.output) == (Phase.COMPLETED, "42")
    request = cli.agent.model.requests[0].body
    assert request["messages"][0] == {"role": "system", "content": "Be brief."}
    offered = [t["function"]["name"] for t in request["tools"]]
    assert sorted(offered) == ["finish", "list_files", "read_file", "write_file"]


async def summaries_after_a_turn(cli: Cli, *run_ids: str) -> dict[str, str | None]:
    """`tarry list`'s summary of each run, once visibility shows each past its first turn
    (and so past the message that started it)."""
    async with asyncio.timeout(deadline(30)):
        while True:
            rows = json.loads(await cli.ok("list", "--json", "--limit", "1000"))
            listed = {row["run_id"]: row for row in rows if row["run_id"] in run_ids}
            if len(listed) == len(run_ids) and all(r["turns"] for r in listed.values()):
                return {run_id: row["summary"] for run_id, row in listed.items()}
            await asyncio.sleep(0.2)


async def test_a_run_started_without_a_prompt_is_listed_by_its_first_message(cli: Cli) -> None:
    cli.agent.model.add(say("Balloons."), say("Chocolate."))
    empty = await cli.start("--id", f"run-untitled-{uuid.uuid4().hex[:6]}")
    await cli.ok("send", empty.id, "Plan the launch party\nwith balloons")
    got_or_created = f"run-thread-{uuid.uuid4().hex[:6]}"
    await cli.agent.tarry.send(
        got_or_created, "Order the cake", start=RunInput(timeouts=FAST_TIMEOUTS)
    )
    cli.agent.runs.append(cli.agent.tarry.get(got_or_created))

    summaries = await summaries_after_a_turn(cli, empty.id, got_or_created)

    assert summaries == {empty.id: "Plan the launch party", got_or_created: "Order the cake"}


async def test_a_summary_taken_from_the_first_message_outlives_continue_as_new(
    agent: Agent,
) -> None:
    agent.model.add(say("Chocolate."), say("Twelve."))
    run_id = f"run-thread-{uuid.uuid4().hex[:6]}"
    start = RunInput(timeouts=FAST_TIMEOUTS, continue_as_new_after_turns=1)
    await agent.tarry.send(run_id, "Order the cake", start=start)
    run = agent.tarry.get(run_id)
    agent.runs.append(run)
    await run.send("And candles")  # to the next run of the chain, which hands over again
    await run.wait_for(WAITING, TIMEOUT)  # the last run of the chain has taken over

    description = await run.describe()

    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    assert (await description.memo())[SUMMARY_MEMO] == "Order the cake"


async def test_start_max_turns_asks_the_user_after_that_many_model_calls(cli: Cli) -> None:
    cli.agent.model.add(*(call("list_files") for _ in range(3)), say("never asked"))

    run = await cli.start("look around", "--max-turns", "2")

    state = await run.wait_for(WAITING, TIMEOUT)
    assert (state.turn, state.warning) == (2, ErrorCode.ENGINE_MAX_TURNS)
    assert len(cli.agent.model.requests) == 2


async def test_start_refuses_a_tool_name_the_worker_does_not_have(cli: Cli) -> None:
    result = await cli("start", "--require-approval", "write_flie", "tidy up")

    result.assert_one_error_line("error: TOOL_NOT_FOUND: no tool named 'write_flie'")
    assert "write_file" in result.err
    assert cli.agent.model.requests == []


async def test_start_refuses_a_model_profile_the_worker_does_not_have(cli: Cli) -> None:
    result = await cli("start", "--model", "NOSUCH", "hi")

    result.assert_one_error_line(
        "error: LLM_UNKNOWN_PROFILE: no model profile 'NOSUCH' on this worker; configured: default"
    )
    assert cli.agent.model.requests == []


@pytest.mark.parametrize("run_id", BAD_IDS.values(), ids=BAD_IDS.keys())
async def test_a_bad_run_id_is_one_error_line_at_every_command(cli: Cli, run_id: str) -> None:
    results = [await cli("start", "--id", run_id, "hi"), await cli("status", run_id)]

    for result in results:
        result.assert_one_error_line("error: RUN_ID_INVALID: a run id ")
        assert result.code == 2
    assert cli.agent.model.requests == []


async def test_start_reads_the_prompt_from_stdin_for_a_dash(cli: Cli) -> None:
    cli.agent.model.add(say("Got it."))

    run = await cli.start("-", stdin="line one\nline two\n")

    await run.wait_for(WAITING, TIMEOUT)
    assert (await run.transcript())[0].content == "line one\nline two"


async def test_status_shows_phase_turn_and_usage(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    out = await cli.ok("status", run.id)

    fields = dict(line.split(maxsplit=1) for line in out.splitlines())
    assert fields == {
        "run": run.id,
        "phase": "WaitingUser",
        "turn": "1 (1 since the last reply)",
        "usage": "15 tokens (10 prompt, 5 completion)",
        "messages": "2",
        "pending": "0 replies",
        "warning": "-",
        "error": "-",
    }


async def test_status_json_is_the_run_state(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    state = RunState.model_validate_json(await cli.ok("status", run.id, "--json"))

    assert state == await run.state()


async def test_show_prints_the_transcript(cli: Cli) -> None:
    cli.agent.model.add(call("list_files"), say("Nothing here."))
    run = await cli.start("what is there?")
    await run.wait_for(WAITING, TIMEOUT)

    out = await cli.ok("show", run.id)

    assert out.splitlines() == [
        "you: what is there?",
        "    → list_files()",
        "    ← []",
        "agent: Nothing here.",
    ]


async def test_show_json_from_n_lists_the_later_messages(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    messages = json.loads(await cli.ok("show", run.id, "--from", "1", "--json"))

    assert [(m["role"], m["content"]) for m in messages] == [("assistant", "Hello!")]


async def test_show_and_reply_follow_a_run_across_continue_as_new(cli: Cli) -> None:
    cli.agent.model.add(say("One."), say("Two."), say("Three."))
    run = await cli.agent.start("one", continue_as_new_after_turns=1)
    await run.wait_for(WAITING, TIMEOUT)
    await run.send("two")

    assert await cli.ok("reply", run.id, "three") == ""
    state = await run.wait_for(WAITING, TIMEOUT)
    while state.turn < 3:
        state = await run.wait_for(WAITING, TIMEOUT)
    messages = json.loads(await cli.ok("show", run.id, "--json"))

    assert [m["content"] for m in messages] == ["one", "One.", "two", "Two.", "three", "Three."]


# --- Talking to runs ---------------------------------------------------------------------


async def test_reply_queues_a_message_the_run_answers(cli: Cli) -> None:
    cli.agent.model.add(say("Your name?"), say("Hi, Ada."))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    assert await cli.ok("reply", run.id, "Ada") == ""

    await cli.agent.model.wait_for_requests(2, timeout=deadline(10))
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.last_assistant_text == "Hi, Ada."


async def test_reply_reads_the_text_from_stdin_for_a_dash(cli: Cli) -> None:
    cli.agent.model.add(say("Your name?"), say("Hi, Ada."))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    await cli.ok("reply", run.id, "-", stdin="Ada Lovelace\n")

    await cli.agent.model.wait_for_requests(2, timeout=deadline(10))
    await run.wait_for(WAITING, TIMEOUT)
    assert [m.content for m in await run.transcript() if m.role == "user"] == [
        "hello",
        "Ada Lovelace",
    ]


async def test_send_waits_and_prints_the_tool_calls_and_the_answer(cli: Cli) -> None:
    cli.agent.model.add(say("Your name?"), call("list_files"), say("No files, Ada."))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    out = await cli.ok("send", run.id, "Ada")

    assert out.splitlines() == ["    → list_files()", "    ← []", "agent: No files, Ada."]


async def test_send_json_prints_the_run_state_at_the_answer(cli: Cli) -> None:
    cli.agent.model.add(say("Your name?"), say("Hi, Ada."))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    state = RunState.model_validate_json(await cli.ok("send", run.id, "Ada", "--json"))

    assert (state.phase, state.turn, state.last_assistant_text) == (
        Phase.WAITING_USER,
        2,
        "Hi, Ada.",
    )


async def test_send_to_a_run_that_then_fails_exits_1_with_its_error_on_stderr(cli: Cli) -> None:
    cli.agent.model.add(say("Your name?"), fail(401))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    result = await cli("send", run.id, "Ada")

    result.assert_one_error_line("error: run failed: LLM_AUTH_FAILED: ")
    assert result.code == 1
    assert (await run.state()).phase is Phase.FAILED


async def test_send_json_to_a_run_that_then_fails_prints_its_state_and_exits_1(cli: Cli) -> None:
    cli.agent.model.add(say("Your name?"), fail(401))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    result = await cli("send", run.id, "Ada", "--json")

    result.assert_one_error_line("error: run failed: LLM_AUTH_FAILED: ")
    assert RunState.model_validate_json(result.out).phase is Phase.FAILED


async def test_pause_stops_a_working_run_at_the_next_turn_boundary(
    gated: tuple[Cli, Gate],
) -> None:
    cli, gate = gated
    cli.agent.model.add(call("gate"), say("never asked"))
    run = await cli.start("go")
    await gate.entered.wait()

    await cli.ok("pause", run.id)
    gate.opened.set()

    state = await run.wait_for(WAITING, TIMEOUT)
    assert [m.role for m in await run.transcript()] == ["user", "assistant", "tool"]
    assert state.turn == 1
    assert len(cli.agent.model.requests) == 1


async def test_ctrl_c_during_send_pauses_the_run_and_a_second_one_leaves(
    gated: tuple[Cli, Gate],
) -> None:
    cli, gate = gated
    cli.agent.model.add(call("gate"), say("never asked"))
    run = await cli.start("go")
    await gate.entered.wait()
    sending = await cli.spawn("send", run.id, "hurry up")
    assert sending.stdout is not None
    async with asyncio.timeout(deadline(30)):
        # Queued in the run: the command is following it and handles Ctrl-C.
        while (await run.state()).pending_inputs == 0:
            await asyncio.sleep(0.05)

        sending.send_signal(signal.SIGINT)
        said = await sending.stdout.readline()
    sending.send_signal(signal.SIGINT)
    result = await finish(sending)
    gate.opened.set()

    assert said.decode().startswith("pausing at the next turn boundary")
    assert (result.code, result.err) == (130, "")
    # The reply was already queued, so the run answers it before it waits: a pause never
    # leaves a delivered reply unanswered.
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.turn == 2
    assert state.last_assistant_text == "never asked"


async def test_ctrl_c_while_the_answer_streams_says_so_on_a_line_of_its_own(cli: Cli) -> None:
    answer = " ".join(f"word{i}" for i in range(40))
    cli.agent.model.add(say("Your name?"), say(answer, chunk_chars=3, chunk_delay=0.1))
    run = await cli.start("hello")
    await run.wait_for(WAITING, TIMEOUT)
    sending = await cli.spawn("send", run.id, "Ada")
    assert sending.stdout is not None
    async with asyncio.timeout(deadline(30)):
        # The answer's first words are on screen, its line still open.
        assert await sending.stdout.readuntil(b"agent: word") == b"agent: word"

    sending.send_signal(signal.SIGINT)
    result = await finish(sending)

    assert (result.code, result.err) == (0, "")
    lines = ("agent: word" + result.out).splitlines()
    notice = "pausing at the next turn boundary… (Ctrl-C again leaves)"
    assert notice in lines
    # The words go on after it, and put together they are the answer, each once.
    said = [line.removeprefix("agent: ").removeprefix("… ") for line in lines if line != notice]
    assert "".join(said) == answer


async def test_stop_with_a_reason_aborts_a_working_run(gated: tuple[Cli, Gate]) -> None:
    cli, gate = gated
    cli.agent.model.add(call("gate"), say("never asked"))
    run = await cli.start("go")
    await gate.entered.wait()

    await cli.ok("stop", run.id, "--reason", "changed my mind")
    gate.opened.set()

    result = await run.result()
    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.ENGINE_ABORTED
    assert "changed my mind" in result.error.message
    assert len(cli.agent.model.requests) == 1


def tokens(total: int) -> Usage:
    """A model call's usage of `total` tokens."""
    return Usage(prompt_tokens=total, total_tokens=total)


async def test_budget_shows_the_raised_budget_and_where_the_run_stops_next(cli: Cli) -> None:
    cli.agent.model.add(
        call("list_files", usage=tokens(120)), say("Three files.", usage=tokens(160))
    )
    run = await cli.start("look around", "--max-tokens", "100")
    assert (await run.wait_for(WAITING, TIMEOUT)).waiting_for == "budget"

    out = await cli.ok("budget", run.id, "--tokens", "1000")

    assert out.splitlines() == [
        "budget: 1000 tokens",
        "agent: Three files.",
        f"the run waits for your reply: `tarry send {run.id} TEXT`",
    ]


async def test_budget_of_a_run_that_spends_it_again_says_so(cli: Cli) -> None:
    cli.agent.model.add(
        call("list_files", usage=tokens(120)), call("list_files", usage=tokens(220))
    )
    run = await cli.start("look around", "--max-tokens", "100")
    await run.wait_for(WAITING, TIMEOUT)

    out = await cli.ok("budget", run.id, "--tokens", "200")

    assert out.splitlines() == [
        "budget: 200 tokens",
        "warning: BUDGET_EXCEEDED",
        f"the run spent its budget; `tarry budget {run.id} --tokens N --cost USD` raises it",
    ]


async def test_stop_completes_a_waiting_run_and_says_so(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    said = await cli.ok("stop", run.id)

    assert said == f"stopped run {run.id}\n"
    assert (await run.result()).phase is Phase.COMPLETED


async def test_the_reason_a_waiting_run_was_stopped_with_is_in_status_show_and_result(
    cli: Cli,
) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    await cli.ok("stop", run.id, "--reason", "done for today")

    result = await run.result()
    assert (result.phase, result.stop_reason) == (Phase.COMPLETED, "done for today")
    status = (await cli.ok("status", run.id)).splitlines()
    assert ["stopped", "done", "for", "today"] in [line.split() for line in status]
    assert (await cli.ok("show", run.id)).splitlines()[-1] == "stopped: done for today"


async def test_resume_goes_on_with_a_run_a_model_error_failed(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"), fail(400), say("Back again."))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    await run.reply("and now?")
    assert (await run.result()).phase is Phase.FAILED

    out = await cli.ok("resume", run.id)

    assert f"run {run.id} goes on" in out
    assert "LLM_HTTP_ERROR" in out
    sent = await cli.ok("send", run.id, "try again")
    assert "Back again." in sent
    transcript = [m.content for m in await run.transcript()]
    assert transcript == ["hi", "Hello!", "and now?", "try again", "Back again."]


# --- Following runs --------------------------------------------------------------------


async def test_watch_prints_messages_as_they_come_and_exits_at_the_stop_point(
    gated: tuple[Cli, Gate],
) -> None:
    cli, gate = gated
    cli.agent.model.add(call("gate"), say("Through."))
    run = await cli.start("go")
    await gate.entered.wait()

    watching = await cli.spawn("watch", run.id)
    assert watching.stdout is not None
    async with asyncio.timeout(deadline(30)):
        so_far = [await watching.stdout.readline() for _ in range(2)]
    gate.opened.set()
    result = await finish(watching)

    assert [line.decode() for line in so_far] == ["you: go\n", "    → gate()\n"]
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == ["    ← opened", "agent: Through."]


async def test_watch_json_prints_one_event_per_line(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")

    out = await cli.ok("watch", run.id, "--json")

    events = [json.loads(line) for line in out.splitlines()]
    messages = [e["message"]["content"] for e in events if e["kind"] == "message"]
    assert messages == ["hi", "Hello!"]
    assert events[-1]["kind"] == "stop"
    assert events[-1]["state"]["phase"] == "WaitingUser"


async def test_watch_says_when_the_run_has_ended(cli: Cli) -> None:
    cli.agent.model.add(say("42"))
    run = await cli.start("six times seven?", "--mode", "task")

    out = await cli.ok("watch", run.id)

    assert out.splitlines()[-1] == "run completed"


async def test_watch_of_a_failed_run_exits_1_with_its_error_on_stderr(cli: Cli) -> None:
    cli.agent.model.add(fail(401))
    run = await cli.start("hi")
    assert (await run.result()).phase is Phase.FAILED

    result = await cli("watch", run.id)

    result.assert_one_error_line("error: run failed: LLM_AUTH_FAILED: ")
    assert result.code == 1
    assert result.out.splitlines() == ["you: hi"]


async def test_watch_json_of_a_failed_run_ends_with_its_stop_event_and_exits_1(cli: Cli) -> None:
    cli.agent.model.add(fail(401))
    run = await cli.start("hi")
    await run.result()

    result = await cli("watch", run.id, "--json")

    result.assert_one_error_line("error: run failed: LLM_AUTH_FAILED: ")
    assert json.loads(result.out.splitlines()[-1])["state"]["phase"] == "Failed"


async def test_list_shows_a_run_with_its_phase_turns_profile_and_summary(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("Summarise notes.md\nand keep it short")
    await run.wait_for(WAITING, TIMEOUT)
    await until_listed(cli.agent.tarry.client, "TarryPhase = 'WaitingUser'", run.id)

    out = await cli.ok("list")

    row = next(line.split() for line in out.splitlines() if run.id in line)
    assert row[:5] + row[6:] == [
        run.id,
        "WaitingUser",
        "1",
        "default",
        "input",
        "Summarise",
        "notes.md",
    ]
    assert out.splitlines()[0].split() == LIST_HEADER


async def test_list_by_phase_finds_waiting_runs_and_not_completed_ones(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"), say("42"))
    waiting = await cli.start("hi")
    await waiting.wait_for(WAITING, TIMEOUT)
    completed = await cli.start("six times seven?", "--mode", "task")
    await completed.result()
    client = cli.agent.tarry.client
    await until_listed(client, "TarryPhase = 'WaitingUser'", waiting.id)
    await until_listed(client, "TarryPhase = 'Completed'", completed.id)

    out = await cli.ok("list", "--phase", "WaitingUser", "--limit", "1000", "--json")

    rows = {row["run_id"]: row for row in json.loads(out)}
    assert rows[waiting.id]["phase"] == "WaitingUser"
    assert completed.id not in rows
    assert {row["phase"] for row in rows.values()} == {"WaitingUser"}


async def test_a_run_terminated_while_waiting_is_listed_as_failed_and_waits_for_no_one(
    cli: Cli,
) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    client = cli.agent.tarry.client
    await client.get_workflow_handle(run.id).terminate("an operator's terminate")
    await until_listed(client, "ExecutionStatus = 'Terminated'", run.id)

    listed = {
        what: {row["run_id"]: row["phase"] for row in json.loads(await cli.ok("list", *how))}
        for what, how in {
            "waiting": ("--phase", "WaitingUser", "--limit", "1000", "--json"),
            "failed": ("--phase", "Failed", "--limit", "1000", "--json"),
            "for input": ("--waiting-for", "input", "--limit", "1000", "--json"),
        }.items()
    }

    assert run.id not in listed["waiting"]
    assert run.id not in listed["for input"]
    assert listed["failed"][run.id] == "Failed"


async def test_list_shows_a_run_that_handed_over_once_with_its_latest_turns(cli: Cli) -> None:
    cli.agent.model.add(say("One."), say("Two."), say("Three."))
    run = await cli.agent.start("count", continue_as_new_after_turns=1)
    await run.wait_for(WAITING, TIMEOUT)
    await run.send("again")
    await run.send("and again")
    # Not the segment that handed over at turn 3: the one it handed over to.
    await until_listed(cli.agent.tarry.client, f"TarryTurns = 3 AND {LATEST_SEGMENT}", run.id)

    out = await cli.ok("list", "--limit", "1000", "--json")

    rows = [row for row in json.loads(out) if row["run_id"] == run.id]
    assert [(row["phase"], row["turns"]) for row in rows] == [("WaitingUser", 3)]


@pytest.mark.parametrize("command", [["approve"], ["status"], ["demo"], []])
async def test_help_shows_no_value_beside_an_on_off_flag(cli: Cli, command: list[str]) -> None:
    cli.env["COLUMNS"] = "120"

    out = await cli.ok(*command, "--help")

    flags = [line for line in out.splitlines() if re.search(r"--(json|reject|keep|version)", line)]
    assert flags
    assert not [line for line in flags if "<bool>" in line]


def help_panels(help_text: str) -> dict[str, list[str]]:
    """The command panels of `tarry --help` and the commands each lists, in order."""
    panels: dict[str, list[str]] = {}
    commands: list[str] = []
    for line in help_text.splitlines():
        if title := re.match(r"╭─ (.+?) ─", line):
            commands = panels.setdefault(title.group(1), [])
        elif name := re.match(r"│ (\S+)  ", line):
            commands.append(name.group(1))
    panels.pop("Options")
    return panels


async def test_help_groups_the_commands_in_a_panel_per_command_group(cli: Cli) -> None:
    cli.env["COLUMNS"] = "100"

    out = await cli.ok("--help")

    assert help_panels(out) == {
        "Runs": [
            "start",
            "reply",
            "send",
            "chat",
            "pause",
            "reply-policy",
            "pin",
            "unpin",
            "stop",
            "fork",
            "resume",
            "search",
            "index",
        ],
        "Watching runs": ["status", "show", "watch", "list", "audit"],
        "Approvals and budget": ["approve", "budget", "usage", "limits", "connections"],
        "Model": ["retry", "model"],
        "Local stack": ["dev", "worker", "scripted-model", "demo", "doctor"],
        "Servers": ["serve", "mcp"],
        "Schedules": ["schedule"],
        "Evaluation": ["dataset", "eval"],
        "Memory": ["memory"],
    }


async def test_version_prints_the_package_version(cli: Cli) -> None:
    assert await cli.ok("--version") == f"tarry {version('tarry')}\n"


# --- Errors: one line on stderr, a non-zero exit -------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["show"],
        ["watch"],
        ["reply", "hi"],
        ["send", "hi"],
        ["pause"],
        ["stop"],
    ],
)
async def test_an_unknown_run_is_one_error_line(cli: Cli, command: list[str]) -> None:
    name, *rest = command

    result = await cli(name, "run-nosuchrun", *rest)

    result.assert_one_error_line("error: RUN_NOT_FOUND: no run 'run-nosuchrun'")


async def test_a_reply_to_an_ended_run_is_one_error_line(cli: Cli) -> None:
    cli.agent.model.add(say("42"))
    run = await cli.start("six times seven?", "--mode", "task")
    await run.result()

    result = await cli("reply", run.id, "more")

    result.assert_one_error_line("error: RUN_ENDED: ")


async def test_sending_to_an_ended_run_is_one_error_line(cli: Cli) -> None:
    cli.agent.model.add(say("42"))
    run = await cli.start("six times seven?", "--mode", "task")
    await run.result()

    result = await cli("send", run.id, "more")

    result.assert_one_error_line("error: RUN_ENDED: ")


@pytest.mark.parametrize("command", ["reply", "send"])
async def test_an_empty_message_is_one_error_line(cli: Cli, command: str) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    result = await cli(command, run.id, "-", stdin="  \n")

    result.assert_one_error_line("error: INPUT_EMPTY: ")
    assert (await run.state()).message_count == 2


async def unserved_run(cli: Cli) -> tuple[RunHandle, str]:
    """A run on a task queue no worker polls, and that queue; the command line's
    TARRY_TASK_QUEUE names it, as it would for the person who started the run."""
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    cli.env["TARRY_TASK_QUEUE"] = queue
    run = await Tarry(cli.agent.tarry.client, queue).start("Summarise notes.md")
    return run, queue


async def end(cli: Cli, run: RunHandle) -> None:
    """Ends a run no worker will ever serve."""
    await cli.agent.tarry.client.get_workflow_handle(run.id).terminate("the test is over")


@pytest.mark.timeout(deadline(60))
async def test_status_without_a_worker_names_the_queue_and_shows_what_temporal_knows(
    cli: Cli,
) -> None:
    run, queue = await unserved_run(cli)

    result = await cli("status", run.id)

    result.assert_one_error_line(f"error: RUN_NOT_SERVED: no worker polls task queue {queue!r}")
    assert "start one with `tarry worker`" in result.err
    assert "`tarry dev`" in result.err
    fields = dict(line.split(maxsplit=1) for line in result.out.splitlines())
    assert (fields["run"], fields["summary"]) == (run.id, "Summarise notes.md")
    await end(cli, run)


@pytest.mark.timeout(deadline(60))
@pytest.mark.parametrize("command", [["send", "hi"], ["send", "hi", "--json"], ["watch"], ["show"]])
async def test_a_command_that_needs_a_worker_names_the_queue_when_none_polls(
    cli: Cli, command: list[str]
) -> None:
    run, queue = await unserved_run(cli)
    name, *rest = command

    result = await cli(name, run.id, *rest)

    result.assert_one_error_line(f"error: RUN_NOT_SERVED: no worker polls task queue {queue!r}")
    assert [t for t in await cli.agent.event_types(run) if "UPDATE" in t] == []
    await end(cli, run)


async def test_a_start_naming_tools_without_a_worker_says_so_and_leaves_the_check_to_the_run(
    cli: Cli,
) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    cli.env["TARRY_TASK_QUEUE"] = queue

    result = await cli("start", "look", "--tools", "raed_file")

    assert result.code == 0, result.err
    run = cli.agent.tarry.get(result.out.strip())
    assert result.err == (
        f"warning: no worker polls task queue {queue!r}, so run {run.id!r} cannot answer; "
        f"start one with `tarry worker` (TARRY_TASK_QUEUE={queue}) or `tarry dev`; "
        "the run checks its tools when a worker takes it\n"
    )
    await end(cli, run)


@pytest.mark.parametrize("command", [["status", "run-x"], ["start", "hi"], ["list"], ["worker"]])
async def test_an_unreachable_server_is_one_error_line(cli: Cli, command: list[str]) -> None:
    cli.env["TEMPORAL_ADDRESS"] = CLOSED_PORT

    result = await cli(*command)

    result.assert_one_error_line(f"error: cannot reach Temporal at {CLOSED_PORT}; ")
    assert "tarry dev" in result.err
    assert "TEMPORAL_ADDRESS" in result.err


async def test_an_address_that_is_not_one_is_one_error_line(cli: Cli) -> None:
    cli.env["TEMPORAL_ADDRESS"] = "not an address"

    result = await cli("status", "run-x")

    result.assert_one_error_line("error: TEMPORAL_ADDRESS='not an address' is not an address (")
    assert "host:port" in result.err


async def test_an_invalid_phase_is_one_error_line(cli: Cli) -> None:
    result = await cli("list", "--phase", "Sleeping")

    result.assert_one_error_line("error: unknown --phase 'Sleeping'; use one of Running, ")
    assert result.code == 2


async def test_starting_a_run_id_twice_is_one_error_line(cli: Cli) -> None:
    cli.agent.model.add(say("Hello!"))
    run = await cli.start("hi")

    result = await cli("start", "hi again", "--id", run.id)

    result.assert_one_error_line(f"error: RUN_EXISTS: a run with id {run.id!r} exists already")


async def test_a_usage_error_exits_2_without_a_traceback(cli: Cli) -> None:
    result = await cli("start", "--max-turns", "many")

    assert result.code == 2
    assert "--max-turns" in result.err
    assert "Traceback" not in result.err


async def test_an_unknown_mode_is_one_plain_error_line(cli: Cli) -> None:
    result = await cli("start", "hi", "--mode", "sometimes")

    result.assert_one_error_line("error: unknown --mode 'sometimes'; use one of chat, task")
    assert result.code == 2


async def test_an_approval_timeout_that_is_no_duration_is_one_error_line(cli: Cli) -> None:
    result = await cli("start", "hi", "--approval-timeout", "soon")

    result.assert_one_error_line("error: --approval-timeout: ")
    assert result.code == 2


# --- Serving ------------------------------------------------------------------------------


async def test_worker_serves_runs_until_sigterm(temporal: Client, tmp_path: Path) -> None:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    async with ScriptedModel([say("Hello from tarry worker.")]) as model:
        env = cli_env(temporal.service_client.config.target_host, task_queue) | {
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": CANARY_KEY,
            "TARRY_MODEL": "scripted",
            "TARRY_WORKSPACE_ROOT": str(tmp_path),
        }
        worker = await asyncio.create_subprocess_exec(
            str(TARRY), "worker", env=env, stderr=asyncio.subprocess.PIPE
        )
        assert worker.stderr is not None
        async with asyncio.timeout(deadline(30)):
            while b"worker ready" not in await worker.stderr.readline():
                pass

        run = await Tarry(temporal, task_queue).start("hello")
        state = await run.wait_for(WAITING, TIMEOUT)
        worker.send_signal(signal.SIGTERM)
        logs = await asyncio.wait_for(worker.stderr.read(), timeout=deadline(30))
        code = await worker.wait()

    assert state.last_assistant_text == "Hello from tarry worker."
    assert code == 0, logs.decode()


async def test_scripted_model_serves_its_script_until_ctrl_c(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "scripted hello"}]))
    model = await asyncio.create_subprocess_exec(
        str(TARRY), "scripted-model", "--port", "0", "--script", str(script),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert model.stdout is not None
    async with asyncio.timeout(deadline(30)):
        base_url = (await model.stdout.readline()).decode().split()[-1]

    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{base_url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
        )
    model.send_signal(signal.SIGINT)

    assert response.json()["choices"][0]["message"]["content"] == "scripted hello"
    assert await asyncio.wait_for(model.wait(), timeout=deadline(30)) == 0


async def test_start_tool_choice_makes_the_model_call_that_tool(cli: Cli) -> None:
    cli.agent.model.add(call("list_files"), say("Empty."))

    run = await cli.start("look around", "--tool-choice", "list_files")

    await run.wait_for(WAITING, TIMEOUT)
    sent = cli.agent.model.requests[0].body["tool_choice"]
    assert sent == {"type": "function", "function": {"name": "list_files"}}
