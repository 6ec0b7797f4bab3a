"""One way to wait (`tarry.contracts.waits`): each kind of wait for a person is registered
once, with what every door shows of it and what ends it, and the doors take a kind from
there, so a kind none of them names (`paused`) shows everywhere: the CLI's status, stop
line and `--waiting-for`, the HTTP API's filter and `/v1/wait-kinds`, the MCP server's
filters. (The inbox's filter and tags: `tests/test_inbox.py`.)"""

from __future__ import annotations

import json
import string

from mcp import Client
from rich.console import Console

from tarry.cli.render import print_stop_line, state_text
from tarry.contracts import AuthNeed, Need, NotifyEvent, Phase, RunState, WaitingFor
from tarry.contracts.waits import KINDS, WAIT_KINDS, wait_kind
from tests.cli import Cli
from tests.http_api import Api
from tests.test_mcp_server import tarry_mcp as tarry_mcp  # the fixture
from tests.test_mcp_server import use

FIELDS = {"run", "waiting_on", "paused_by", "error"}
"""What a kind's CLI hint may name: what the CLI fills in from the run's state."""
PAUSED = RunState(phase=Phase.WAITING_USER, waiting_for=WaitingFor.PAUSED, paused_by="alice")


def stop_line(state: RunState, **options: str | bool) -> str:
    console = Console(record=True, width=200, color_system=None)
    print_stop_line(console, state, **options)  # type: ignore[arg-type]
    return console.export_text()


def test_every_kind_of_wait_is_registered_once() -> None:
    assert [kind.kind for kind in KINDS] == list(WaitingFor)
    assert list(WAIT_KINDS) == list(WaitingFor)


def test_every_kind_has_a_label_of_its_own_and_says_what_it_waits_for() -> None:
    labels = [kind.label for kind in KINDS]

    assert len(set(labels)) == len(labels)
    assert all(label.isidentifier() for label in labels)
    assert all(kind.waits_for for kind in KINDS)


def test_every_kind_s_hint_names_only_what_the_cli_fills_in() -> None:
    for kind in KINDS:
        named = {field for _, field, _, _ in string.Formatter().parse(kind.hint) if field}
        assert named <= FIELDS, kind.kind
        assert "tarry " in kind.hint or kind.delegated, f"{kind.kind}: no command to run"


def test_every_kind_is_ended_by_a_message_to_the_run_or_by_another_run() -> None:
    for kind in KINDS:
        # A slot is freed by the end of one of the owner's other runs, whichever it is.
        by_another_run = kind.delegated or kind.kind is WaitingFor.SLOT
        assert bool(kind.ends) != by_another_run, kind.kind
    assert wait_kind(WaitingFor.AGENT).delegated


def test_only_an_approver_s_decision_is_sent_by_more_than_the_run_s_writers() -> None:
    senders = {kind.kind: {ending.who for ending in kind.ends} for kind in KINDS}

    assert senders.pop(WaitingFor.APPROVAL) == {Need.DECIDE}
    assert senders.pop(WaitingFor.GUARDRAIL) == {Need.DECIDE}  # a held text's approvers
    assert set().union(*senders.values()) == {Need.WRITE}


def test_a_paused_run_is_told_of_as_one_waiting_for_a_reply() -> None:
    assert wait_kind(WaitingFor.PAUSED).notify is NotifyEvent.WAITING_FOR_INPUT
    assert wait_kind(WaitingFor.PAUSED).ends == wait_kind(WaitingFor.INPUT).ends


def test_no_receiver_hears_of_a_failing_model_a_sub_agent_s_wait_or_a_queued_run() -> None:
    told = {kind.kind for kind in KINDS if kind.notify is not None}

    assert set(WaitingFor) - told == {WaitingFor.MODEL, WaitingFor.AGENT, WaitingFor.SLOT}


def test_a_wait_s_trace_span_is_named_after_its_kind() -> None:
    assert [kind.span for kind in KINDS] == [f"wait {waiting}" for waiting in WaitingFor]


def test_status_shows_what_a_paused_run_waits_for_and_who_paused_it() -> None:
    rows = state_text("run-1", PAUSED).plain.splitlines()

    assert "waiting for  paused" in rows
    assert "paused by    alice" in rows


def test_status_and_the_stop_line_give_the_connect_link_of_a_run_waiting_for_auth() -> None:
    need = AuthNeed(server="tickets", person="alice", call_id="c-1")
    waiting = RunState(phase=Phase.WAITING_USER, waiting_for=WaitingFor.AUTH, auth_needed=[need])
    link = "alice to tickets: /v1/oauth/connect/run-1/tickets"

    assert f"connect      {link}" in state_text("run-1", waiting).plain.splitlines()
    assert f"connect: {link}" in stop_line(waiting, run_id="run-1").splitlines()


def test_the_stop_line_leaves_a_wait_for_a_reply_unsaid_unless_asked() -> None:
    waiting = RunState(phase=Phase.WAITING_USER, waiting_for=WaitingFor.INPUT)

    assert stop_line(waiting) == ""
    assert stop_line(waiting, reply=True) == (
        "the run waits for your reply: `tarry send RUN TEXT`\n"
    )


def test_the_stop_line_leaves_a_pause_unsaid_unless_asked_then_says_who_paused() -> None:
    assert stop_line(PAUSED) == ""
    assert stop_line(PAUSED, run_id="run-1", reply=True) == (
        "alice paused the run; a reply lets it go on: `tarry send run-1 TEXT`\n"
    )


def test_the_stop_line_says_what_ends_a_wait_for_a_raised_budget() -> None:
    spent = RunState(phase=Phase.WAITING_USER, waiting_for=WaitingFor.BUDGET)

    assert stop_line(spent, run_id="run-1") == (
        "the run spent its budget; `tarry budget run-1 --tokens N --cost USD` raises it\n"
    )


async def test_list_help_names_every_kind_of_wait(cli: Cli) -> None:
    out = await cli.ok("list", "--help")

    words = " ".join(out.replace("│", " ").split())  # the lines of rich's box, joined
    assert all(f"{kind.kind} ({kind.waits_for})" in words for kind in KINDS)


async def test_list_takes_waiting_for_paused(cli: Cli) -> None:
    out = await cli.ok("list", "--waiting-for", "paused", "--limit", "1000", "--json")

    assert {row["waiting_for"] for row in json.loads(out)} <= {"paused"}


async def test_the_api_s_list_takes_waiting_for_paused(api: Api) -> None:
    response = await api.http.get("/v1/runs?waiting_for=paused&limit=1000")

    assert response.status_code == 200, response.text
    assert {row["waiting_for"] for row in response.json()["runs"]} <= {"paused"}


async def test_the_api_answers_every_kind_of_wait_as_registered(api: Api) -> None:
    response = await api.http.get("/v1/wait-kinds")

    assert response.status_code == 200, response.text
    assert response.json() == [kind.model_dump(mode="json") for kind in KINDS]


async def test_the_mcp_server_s_lists_take_waiting_for_paused(tarry_mcp: Client) -> None:
    async with tarry_mcp as client:
        waiting = await use(client, "waiting_runs", waiting_for="paused")
        listed = await use(client, "list_runs", waiting_for="paused")

    assert {row["waiting_for"] for row in [*waiting, *listed]} <= {"paused"}
