"""The run timeline (`GET /v1/runs/{id}/timeline`, `tarry show RUN --timeline`): a run's
model calls, tool calls, guardrail checks, waits for people and sub-agents on one time
axis, read from its history, with durations, tokens and cost, and the current wait still
open."""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import Client

from tarry.client import RunHandle
from tarry.client.timeline import read_timeline
from tarry.config.tables import Prices
from tarry.contracts import (
    AgentSpec,
    ErrorCode,
    Phase,
    RunTimeline,
    SpanKind,
    SpanStatus,
    WaitingFor,
)
from tarry.testing.scripted_model import call, say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.grpc_faults import GET_WORKFLOW_EXECUTION_HISTORY, counting_proxy
from tests.http_api import serving
from tests.test_guardrails import EMAIL, PII

RESEARCHER = AgentSpec(description="Finds facts.", tools=["list_files"])
PROMPT = "Write the facts down."
"""The lead's prompt: a gated `write_file`, then the researcher, then its answer."""
KINDS = [
    SpanKind.MODEL,  # asks for write_file
    SpanKind.WAIT,  # for its approval
    SpanKind.TOOL,  # write_file, approved
    SpanKind.MODEL,  # hands the check to the researcher
    SpanKind.AGENT,  # the researcher's run
    SpanKind.MODEL,  # answers
    SpanKind.WAIT,  # for a reply, still open
]


async def facts_agent(agent_factory: Any) -> Agent:
    """A worker with the researcher and a model with prices, scripted for `PROMPT`."""
    agent: Agent = await agent_factory(
        agents={"researcher": RESEARCHER}, prices=Prices(input=2.0, output=10.0)
    )
    agent.model.add_conversation(
        PROMPT,
        call("write_file", {"path": "facts.md", "content": "water is wet"}, id="w1"),
        call("agent__researcher", {"task": "Check the facts."}, id="a1"),
        say("Written, and checked."),
    )
    agent.model.add_conversation("Check the facts.", say("They hold."))
    return agent


async def approved_after_a_wait(run: RunHandle) -> str:
    """Approves `w1` once the run asks for it; who decided, as the transcript records it,
    once the run, past its sub-agent, waits for a reply."""
    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    state = await run.decide("w1")
    assert state.waiting_for is WaitingFor.INPUT
    [tool_message] = [m for m in await run.transcript() if m.tool_call_id == "w1"]
    assert tool_message.decision is not None
    assert tool_message.decision.user is not None
    return tool_message.decision.user


def assert_the_facts_run(timeline: RunTimeline, run_id: str, decider: str) -> None:
    """What the timeline of the run `facts_agent` scripts says, whoever read it."""
    spans = timeline.spans
    assert [s.kind for s in spans] == KINDS, spans
    model_calls = [s for s in spans if s.kind is SpanKind.MODEL]
    assert all(s.tokens and s.cost_usd and s.status is SpanStatus.OK for s in model_calls)
    assert model_calls[0].name == "turn 1 · default"
    approval, tool, agent, reply = spans[1], spans[2], spans[4], spans[6]
    assert (approval.waiting_for, approval.by, approval.status) == (
        WaitingFor.APPROVAL,
        decider,
        SpanStatus.OK,
    )
    assert approval.end is not None
    assert tool.start >= approval.end
    assert tool.name.startswith("write_file")
    assert tool.status is SpanStatus.OK
    assert (agent.run_id, agent.status) == (f"{run_id}:researcher-1", SpanStatus.OK)
    assert agent.tokens
    assert agent.cost_usd
    assert (reply.waiting_for, reply.status, reply.end) == (WaitingFor.INPUT, SpanStatus.OPEN, None)
    assert reply.duration_s == (timeline.now - reply.start).total_seconds()
    assert not timeline.ended
    for span in spans:
        assert span.offset_s == (span.start - timeline.started_at).total_seconds()


async def test_the_api_timeline_shows_calls_the_approval_wait_the_sub_agent_and_the_open_wait(
    agent_factory: Any,
) -> None:
    agent = await facts_agent(agent_factory)
    async with serving(agent) as api:
        run_id = await api.start(PROMPT, require_approval=["write_file"], agents=["researcher"])
        decider = await approved_after_a_wait(api.run(run_id))

        first = await api.http.get(f"/v1/runs/{run_id}/timeline")
        second = await api.http.get(f"/v1/runs/{run_id}/timeline")

    assert first.status_code == 200, first.text
    timeline = RunTimeline.model_validate(first.json())
    assert_the_facts_run(timeline, run_id, decider)
    later = RunTimeline.model_validate(second.json())
    assert later.spans[-1].duration_s > timeline.spans[-1].duration_s, "the open wait grows"
    assert later.spans[:-1] == timeline.spans[:-1]


async def test_the_timeline_of_a_run_there_is_not_is_404_run_not_found(agent: Agent) -> None:
    async with serving(agent) as api:
        response = await api.http.get("/v1/runs/run-nobody-has/timeline")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == ErrorCode.RUN_NOT_FOUND


