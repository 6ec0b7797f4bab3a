"""Guardrails that ask a person (issue 56, `verdict: "ask"`): the run waits, `waiting_for:
guardrail`, until one of the guardrail's approvers allows the flagged text, edits it or
blocks it, at each place a guardrail looks (input, output, tool_result), as a tool call
waits for its approval."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tarry.cli.render import state_text
from tarry.client import RunHandle
from tarry.contracts import (
    Act,
    ApprovalDefault,
    ErrorCode,
    PendingApproval,
    Phase,
    RunState,
    WaitingFor,
)
from tarry.contracts.events import EventKind
from tarry.contracts.guardrails import (
    GuardPoint,
    GuardrailHit,
    GuardrailMatch,
    GuardVerdict,
    asked_text,
)
from tarry.core.errors import TarryError
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.cli import Cli, until_listed
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT
from tests.test_guardrail_judge import JUDGE, WEAPON, judging
from tests.test_guardrails import sent_to_model
from tests.test_mcp_server import mcp_client
from tests.test_notifications import Receiver, listening, notifying
from tests.test_streaming import events_until, words
from tests.test_sub_agents import until

WAITING = {Phase.WAITING_USER}
SECRETS = {
    "name": "ask-secrets",
    "on": "input",
    "check": "pattern",
    "verdict": "ask",
    "deny": ["secret"],
    "reason": "secrets need a person's eye",
}


def rail(on: GuardPoint, **more: Any) -> dict[str, Any]:
    """`SECRETS`, looking at `on`."""
    return {**SECRETS, "on": on, **more}


async def held(run: RunHandle) -> RunState:
    """The run's state once a guardrail holds a text for a decision."""
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.GUARDRAIL, state
    return state


# --- input: a person's message -------------------------------------------------------


async def test_a_flagged_reply_waits_for_a_person_and_the_model_sees_nothing_meanwhile(
    agent: Agent,
) -> None:
    agent.model.add(say("Noted."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])

    state = await held(run)

    assert agent.model.requests == []
    [pending] = state.pending_approvals
    assert (pending.tool, pending.call_id) == ("ask-secrets", "guardrail-1")
    assert asked_text(pending.arguments) == "the secret is 42"
    assert pending.guardrail is not None
    assert (pending.guardrail.on, pending.guardrail.verdict) == ("input", GuardVerdict.ASK)
    assert [(m.kind, m.start, m.end) for m in pending.guardrail.matches] == [("deny", 4, 10)]


async def test_an_allowed_reply_reaches_the_model_as_sent(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)

    state = await run.decide()

    assert state.last_assistant_text == "Noted."
    assert "the secret is 42" in sent_to_model(agent)
    [hit] = (await run.transcript())[0].guardrails
    assert hit.decision is not None
    assert (hit.decision.allowed, hit.decision.edited) == (True, False)


async def test_an_edited_reply_reaches_the_model_as_edited(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)

    await run.decide("guardrail-1", arguments={"text": "the number is withheld"})

    sent = sent_to_model(agent)
    assert ("the number is withheld" in sent, "42" in sent) == (True, False)
    first = (await run.transcript())[0]
    assert first.content == "the number is withheld"
    assert first.guardrails[0].decision is not None
    assert first.guardrails[0].decision.edited


async def test_a_blocked_reply_reaches_the_model_as_the_blocker_s_reason(agent: Agent) -> None:
    agent.model.add(say("I cannot see that."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)

    await run.decide(approved=False, reason="no secrets here")

    sent = sent_to_model(agent)
    assert "42" not in sent
    assert "[withheld by guardrail 'ask-secrets': no secrets here]" in sent


async def test_an_edit_that_is_not_a_text_is_refused_and_the_text_still_waits(
    agent: Agent,
) -> None:
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)

    with pytest.raises(TarryError) as refused:
        await run.decide("guardrail-1", arguments={"text": 42})

    assert refused.value.code is ErrorCode.APPROVAL_INVALID_ARGUMENTS
    assert (await run.state()).waiting_for is WaitingFor.GUARDRAIL


