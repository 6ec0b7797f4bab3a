"""Approval rules and remembered decisions: a run decides the calls its rules cover without
asking anyone, asks about the ones a rule says to, and after a person says "remember"
decides the like calls the same way; each of those decisions is in history as the
run's own (`rule N`, `remembered`), as a person's is under their name."""

from __future__ import annotations

import asyncio
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tarry.client import RunHandle, TarryError
from tarry.contracts import LLM_ACTIVITY, ErrorCode, Phase, RunInput, RunState, WaitingFor
from tarry.contracts.approval_rules import REGEX_TEXT_LIMIT, ApprovalRule, Regex, RuleDecision
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.cli import Cli
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT, deadline
from tests.http_api import serving
from tests.test_http_api import error_of

WAITING = {Phase.WAITING_USER}
NOTES_FREE = {"tool": "write_file", "when": {"/path": "notes/*.md"}, "decision": "approve"}
ETC_ASKS = {"tool": "write_file", "when": {"/path": {"regex": "^/etc"}}, "decision": "ask"}
DRAFTS_ASK = {"tool": "write_file", "when": {"/path": "drafts/*"}, "decision": "ask"}


def write(path: str, id: str, content: str = "x") -> Any:
    return call("write_file", {"path": path, "content": content}, id=id)


async def stopped(run: RunHandle) -> RunState:
    return await run.wait_for(WAITING, TIMEOUT)


async def decision_on(run: RunHandle, call_id: str) -> dict[str, Any]:
    """The decision kept on a call's tool message, as JSON."""
    message = next(m for m in await run.transcript() if m.tool_call_id == call_id)
    assert message.decision is not None
    return message.decision.model_dump(mode="json", exclude={"at"}, exclude_none=True)


async def decisions_in_history(agent: Agent, run: RunHandle) -> dict[str, str | None]:
    """Who decided each call, by call id, as history holds it: the decision kept on
    each tool message the model's calls carried after it, in their scheduled inputs."""
    client = agent.tarry.client
    found: dict[str, str | None] = {}
    for history in await agent.histories(run):
        for event in history.events:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name != LLM_ACTIVITY:
                continue
            (request,) = await client.data_converter.decode(list(scheduled.input.payloads))
            for message in request["messages"]:
                if message.get("decision"):
                    found[message["tool_call_id"]] = message["decision"].get("user")
    return found


async def summaries(agent: Agent, run: RunHandle) -> list[str]:
    """The summaries of the tool activities history scheduled, in order."""
    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    return [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "write_file"
    ]


async def test_a_rule_approves_writing_notes_without_asking(agent: Agent) -> None:
    agent.model.add(write("notes/today.md", "w1"), say("Noted."))

    run = await agent.start(
        "note it", require_approval=["write_file"], approval_rules=[NOTES_FREE, ETC_ASKS]
    )
    state = await stopped(run)

    assert (state.waiting_for, state.last_assistant_text) == (WaitingFor.INPUT, "Noted.")
    assert (agent.workspace_root / run.id / "notes/today.md").read_text() == "x"
    assert await decision_on(run, "w1") == {"approved": True, "by": "rule", "user": "rule 1"}
    assert await decisions_in_history(agent, run) == {"w1": "rule 1"}
    assert await summaries(agent, run) == ["write_file notes/today.md x · approved by rule 1"]
    assert "decide" not in await agent.updates(run)


async def test_a_rule_asks_about_etc_paths_even_for_a_tool_no_one_is_asked_about(
    agent: Agent,
) -> None:
    agent.model.add(write("/etc/hosts", "w1"), say("Not written."))

    run = await agent.start("edit hosts", approval_rules=[NOTES_FREE, ETC_ASKS])
    state = await stopped(run)

    assert state.waiting_for is WaitingFor.APPROVAL
    assert [(p.call_id, p.rule) for p in state.pending_approvals] == [("w1", 2)]
    handle = agent.tarry.client.get_workflow_handle(run.id)
    details = (await handle.query("__temporal_workflow_metadata")).current_details
    assert "(call `w1`, asked by rule 2)" in details


async def test_a_call_no_rule_matches_is_gated_as_require_approval_says(agent: Agent) -> None:
    agent.model.add(write("plan.md", "w1"), say("Written."))

    run = await agent.start(
        "write the plan", require_approval=["write_file"], approval_rules=[NOTES_FREE]
    )
    state = await stopped(run)

    assert [(p.call_id, p.rule) for p in state.pending_approvals] == [("w1", None)]