async def test_show_timeline_prints_a_row_per_span_with_its_duration_tokens_and_cost(
    agent_factory: Any,
) -> None:
    agent = await facts_agent(agent_factory)
    cli = Cli.of(agent)
    run = await agent.start(PROMPT, require_approval=["write_file"], agents=["researcher"])
    decider = await approved_after_a_wait(run)

    text = await cli.ok("show", run.id, "--timeline")
    as_json = RunTimeline.model_validate(
        json.loads(await cli.ok("show", run.id, "--timeline", "--json"))
    )

    assert_the_facts_run(as_json, run.id, decider)
    heading, columns, *rows = text.splitlines()
    # The whole team's spending: the lead's model calls and the researcher's.
    team = [s for s in as_json.spans if s.kind in (SpanKind.MODEL, SpanKind.AGENT)]
    tokens, cost = sum(s.tokens or 0 for s in team), sum(s.cost_usd or 0 for s in team)
    assert heading.startswith(f"{run.id} · ")
    assert heading.endswith(f" · open · {tokens} tokens · ${cost:.4f}")
    assert columns.split() == ["start", "took", "kind", "name", "tokens", "cost"]
    assert [row.split()[2] for row in rows] == [kind.value for kind in KINDS]
    assert f"approval · by {decider}" in rows[1]
    assert "write_file" in rows[2]
    assert "researcher" in rows[4]
    assert rows[0].split()[-3:-1] == [
        str(as_json.spans[0].tokens),
        f"${as_json.spans[0].cost_usd:.4f}",
    ]
    assert rows[-1].split()[1].endswith("…"), "the open wait's duration is so far"


async def test_show_timeline_with_a_transcript_option_is_a_usage_error(cli: Cli) -> None:
    result = await cli("show", "run-any", "--timeline", "--numbers")

    assert result.code == 2
    assert result.err == (
        "error: --timeline shows no messages: --from and --numbers are for the transcript\n"
    )


async def test_the_timeline_runs_across_hand_overs_with_a_wait_handed_over_once(
    agent: Agent,
) -> None:
    agent.model.add(say("One."), say("Two."))
    run = await agent.start("count", continue_as_new_after_turns=1)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    state = await run.send("again")
    assert state.last_assistant_text == "Two."

    timeline = await run.timeline()

    assert len(await agent.histories(run)) > 1
    assert [(s.kind, s.waiting_for) for s in timeline.spans] == [
        (SpanKind.MODEL, None),
        (SpanKind.WAIT, WaitingFor.INPUT),
        (SpanKind.MODEL, None),
        (SpanKind.WAIT, WaitingFor.INPUT),
    ]
    [sender] = {m.by for m in await run.transcript() if m.role == "user"}
    first_wait, last_wait = timeline.spans[1], timeline.spans[3]
    assert (first_wait.status, first_wait.by) == (SpanStatus.OK, sender)
    assert (last_wait.status, last_wait.end) == (SpanStatus.OPEN, None)


async def test_a_timeline_read_again_fetches_only_the_history_after_the_last_hand_over(
    agent: Agent,
) -> None:
    agent.model.add(say("One."), say("Two."), say("Three."))
    run = await agent.start("count", continue_as_new_after_turns=1)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await run.send("again")
    await run.send("and again")
    segments = len(await agent.histories(run))
    server = agent.tarry.client

    async with counting_proxy(
        server.service_client.config.target_host, GET_WORKFLOW_EXECUTION_HISTORY
    ) as proxy:
        client = await Client.connect(
            proxy.address, namespace=server.namespace, data_converter=server.data_converter
        )
        first = await read_timeline(client, run.id)
        fetched_first = proxy.calls
        again = await read_timeline(client, run.id)
        fetched_again = proxy.calls - fetched_first

    assert segments > 2  # hand-overs, and a segment after them still open
    assert (fetched_first, fetched_again) == (segments, 1)
    assert [(s.kind, s.start, s.end, s.by) for s in again.spans] == [
        (s.kind, s.start, s.end, s.by) for s in first.spans
    ]
    assert [s.kind for s in again.spans].count(SpanKind.WAIT) == 3


async def test_a_guardrail_check_is_a_span_with_its_guardrails_and_verdict_never_the_text(
    agent: Agent,
) -> None:
    agent.model.add(say("Noted."))
    run = await agent.start(f"mail {EMAIL}", guardrails=[PII])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    async with serving(agent) as api:
        response = await api.http.get(f"/v1/runs/{run.id}/timeline")
    text = await Cli.of(agent).ok("show", run.id, "--timeline")

    timeline = RunTimeline.model_validate(response.json())
    assert [s.kind for s in timeline.spans] == [SpanKind.GUARDRAIL, SpanKind.MODEL, SpanKind.WAIT]
    check = timeline.spans[0]
    assert (check.name, check.guardrails, check.verdict, check.status) == (
        "input: no-pii",
        ["no-pii"],
        "redact",
        SpanStatus.OK,
    )
    assert EMAIL not in response.text
    row = text.splitlines()[2]
    assert row.split()[2] == "guardrail"
    assert "input: no-pii → redact" in row