async def test_the_audit_trail_says_a_reply_was_held_and_who_edited_it(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)
    await run.decide(arguments={"text": "the number is withheld"})

    trail = await agent.tarry.audit(run=run.id)

    [record] = [r for r in trail.records if r.act is Act.GUARDRAIL]
    assert record.what == (
        f"held {run.caller.user}'s message 0 (deny): secrets need a person's eye;"
        f" edited by {run.caller.user}"
    )


async def test_the_guardrails_after_an_ask_check_the_text_as_decided(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    pii = {"name": "no-pii", "on": "input", "check": "pii", "verdict": "redact"}
    run = await agent.start("the secret is 42", guardrails=[SECRETS, pii])
    await held(run)

    await run.decide(arguments={"text": "mail jane.doe@example.com instead"})

    assert "mail <EMAIL_1> instead" in sent_to_model(agent)
    hits = (await run.transcript())[0].guardrails
    assert [(h.guardrail, h.verdict) for h in hits] == [
        ("ask-secrets", GuardVerdict.ASK),
        ("no-pii", GuardVerdict.REDACT),
    ]


async def test_a_judge_that_asks_holds_the_message_for_a_person(agent: Agent) -> None:
    agent.model.add(judging("ask", "a person should decide"), say("I can help with that."))
    run = await agent.start(WEAPON, guardrails=[JUDGE])

    state = await held(run)

    [pending] = state.pending_approvals
    assert pending.guardrail is not None
    assert (pending.tool, pending.guardrail.reason) == ("no-weapons", "a person should decide")
    state = await run.decide()
    assert state.last_assistant_text == "I can help with that."


# --- output: the model's answer --------------------------------------------------------


async def test_an_allowed_answer_is_published_as_the_model_gave_it(agent: Agent) -> None:
    agent.model.add(say("The secret word is swordfish."))
    run = await agent.start("tell me", guardrails=[rail(GuardPoint.OUTPUT)])
    state = await held(run)
    assert state.last_assistant_text is None  # held: nobody has seen it

    state = await run.decide()

    assert state.last_assistant_text == "The secret word is swordfish."


async def test_a_held_answer_reaches_observers_only_as_the_decision_it_waits_for(
    agent: Agent,
) -> None:
    agent.model.add(say("The secret word is swordfish.", chunk_chars=4))
    run = await agent.start("tell me", guardrails=[rail(GuardPoint.OUTPUT)])

    seen = await events_until(run, EventKind.STOP)

    assert words(seen) == ""  # held: no word of it was streamed
    said = [e.message for e in seen if e.kind is EventKind.MESSAGE and e.message]
    assert [m.role for m in said if m.role == "assistant"] == []
    [stop] = [e.state for e in seen if e.kind is EventKind.STOP]
    assert stop is not None
    assert stop.waiting_for is WaitingFor.GUARDRAIL
    assert stop.last_assistant_text is None


async def test_an_edited_answer_is_the_one_everyone_sees(agent: Agent) -> None:
    agent.model.add(say("The secret word is swordfish."))
    run = await agent.start("tell me", guardrails=[rail(GuardPoint.OUTPUT)])
    await held(run)

    state = await run.decide(arguments={"text": "I may not say."})

    assert state.last_assistant_text == "I may not say."
    assert "swordfish" not in json.dumps([m.model_dump() for m in await run.transcript()])


async def test_a_blocked_answer_is_withheld_and_the_model_asked_again(agent: Agent) -> None:
    agent.model.add(say("The secret word is swordfish."), say("I may not say."))
    run = await agent.start("tell me", guardrails=[rail(GuardPoint.OUTPUT)])
    await held(run)

    state = await run.decide(approved=False, reason="never the word")

    assert state.last_assistant_text == "I may not say."
    retried = json.dumps(agent.model.requests[1].body["messages"])
    assert ("never the word" in retried, "swordfish" in retried) == (True, False)


# --- tool_result: a tool's result ------------------------------------------------------


async def reading(agent: Agent, run_id: str, **input: Any) -> RunHandle:
    """A run that reads a workspace file holding a secret, under an asking guardrail on
    tool results."""
    workspace = agent.workspace_root / run_id
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("the secret is 42")
    agent.model.add(call("read_file", {"path": "notes.md"}), say("Read it."))
    guardrails = [rail(GuardPoint.TOOL_RESULT)]
    return await agent.start("read notes.md", run_id=run_id, guardrails=guardrails, **input)


async def test_an_allowed_tool_result_reaches_the_model(agent: Agent) -> None:
    run = await reading(agent, "ask-allow-result")
    await held(run)

    await run.decide()

    assert "the secret is 42" in sent_to_model(agent)


async def test_an_edited_tool_result_reaches_the_model_as_edited(agent: Agent) -> None:
    run = await reading(agent, "ask-edit-result")
    await held(run)

    await run.decide(arguments={"text": "the file is private"})

    sent = sent_to_model(agent)
    assert ("the file is private" in sent, "42" in sent) == (True, False)


async def test_a_blocked_tool_result_reaches_the_model_as_a_refusal(agent: Agent) -> None:
    run = await reading(agent, "ask-block-result")
    await held(run)

    await run.decide(approved=False)

    assert "42" not in sent_to_model(agent)
    result = (await run.transcript())[-2]
    assert tool_result(result)["error"]["code"] == ErrorCode.GUARDRAIL_BLOCKED


# --- deadlines, stops, memory, lists -------------------------------------------------


async def test_past_the_guardrail_s_deadline_the_run_s_default_applies(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    rails = [{**SECRETS, "timeout": 1}]
    run = await agent.start(
        "the secret is 42", guardrails=rails, approval_default=ApprovalDefault.APPROVE
    )

    state = await until(run, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert state.last_assistant_text == "Noted."
    hit = (await run.transcript())[0].guardrails[0]
    assert hit.decision is not None
    assert (hit.decision.allowed, hit.decision.by) == (True, "deadline")


async def test_past_the_run_s_approval_timeout_a_flagged_reply_is_blocked(agent: Agent) -> None:
    agent.model.add(say("I cannot see that."))
    run = await agent.start(
        "the secret is 42", guardrails=[SECRETS], approval_timeout=timedelta(seconds=1)
    )

    await until(run, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert "42" not in sent_to_model(agent)


async def test_a_stop_ends_the_wait_and_the_run(agent: Agent) -> None:
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)

    await run.stop()

    state = await run.wait_for({Phase.COMPLETED, Phase.FAILED}, TIMEOUT)
    assert state.phase in (Phase.COMPLETED, Phase.FAILED)
    assert agent.model.requests == []


async def test_a_remembered_allow_lets_the_guardrail_s_later_hits_through(agent: Agent) -> None:
    agent.model.add(say("Noted."), say("Noted again."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)
    await run.decide(remember="run")

    state = await run.send("another secret: 43")

    assert state.waiting_for is WaitingFor.INPUT
    assert "another secret: 43" in sent_to_model(agent)


async def test_tarry_list_waiting_for_guardrail_finds_the_run(agent: Agent) -> None:
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    await held(run)
    await until_listed(agent.tarry.client, "TarryWaitingFor = 'guardrail'", run.id)

    out = await Cli.of(agent).ok("list", "--waiting-for", "guardrail", "--limit", "1000", "--json")

    rows = {row["run_id"]: row for row in json.loads(out)}
    assert rows[run.id]["waiting_for"] == "guardrail"


async def test_a_worker_restart_while_a_text_waits_changes_nothing(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    run = await agent.start("the secret is 42", guardrails=[SECRETS])
    before = await held(run)

    await agent.restart_worker()

    after = await run.state()
    assert (after.waiting_for, after.pending_approvals) == (
        WaitingFor.GUARDRAIL,
        before.pending_approvals,
    )
    state = await run.decide(arguments={"text": "the number is withheld"})
    assert state.last_assistant_text == "Noted."
    assert "the number is withheld" in sent_to_model(agent)


# --- who decides, and what a decision naming no call decides ------------------------------


async def held_for_alice(agent: Agent) -> RunHandle:
    run = await agent.start("the secret is 42", guardrails=[{**SECRETS, "approvers": ["alice"]}])
    await held(run)
    return run


async def test_tarry_approve_by_someone_outside_its_approvers_is_one_error_line(
    agent: Agent,
) -> None:
    run = await held_for_alice(agent)
    mallory = Cli(Cli.of(agent).env | {"TARRY_USER": "mallory"}, agent)

    result = await mallory("approve", run.id)

    result.assert_one_error_line(
        "error: APPROVAL_NOT_ALLOWED: mallory may not decide guardrail ask-secrets's"
    )
    assert (await run.state()).waiting_for is WaitingFor.GUARDRAIL


async def test_an_mcp_decision_by_someone_outside_its_approvers_is_approval_not_allowed(
    agent: Agent, payload_store: Path
) -> None:
    run = await held_for_alice(agent)

    async with mcp_client(agent, payload_store, env={"TARRY_USER": "mallory"}) as client:
        result = await client.call_tool("decide", {"run_id": run.id, "approved": True})

    assert result.structured_content is not None
    assert result.structured_content["code"] == ErrorCode.APPROVAL_NOT_ALLOWED
    assert (await run.state()).waiting_for is WaitingFor.GUARDRAIL


async def test_a_decision_naming_no_call_decides_the_calls_and_leaves_a_held_text(
    agent: Agent,
) -> None:
    workspace = agent.workspace_root / "ask-and-gate"
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("the secret is 42")
    read = ScriptedToolCall(name="read_file", arguments={"path": "notes.md"}, id="r1")
    write = ScriptedToolCall(name="write_file", arguments={"path": "a.md", "content": "A"}, id="w1")
    agent.model.add(calls(read, write), say("Done."))
    run = await agent.start(
        "read notes.md, then write a.md",
        run_id="ask-and-gate",
        guardrails=[rail(GuardPoint.TOOL_RESULT)],
        require_approval=["write_file"],
    )
    state = await until(run, lambda s: len(s.pending_approvals) == 2)
    assert state.waiting_for is WaitingFor.GUARDRAIL  # the held text is asked about first

    state = await run.decide()  # `tarry approve --all`

    assert [p.call_id for p in state.pending_approvals] == ["guardrail-1"]
    assert state.waiting_for is WaitingFor.GUARDRAIL
    await until(run, lambda _: (workspace / "a.md").exists())  # the approved call ran
    assert (await run.state()).waiting_for is WaitingFor.GUARDRAIL


async def test_a_held_text_notifies_as_an_approval_naming_its_guardrail(
    agent_factory: Any, tmp_path: Path
) -> None:
    async with listening(Receiver()) as receiver:
        agent = await notifying(agent_factory, tmp_path, receiver, ["waiting_for_approval"])
        await agent.start("the secret is 42", guardrails=[SECRETS])

        await receiver.until_taken(1)

    [sent] = [t.json for t in receiver.delivered]
    assert (sent["event"], sent["waiting_for"]) == ("waiting_for_approval", "guardrail")
    assert sent["summary"] == (
        "guardrail 'ask-secrets' holds a person's message: secrets need a person's eye"
    )
    assert [p["guardrail"]["guardrail"] for p in sent["pending_approvals"]] == ["ask-secrets"]


# --- how the CLI shows it ----------------------------------------------------------------


def test_tarry_status_shows_a_held_text_with_its_guardrail_and_its_matches_marked() -> None:
    hit = GuardrailHit(
        guardrail="ask-secrets",
        verdict=GuardVerdict.ASK,
        reason="secrets need a person's eye",
        matches=[GuardrailMatch(kind="deny", start=4, end=10)],
        on=GuardPoint.INPUT,
    )
    pending = PendingApproval(
        call_id="guardrail-1",
        tool="ask-secrets",
        arguments=json.dumps({"text": "the secret is 42"}),
        approvers=["alice"],
        guardrail=hit,
    )
    state = RunState(
        phase=Phase.WAITING_USER, waiting_for=WaitingFor.GUARDRAIL, pending_approvals=[pending]
    )

    shown = state_text("run-1", state).plain.splitlines()

    assert "waiting for  guardrail" in shown
    assert shown[shown.index("guardrail-1:") + 1] == "    │ the ⟦secret⟧ is 42"
    assert (
        "approvals    guardrail 'ask-secrets' holds a person's message: secrets need a"
        " person's eye [guardrail-1] · approvers alice"
    ) in shown


async def test_tarry_start_names_an_asking_guardrail_s_approvers_after_ask(agent: Agent) -> None:
    run = await Cli.of(agent).start(
        "the secret is 42", "--guardrail", "input:pattern:ask=alice,ops:secret"
    )

    state = await held(run)

    assert [(p.tool, p.approvers) for p in state.pending_approvals] == [
        ("input-pattern", ["alice", "ops"])
    ]