async def test_a_reject_rule_tells_the_model_its_reason_and_runs_nothing(agent: Agent) -> None:
    agent.model.add(write("notes/x.md", "w1"), say("Understood."))
    rule = {"tool": "write_*", "decision": "reject", "reason": "this run only reads"}

    run = await agent.start("note it", approval_rules=[rule])
    await stopped(run)

    seen = agent.model.requests[1].body["messages"][-1]
    assert json.loads(seen["content"])["error"] == {
        "code": ErrorCode.TOOL_REJECTED,
        "message": "this run only reads",
    }
    assert not (agent.workspace_root / run.id / "notes/x.md").exists()
    assert await decisions_in_history(agent, run) == {"w1": "rule 1"}


async def test_an_approve_rule_for_a_tool_no_one_is_asked_about_changes_nothing(
    agent: Agent,
) -> None:
    agent.model.add(call("list_files", {}, id="l1"), say("Listed."))

    run = await agent.start("look", approval_rules=[{"tool": "list_files", "decision": "approve"}])
    await stopped(run)

    message = next(m for m in await run.transcript() if m.tool_call_id == "l1")
    assert message.decision is None
    assert tool_result(message)["ok"] is True


async def test_remember_decides_the_next_call_its_rule_asks_about_and_another_still_asks(
    agent: Agent,
) -> None:
    agent.model.add(write("drafts/a.md", "w1"), write("drafts/b.md", "w2"), write("plan.md", "w3"))
    run = await agent.start("draft", require_approval=["write_file"], approval_rules=[DRAFTS_ASK])
    await stopped(run)

    state = await run.decide("w1", remember="run")

    assert [(p.call_id, p.rule) for p in state.pending_approvals] == [("w3", None)]
    assert (agent.workspace_root / run.id / "drafts/b.md").exists()
    assert await decision_on(run, "w1") == {
        "approved": True,
        "by": "update",
        "user": agent.tarry.caller.user,
        "remember": "run",
    }
    assert await decision_on(run, "w2") == {"approved": True, "by": "rule", "user": "remembered"}
    assert await agent.updates(run) == ["decide"]  # w2 made no one wait
    assert (await decisions_in_history(agent, run))["w2"] == "remembered"
    assert (await summaries(agent, run))[1] == "write_file drafts/b.md x · approved as remembered"


def two_drafts() -> Any:
    """One answer with two calls that the drafts rule asks about."""
    draft = functools.partial(ScriptedToolCall, name="write_file")
    return calls(
        draft(arguments={"path": "drafts/a.md", "content": "x"}, id="w1"),
        draft(arguments={"path": "drafts/b.md", "content": "x"}, id="w2"),
    )


async def test_remembering_one_call_decides_the_like_call_of_the_same_answer_at_once(
    agent: Agent,
) -> None:
    agent.model.add(two_drafts(), say("Drafted."))
    run = await agent.start("draft", approval_rules=[DRAFTS_ASK])
    await stopped(run)

    state = await run.decide("w1", remember="run")

    assert state.last_assistant_text == "Drafted."
    assert (await decision_on(run, "w2"))["user"] == "remembered"


async def test_a_remembered_decision_on_every_pending_call_is_the_persons_on_each(
    agent: Agent,
) -> None:
    agent.model.add(two_drafts(), say("Drafted."))
    run = await agent.start("draft", approval_rules=[DRAFTS_ASK])
    await stopped(run)

    await run.decide(remember="run")

    users = {(await decision_on(run, id))["user"] for id in ("w1", "w2")}
    assert users == {agent.tarry.caller.user}


async def test_remembering_a_call_no_rule_asked_about_covers_only_the_same_arguments(
    agent: Agent,
) -> None:
    agent.model.add(
        write("plan.md", "w1"), write("plan.md", "w2"), write("plan.md", "w3", content="y")
    )
    run = await agent.start("write", require_approval=["write_file"])
    await stopped(run)

    state = await run.decide("w1", remember="run")

    assert [p.call_id for p in state.pending_approvals] == ["w3"]
    assert (await decision_on(run, "w2"))["user"] == "remembered"


async def test_a_remembered_rejection_gives_the_model_the_persons_reason(agent: Agent) -> None:
    agent.model.add(write("drafts/a.md", "w1"), write("drafts/b.md", "w2"), say("I'll stop."))
    run = await agent.start("draft", approval_rules=[DRAFTS_ASK])
    await stopped(run)

    await run.decide("w1", approved=False, reason="no drafts today", remember="run")

    seen = agent.model.requests[2].body["messages"][-1]
    assert json.loads(seen["content"])["error"]["message"] == "no drafts today"
    assert (await decision_on(run, "w2"))["user"] == "remembered"


async def test_what_a_run_remembers_outlasts_its_hand_over_to_a_new_run(agent: Agent) -> None:
    agent.model.add(write("drafts/a.md", "w1"), write("drafts/b.md", "w2"), say("Drafted."))
    run = await agent.start("draft", approval_rules=[DRAFTS_ASK], continue_as_new_after_turns=1)
    await stopped(run)

    await run.approve("w1", remember="run")  # a signal: no caller holds the hand-over back
    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "Drafted."
    assert len(await agent.histories(run)) > 1
    assert (await decision_on(run, "w2"))["user"] == "remembered"


