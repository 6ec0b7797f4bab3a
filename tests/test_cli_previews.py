"""What a person deciding at the command line sees of a gated call: its preview whole
(`tarry status`, `watch`, `show`, `approve`), coloured at a terminal and plain in a pipe,
and `tarry approve` asking which call when several wait."""

from __future__ import annotations

import asyncio
import json

import pexpect

from tarry.contracts import Phase
from tarry.testing.scripted_model import ScriptedToolCall, calls, say
from tests.cli import TARRY, Cli, agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.gated_writes import OVERWRITE, TOUR_NOTES, gated_write, notes_of
from tests.test_cli_colour import ANSI, has_colour

REMOVED_NOTES = [
    "    │ -Attendees: Ana, Priya, Sam",
    "    │ -- Sam updates the pricing page before the launch.",
    "    │ -- Ana drafts the customer email by Thursday.",
    "    │ -- Someone needs to write the Q3 launch blog post.",
    "    │ -- Next meeting: Monday 10:00.",
]


def in_workspaces(cli: Cli) -> Cli:
    """`cli`, on the machine of its worker's workspaces (`TARRY_WORKSPACE_ROOT`)."""
    return Cli.of(cli.agent, TARRY_WORKSPACE_ROOT=str(cli.agent.workspace_root))


async def test_status_shows_an_overwrite_of_the_notes_as_a_diff_that_removes_them(
    cli: Cli,
) -> None:
    assert (len(TOUR_NOTES.encode()), len(OVERWRITE.encode())) == (232, 54)
    run = await gated_write(cli.agent, OVERWRITE)

    out = await cli.ok("status", run.id)

    lines = out.splitlines()
    assert "    notes.md: 6 lines removed, 1 added" in lines
    assert all(line in lines for line in REMOVED_NOTES), out
    assert "    │ +- Sam renews the domain." in lines


async def test_status_marks_a_preview_stale_once_the_file_changed_and_shows_it_as_gated(
    cli: Cli,
) -> None:
    run = await gated_write(cli.agent, OVERWRITE)
    before = await in_workspaces(cli).ok("status", run.id)

    notes_of(cli.agent, run.id).write_text("# Planning meeting, Tuesday\n\nrewritten meanwhile\n")
    after = await in_workspaces(cli).ok("status", run.id)

    assert "stale" not in before
    assert "⚠ stale: the file has changed since this preview was made" in after
    assert [line for line in after.splitlines() if "│" in line] == [
        line for line in before.splitlines() if "│" in line
    ]


async def test_watch_shows_a_gated_calls_new_file_whole(cli: Cli) -> None:
    content = "".join(f"- item {n}, with words enough to pass any one-line cut\n" for n in range(8))
    run = await gated_write(cli.agent, content, old=None)

    out = await cli.ok("watch", run.id)

    assert "    notes.md: new file, 8 lines" in out.splitlines()
    assert all(f"    │ {line}" in out.splitlines() for line in content.splitlines())


async def test_show_ends_with_what_a_waiting_call_would_do(cli: Cli) -> None:
    run = await gated_write(cli.agent, OVERWRITE)

    out = await cli.ok("show", run.id)

    assert out.splitlines()[-1] == "    │ +- Sam renews the domain."


async def several_waiting(cli: Cli) -> str:
    """A run waiting for decisions on two writes, `c_a` of a.md and `c_b` of b.md."""
    writes = [
        ScriptedToolCall(name="write_file", arguments={"path": p, "content": p}, id=f"c_{p[0]}")
        for p in ("a.md", "b.md")
    ]
    cli.agent.model.add(calls(*writes), say("done"))
    run = await cli.agent.start("write two", require_approval=["write_file"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    return run.id


async def test_approve_with_several_calls_pending_names_them_and_decides_none(cli: Cli) -> None:
    run_id = await several_waiting(cli)

    result = await cli("approve", run_id)

    result.assert_one_error_line("error: 2 calls wait for a decision (c_a, c_b): name one")
    assert len((await cli.agent.tarry.get(run_id).state()).pending_approvals) == 2


async def test_approve_all_decides_every_pending_call(cli: Cli) -> None:
    run_id = await several_waiting(cli)

    state = json.loads(await cli.ok("approve", run_id, "--all", "--json"))

    assert state["pending_approvals"] == []
    assert (cli.agent.workspace_root / run_id / "b.md").read_text() == "b.md"


async def test_approve_at_a_terminal_lists_the_calls_and_decides_the_one_chosen(
    cli: Cli,
) -> None:
    run_id = await several_waiting(cli)
    child = pexpect.spawn(
        str(TARRY), ["approve", run_id], env=agent_env(cli.agent), encoding="utf-8"
    )
    child.timeout = deadline(30)

    await asyncio.to_thread(child.expect, "Which call")
    listed = str(child.before)
    child.sendline("c_b")
    await asyncio.to_thread(child.expect, pexpect.EOF)

    assert all(f"{p}: new file, 1 line" in listed for p in ("a.md", "b.md")), listed
    state = await cli.agent.tarry.get(run_id).state()
    assert [p.call_id for p in state.pending_approvals] == ["c_a"]


async def test_a_diff_is_red_and_green_at_a_terminal(agent: Agent) -> None:
    run = await gated_write(agent, OVERWRITE)
    env = agent_env(agent) | {"TERM": "xterm-256color"}
    del env["NO_COLOR"]
    child = pexpect.spawn(str(TARRY), ["status", run.id], env=env, encoding="utf-8")
    child.timeout = deadline(30)

    await asyncio.to_thread(child.expect, pexpect.EOF)

    screen = str(child.before)
    assert has_colour(screen)
    removed = next(line for line in screen.splitlines() if "Ana drafts" in line)
    assert any("31" in params.split(";") for params in ANSI.findall(removed)), removed


async def test_a_line_of_a_preview_cannot_recolour_the_terminal(cli: Cli) -> None:
    run = await gated_write(cli.agent, "fine\n\x1b[2J\x1b[31mALL CLEAR\n", old=None)

    out = await cli.ok("status", run.id)

    assert "\x1b" not in out
    assert "    │ \\x1b[2J\\x1b[31mALL CLEAR" in out.splitlines()