async def test_a_remembered_decision_cannot_carry_edited_arguments(agent: Agent) -> None:
    agent.model.add(write("plan.md", "w1"))
    run = await agent.start("write", require_approval=["write_file"])
    await stopped(run)

    with pytest.raises(TarryError) as error:
        await run.decide("w1", arguments={"path": "b.md", "content": "y"}, remember="run")

    assert error.value.code is ErrorCode.APPROVAL_INVALID_ARGUMENTS
    assert (await run.state()).waiting_for is WaitingFor.APPROVAL


BACKTRACKS = {"tool": "write_file", "when": {"/content": {"regex": "^(a+)+$"}}, "decision": "ask"}
"""A pattern Python's `re` backtracks through without end on a long near-miss."""
NEAR_MISS = "a" * 28 + "b"
"""Seconds of backtracking for `BACKTRACKS` in Python's `re`, twice as many per `a` more:
it held the worker's every workflow task (and was met again on each replay)."""


async def test_a_rule_that_backtracks_on_a_long_argument_leaves_the_worker_responsive(
    agent: Agent,
) -> None:
    agent.model.add_conversation("hello", say("Hello."), say("Still here."))
    agent.model.add_conversation("write it", write("a.md", "w1", NEAR_MISS), say("Not yet."))
    other = await agent.start("hello")
    await stopped(other)

    run = await agent.start(
        "write it", require_approval=["write_file"], approval_rules=[BACKTRACKS]
    )
    async with asyncio.timeout(deadline(10)):
        answered = await other.send("are you there?")
    state = await stopped(run)
    await run.stop()
    ended = await run.wait_for({Phase.COMPLETED}, TIMEOUT)

    assert answered.last_assistant_text == "Still here."
    # The rule matched nothing (the `b`): the call is gated as `require_approval` says.
    assert [(p.call_id, p.rule) for p in state.pending_approvals] == [("w1", None)]
    assert ended.phase is Phase.COMPLETED
    for each in (run, other):
        assert "WORKFLOW_TASK_FAILED" not in await agent.event_types(each)


def test_a_pointer_through_a_list_by_a_unicode_digit_matches_nothing() -> None:
    """`²` is a digit to `str.isdigit` but no number to `int`, nor an index of RFC 6901."""
    when = {"/paths/²": "x"}
    rule = ApprovalRule.model_validate({"tool": "write_file", "when": when, "decision": "ask"})

    assert not rule.matches("write_file", json.dumps({"paths": ["a", "b", "x"]}))


def test_a_value_longer_than_a_page_is_not_searched_and_counts_against_the_call() -> None:
    when = {"/content": {"regex": "^x+$"}}
    asks = ApprovalRule.model_validate({"tool": "write_file", "when": when, "decision": "ask"})
    approves = asks.model_copy(update={"decision": RuleDecision.APPROVE})
    twenty_thousand = json.dumps({"content": "x" * 20_000})

    assert asks.matches("write_file", twenty_thousand)
    assert not approves.matches("write_file", twenty_thousand)


COSTLY = "|".join(f"[ab{c}]{{999}}Z" for c in "cdefgh")
"""Branches of 999 instructions each: searched in a 20 KB argument, RE2's NFA stepped
them for every byte, and the run's workflow task failed its 2 s deadlock check again
and again."""


def test_a_value_too_long_to_search_counts_against_the_call() -> None:
    when = {"/content": {"regex": "^x+$"}}
    asks = ApprovalRule.model_validate({"tool": "write_file", "when": when, "decision": "ask"})
    approves = asks.model_copy(update={"decision": RuleDecision.APPROVE})
    short, long = (json.dumps({"content": "x" * n}) for n in (10, REGEX_TEXT_LIMIT + 1))

    assert asks.matches("write_file", short)
    assert approves.matches("write_file", short)
    assert asks.matches("write_file", long)
    assert not approves.matches("write_file", long)


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({"tool": "write_file", "when": {"path": "*.md"}, "decision": "ask"}, "not a JSON pointer"),
        (
            {"tool": "write_file", "when": {"/path": {"regex": "(unclosed"}}, "decision": "ask"},
            "not a regular expression",
        ),
        (
            {"tool": "write_file", "when": {"/path": {"regex": r"(a)\1"}}, "decision": "ask"},
            "no backreferences or lookaround",
        ),
        (
            {"tool": "write_file", "when": {"/path": {"regex": "[ab]{999}"}}, "decision": "ask"},
            "compiles it to 1,003 instructions, over the limit of 250",
        ),
        (
            {"tool": "write_file", "when": {"/path": {"regex": COSTLY}}, "decision": "ask"},
            "too costly to search",
        ),
        ({"tool": "write_file", "decision": "reject"}, "needs a reason"),
        ({"tool": "write_file", "decision": "allow"}, "'approve', 'reject' or 'ask'"),
    ],
)
def test_a_bad_rule_is_refused_with_what_is_wrong(rule: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        RunInput(prompt="x", approval_rules=[rule])


async def test_over_http_a_bad_rule_is_refused_at_start_and_remember_decides_later_calls(
    agent: Agent,
) -> None:
    agent.model.add(write("drafts/a.md", "w1"), write("drafts/b.md", "w2"), say("Drafted."))
    async with serving(agent) as api:
        bad = {"tool": "write_file", "when": {"path": "*"}, "decision": "ask"}
        refused = await api.http.post("/v1/runs", json={"approval_rules": [bad]})
        lookahead = {"tool": "write_file", "when": {"/path": {"regex": "(?=x)"}}, "decision": "ask"}
        no_re2 = await api.http.post("/v1/runs", json={"approval_rules": [lookahead]})
        run_id = await api.start("draft", approval_rules=[DRAFTS_ASK])
        await stopped(api.run(run_id))

        decided = await api.http.post(
            f"/v1/runs/{run_id}/approvals",
            json={"call_id": "w1", "approved": True, "remember": "run"},
        )

    assert error_of(refused) == (422, ErrorCode.INPUT_INVALID)
    assert "not a JSON pointer" in refused.json()["error"]["message"]
    assert error_of(no_re2) == (422, ErrorCode.INPUT_INVALID)
    assert "no backreferences or lookaround" in no_re2.json()["error"]["message"]
    assert decided.status_code == 200, decided.text
    assert decided.json()["last_assistant_text"] == "Drafted."
    assert (await decision_on(api.run(run_id), "w2"))["user"] == "remembered"


async def test_a_run_started_before_the_size_limit_keeps_its_larger_pattern(agent: Agent) -> None:
    # Admitted before patterns had a size limit: not validated again here.
    larger = Regex.model_construct(regex="^[ab]{300}$")
    rule = ApprovalRule.model_construct(
        tool="write_file", when={"/path": larger}, decision=RuleDecision.ASK, reason=None
    )
    agent.model.add(write("ab" * 150, "w1"))

    run = await agent.start("write it", approval_rules=[rule])
    state = await stopped(run)

    assert [(p.call_id, p.rule) for p in state.pending_approvals] == [("w1", 1)]


async def test_a_rule_too_costly_to_search_is_refused_at_start_over_http_and_the_cli(
    agent: Agent,
) -> None:
    costly = {"tool": "write_file", "when": {"/content": {"regex": COSTLY}}, "decision": "ask"}
    async with serving(agent) as api:
        over_http = await api.http.post("/v1/runs", json={"approval_rules": [costly]})
    from_the_cli = await Cli.of(agent)("start", "--rule", f"write_file:/content~={COSTLY}:ask", "x")

    assert error_of(over_http) == (422, ErrorCode.INPUT_INVALID)
    assert "too costly to search" in over_http.json()["error"]["message"]
    from_the_cli.assert_one_error_line("error: approval rule 1: ")
    assert "too costly to search" in from_the_cli.err
    assert from_the_cli.code == 2


async def test_from_the_cli_rules_at_start_and_approve_remember(agent: Agent) -> None:
    cli = Cli.of(agent)
    agent.model.add(write("drafts/a.md", "w1"), write("drafts/b.md", "w2"), say("Drafted."))
    run = await cli.start("--rule", "write_file:/path=drafts/*:ask", "draft")
    await stopped(run)

    out = await cli.ok("approve", run.id, "w1", "--remember")

    assert ", remembered for the run" in out
    assert re.search(r"✓ approved without asking .* by remembered", out)
    assert (await decision_on(run, "w2"))["user"] == "remembered"


async def test_the_cli_reads_rules_from_a_file_and_refuses_a_bad_one(
    agent: Agent, tmp_path: Path
) -> None:
    cli = Cli.of(agent)
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps([NOTES_FREE, ETC_ASKS]))
    bad.write_text(json.dumps([NOTES_FREE, {"tool": "write_file", "decision": "reject"}]))
    agent.model.add(write("/etc/hosts", "w1"))

    run = await cli.start("--rules", str(good), "edit hosts")
    refused = await cli("start", "--rules", str(bad), "x")

    state = await stopped(run)
    assert [p.rule for p in state.pending_approvals] == [2]
    refused.assert_one_error_line("error: approval rule 2: a rule that rejects needs a reason")
    assert refused.code == 2
