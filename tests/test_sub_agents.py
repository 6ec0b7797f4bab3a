"""Sub-agents: a run hands a task to an agent of the worker's config (`agent__NAME`),
which works on it as a child run of its own; the tree behaves as one run to a person."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import (
    EventType,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    StepStartedEvent,
    TextMessageContentEvent,
)
from temporalio.client import Client, WorkflowHistory

from tarry.client import RunHandle, TarryError
from tarry.config.settings import DEFAULT_WORKFLOW_CACHE
from tarry.contracts import (
    AgentSpec,
    Budget,
    ErrorCode,
    Mode,
    Phase,
    RunState,
    Usage,
    WaitingFor,
)
from tarry.testing.scripted_model import ScriptedModel, call, fail, say
from tests.cli import Cli
from tests.conftest import FAST_TIMEOUTS, Agent, tool_result
from tests.deadline import TIMEOUT, deadline
from tests.faults import CrashRig, finished, line_count, wait_for_file_lines
from tests.http_api import Api, serving
from tests.test_agui import exchange
from tests.test_mcp_server import mcp_client, use

RESEARCHER = AgentSpec(
    description="Finds facts in the team's files and answers with them.",
    system="You are a careful researcher.",
    tools=["list_files", "read_file"],
)
PLANNER = AgentSpec(
    description="Plans a piece of work with the person it is for.",
    tools=[],
    mode=Mode.CHAT,
)
"""A chat-mode agent: an answer without tool calls asks the person; `finish` ends it."""
WRITER = AgentSpec(
    description="Writes files.", tools=["write_file"], require_approval=["write_file"]
)
STALL_PAST_HEARTBEAT = timedelta(seconds=10)
"""How much longer than its runs' heartbeat timeout a stalled worker stays stopped: the
server's timer can fire late on a busy machine (a 3 s margin once saw no retry)."""
WAITING = {Phase.WAITING_USER}
ENDED = {Phase.COMPLETED, Phase.FAILED}


async def team(agent_factory: Any, **agents: AgentSpec) -> Agent:
    made: Agent = await agent_factory(agents=agents or {"researcher": RESEARCHER})
    return made


async def child_of(
    agent: Agent, parent: RunHandle, n: int = 1, name: str = "researcher"
) -> RunHandle:
    """The parent's `n`th child run, replayed at the test's end like the runs it started."""
    child = agent.tarry.get(f"{parent.id}:{name}-{n}")
    agent.runs.append(child)
    return child


async def until(run: RunHandle, condition: Callable[[RunState], bool]) -> RunState:
    """The run's state once `condition` holds of it (a child run may not exist yet)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            try:
                if condition(state := await run.state()):
                    return state
            except TarryError as e:
                if e.code is not ErrorCode.RUN_NOT_FOUND:
                    raise
            await asyncio.sleep(0.05)


async def until_listed(api: Api, query: str, run_id: str) -> dict[str, Any]:
    """The run's row of `/v1/runs?query`, once visibility has it."""
    async with asyncio.timeout(deadline(30)):
        while True:
            response = await api.http.get(f"/v1/runs?{query}&limit=1000")
            assert response.status_code == 200, response.text
            runs: list[dict[str, Any]] = response.json()["runs"]
            rows = [row for row in runs if row["id"] == run_id]
            if rows:
                return rows[0]
            await asyncio.sleep(0.2)


async def until_cli_listed(cli: Cli, run_id: str) -> str:
    """`tarry list --waiting-for input`'s line of the run, once visibility has it."""
    async with asyncio.timeout(deadline(30)):
        while True:
            out = await cli.ok("list", "--waiting-for", "input", "--limit", "1000")
            if line := next((line for line in out.splitlines() if line.startswith(run_id)), None):
                return line
            await asyncio.sleep(0.2)


# A tree's runs share one model. Each run's answers are scripted as its own conversation
# (`ScriptedModel.add_conversation`), not as one queue in the order the runs ask: a
# call the worker retries (its attempt timed out on a busy machine) then gets its own
# answer again instead of the next run's.


def plan_the_launch(agent: Agent, prompt: str) -> None:
    """A lead opening with `prompt` hands the launch to `planner`, which asks which day."""
    agent.model.add_conversation(
        prompt,
        call("agent__planner", {"task": "Plan the launch."}, id="a1"),
        say("The plan: launch on Monday."),
    )
    agent.model.add_conversation(
        "Plan the launch.",
        say("Which day should we launch?"),
        call("finish", {"result": "Launch on Monday."}, id="f1"),
    )


def write_the_plan(agent: Agent) -> None:
    """A lead hands the plan to `writer`, which writes it with a gated call."""
    agent.model.add_conversation(
        "Get the plan written.",
        call("agent__writer", {"task": "Write the plan."}, id="a1"),
        say("The writer wrote the plan."),
    )
    agent.model.add_conversation(
        "Write the plan.",
        call("write_file", {"path": "plan.md", "content": "ship it"}, id="w1"),
        say("Written."),
    )


async def asking_child(agent: Agent) -> tuple[RunHandle, RunHandle]:
    """A parent whose `planner` asks the person a question: (parent, child), waiting."""
    plan_the_launch(agent, "Plan our launch.")
    parent = await agent.start("Plan our launch.", agents=["planner"])
    child = await child_of(agent, parent, name="planner")
    await until(child, lambda s: s.waiting_for is WaitingFor.INPUT)
    return parent, child


def child_starts(history: WorkflowHistory) -> int:
    """How many sub-agents a run's history started."""
    return sum(
        e.HasField("start_child_workflow_execution_initiated_event_attributes")
        for e in history.events
    )


def tokens(total: int) -> Usage:
    return Usage(prompt_tokens=total, total_tokens=total)


async def test_a_run_gets_its_sub_agents_answer_as_the_tool_result(agent_factory: Any) -> None:
    agent = await team(agent_factory)
    agent.model.add_conversation(
        "What do we know?",
        call("agent__researcher", {"task": "Which files do we have?"}, id="a1"),
        say("The researcher found no files."),
    )
    agent.model.add_conversation(
        "Which files do we have?", call("list_files", {}, id="r1"), say("There are no files yet.")
    )

    parent = await agent.start("What do we know?", agents=["researcher"])
    await parent.wait_for(WAITING, TIMEOUT)
    child = await child_of(agent, parent)

    delegated = (await parent.transcript())[2]
    assert delegated.tool_call_id == "a1"
    assert tool_result(delegated) == {"ok": True, "data": "There are no files yet."}
    child_result = await child.result()
    assert child_result.phase is Phase.COMPLETED
    assert [m.role for m in await child.transcript()] == ["user", "assistant", "tool", "assistant"]
    assert (await child.state()).parent == parent.id


async def test_a_sub_agents_failure_is_a_coded_tool_error_its_parent_reads(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory)
    agent.model.add_conversation(
        "Research.",
        call("agent__researcher", {"task": "Look it up."}, id="a1"),
        say("The researcher could not work."),
    )
    agent.model.add_conversation("Look it up.", fail(401))

    parent = await agent.start("Research.", agents=["researcher"])
    state = await parent.wait_for(WAITING, TIMEOUT)
    child = await child_of(agent, parent)

    error = tool_result((await parent.transcript())[2])["error"]
    assert error["code"] == "AGENT_FAILED"
    assert "LLM_AUTH_FAILED" in error["message"]
    assert error["details"] == {"run_id": child.id}
    assert (await child.result()).phase is Phase.FAILED
    assert state.last_assistant_text == "The researcher could not work."


async def test_a_sub_agents_structured_output_is_its_parents_tool_result(
    agent_factory: Any,
) -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}
    agent = await team(agent_factory, scheduler=AgentSpec(tools=[], output_schema=schema))
    agent.model.add_conversation(
        "When?", call("agent__scheduler", {"task": "Pick a day."}, id="a1"), say("Monday it is.")
    )
    agent.model.add_conversation("Pick a day.", say('{"day": "Monday"}'))

    parent = await agent.start("When?", agents=["scheduler"])
    await parent.wait_for(WAITING, TIMEOUT)
    await child_of(agent, parent, name="scheduler")

    assert tool_result((await parent.transcript())[2]) == {"ok": True, "data": {"day": "Monday"}}


async def test_temporal_finds_a_runs_sub_agents_by_their_parent(agent_factory: Any) -> None:
    agent = await team(agent_factory)
    agent.model.add_conversation(
        "Research.", call("agent__researcher", {"task": "Look."}, id="a1"), say("Done.")
    )
    agent.model.add_conversation("Look.", say("Nothing."))
    parent = await agent.start("Research.", agents=["researcher"])
    await parent.wait_for(WAITING, TIMEOUT)
    child = await child_of(agent, parent)
    query = f"ParentWorkflowId = '{parent.id}'"

    async with asyncio.timeout(deadline(30)):
        # Visibility records a run a moment after it starts; it has no notification.
        while not [e.id async for e in agent.tarry.client.list_workflows(query)]:
            await asyncio.sleep(0.2)

    assert [e.id async for e in agent.tarry.client.list_workflows(query)] == [child.id]


async def test_a_sub_agent_starts_with_its_settings_and_the_task_as_prompt(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory)
    agent.model.add_conversation(
        "When do we launch?",
        call("agent__researcher", {"task": "Find the launch date."}, id="a1"),
        say("It is Monday."),
    )
    agent.model.add_conversation("Find the launch date.", say("Monday."))

    parent = await agent.start("When do we launch?", agents=["researcher"])
    await parent.wait_for(WAITING, TIMEOUT)
    await child_of(agent, parent)

    offered = agent.model.requests[0].body["tools"]
    delegate = next(t for t in offered if t["function"]["name"] == "agent__researcher")
    assert delegate["function"]["description"] == RESEARCHER.description
    assert list(delegate["function"]["parameters"]["properties"]) == ["task"]
    asked = agent.model.requests[1].body
    assert asked["messages"][0] == {"role": "system", "content": RESEARCHER.system}
    assert asked["messages"][1]["content"] == "Find the launch date."
    assert {t["function"]["name"] for t in asked["tools"]} == {"list_files", "read_file", "finish"}


async def test_a_run_naming_an_agent_no_worker_has_is_refused_at_start(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory)

    with pytest.raises(TarryError) as refused:
        await agent.start("Delegate this.", agents=["researcher", "reseacher"])

    assert refused.value.code is ErrorCode.TOOL_NOT_FOUND
    assert "'reseacher'" in refused.value.message


async def test_a_sub_agent_asking_a_question_makes_its_parent_wait_for_agent(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)

    state = await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)

    assert state.phase is Phase.WAITING_USER
    assert state.waiting_on == child.id
    assert (await child.state()).last_assistant_text == "Which day should we launch?"


async def test_a_reply_to_a_run_waiting_for_its_sub_agent_is_queued_and_answered_at_once(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, _ = await asking_child(agent)
    await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)

    state = await parent.send("Keep it cheap, too.")

    assert state.waiting_for is WaitingFor.AGENT
    assert state.pending_inputs == 1


async def test_a_reply_to_the_sub_agent_through_the_api_lets_the_parent_go_on(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)

    async with serving(agent) as api:
        row = await until_listed(api, "waiting_for=input", child.id)
        response = await api.http.post(f"/v1/runs/{child.id}/messages", json={"text": "Monday"})
    state = await until(parent, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert row["parent"] == parent.id
    assert response.status_code == 202, response.text
    assert state.last_assistant_text == "The plan: launch on Monday."
    assert tool_result((await parent.transcript())[2])["data"] == "Launch on Monday."
    assert (await child.result()).output == "Launch on Monday."


async def test_a_reply_to_the_sub_agent_through_the_cli_lets_the_parent_go_on(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)
    cli = Cli.of(agent)

    status = await cli.ok("status", parent.id)
    listed = await until_cli_listed(cli, child.id)
    await cli.ok("reply", child.id, "Monday")
    state = await until(parent, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert f"agent {child.id}" in status
    assert f"(agent of {parent.id}) Plan the launch." in listed
    assert state.last_assistant_text == "The plan: launch on Monday."


async def test_the_api_names_a_leads_sub_agent_and_the_sub_agents_lead(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)
    await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)

    async with serving(agent) as api:
        lead_view = (await api.http.get(f"/v1/runs/{parent.id}")).json()
        child_view = (await api.http.get(f"/v1/runs/{child.id}")).json()

    assert (lead_view["parent"], lead_view["children"]) == (None, [child.id])
    assert lead_view["waiting_on"] == child.id
    assert (child_view["parent"], child_view["children"]) == (parent.id, [])


async def test_the_api_lists_every_sub_agent_a_run_started_oldest_first(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory)
    agent.model.add_conversation(
        "Research twice.",
        call("agent__researcher", {"task": "Look here."}, id="a1"),
        call("agent__researcher", {"task": "Look there."}, id="a2"),
        say("Both looked."),
    )
    agent.model.add_conversation("Look here.", say("Nothing here."))
    agent.model.add_conversation("Look there.", say("Nothing there."))
    parent = await agent.start("Research twice.", agents=["researcher"])
    await parent.wait_for(WAITING, TIMEOUT)
    first, second = await child_of(agent, parent, 1), await child_of(agent, parent, 2)

    async with serving(agent) as api:
        async with asyncio.timeout(deadline(30)):
            # Visibility lists an ended child a moment after it ends; it has no notification.
            while len((view := await api.state(parent.id)).children) < 2:
                await asyncio.sleep(0.2)

    assert view.children == [first.id, second.id]
    assert view.parent is None


async def test_tarry_list_shows_a_sub_agent_under_its_lead(agent_factory: Any) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)
    await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)
    cli = Cli.of(agent)

    async with asyncio.timeout(deadline(30)):
        # Until visibility records both waits (it has no notification).
        while True:
            lines = (await cli.ok("list", "--limit", "1000")).splitlines()
            lead = next((n for n, line in enumerate(lines) if line.startswith(parent.id)), None)
            below = lines[lead + 1] if lead is not None and lead + 1 < len(lines) else ""
            if lead is not None and " agent " in lines[lead] and " input " in below:
                break
            await asyncio.sleep(0.2)

    assert lines[lead + 1].startswith(f"└ {child.id} ")
    assert lines[lead + 1].split()[2:6] == ["WaitingUser", "1", "default", "input"]
    # Its lead is on the line above: the summary need not name it.
    assert lines[lead + 1].rstrip().endswith("  Plan the launch.")
    assert "agent of" not in lines[lead + 1]


async def test_tarry_status_names_a_runs_lead_and_its_sub_agents(agent_factory: Any) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)
    await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)
    cli = Cli.of(agent)

    lead = await cli.ok("status", parent.id)
    sub = await cli.ok("status", child.id)
    lead_json = json.loads(await cli.ok("status", parent.id, "--json"))

    assert re.search(rf"^sub-agents +{re.escape(child.id)}$", lead, re.MULTILINE), lead
    assert re.search(rf"^agent of +{re.escape(parent.id)}$", sub, re.MULTILINE), sub
    assert "sub-agents" not in sub
    assert lead_json["children"] == [child.id]


async def test_a_run_whose_agent_names_a_tool_no_worker_has_is_refused_at_start(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, typist=AgentSpec(tools=["typewriter"]))

    with pytest.raises(TarryError) as refused:
        await agent.start("Type it.", agents=["typist"])

    assert refused.value.code is ErrorCode.TOOL_NOT_FOUND
    assert "agent 'typist'" in refused.value.message


async def test_a_sub_agents_gated_call_is_listed_and_decided_like_any_other(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, writer=WRITER)
    write_the_plan(agent)
    parent = await agent.start("Get the plan written.", agents=["writer"])
    child = await child_of(agent, parent, name="writer")

    async with serving(agent) as api:
        row = await until_listed(api, "waiting_for=approval", child.id)
        waiting = await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)
        decided = await api.http.post(
            f"/v1/runs/{child.id}/approvals", json={"call_id": "w1", "approved": True}
        )
    state = await until(parent, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert row["parent"] == parent.id
    assert waiting.waiting_on == child.id
    assert decided.status_code == 200, decided.text
    assert (agent.workspace_root / parent.id / "plan.md").read_text() == "ship it"
    assert state.last_assistant_text == "The writer wrote the plan."


async def test_a_sub_agent_follows_its_leads_approval_rules(agent_factory: Any) -> None:
    agent = await team(agent_factory, writer=WRITER)
    write_the_plan(agent)
    rule = {"tool": "write_file", "when": {"/path": "*.md"}, "decision": "approve"}

    parent = await agent.start("Get the plan written.", agents=["writer"], approval_rules=[rule])
    child = await child_of(agent, parent, name="writer")
    state = await until(parent, lambda s: s.waiting_for is WaitingFor.INPUT)

    written = next(m for m in await child.transcript() if m.tool_call_id == "w1")
    assert written.decision is not None
    assert written.decision.user == "rule 1"
    assert (agent.workspace_root / parent.id / "plan.md").read_text() == "ship it"
    assert state.last_assistant_text == "The writer wrote the plan."


async def test_stopping_the_parent_stops_its_sub_agent(agent_factory: Any) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)
    await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)

    await parent.stop("not needed any more")
    parent_result, child_result = await parent.result(), await child.result()

    assert child_result.phase is Phase.COMPLETED
    assert child_result.stop_reason == "not needed any more"
    assert parent_result.phase is Phase.COMPLETED
    assert parent_result.stop_reason == "not needed any more"
    assert tool_result((await parent.transcript())[2])["error"]["code"] == "AGENT_FAILED"


async def test_a_sub_agents_tokens_count_against_its_parents_budget(agent_factory: Any) -> None:
    agent = await team(agent_factory)
    agent.model.add_conversation(
        "Research.",
        call("agent__researcher", {"task": "Look around."}, id="a1", usage=tokens(100)),
    )
    agent.model.add_conversation("Look around.", say("Nothing here.", usage=tokens(950)))

    parent = await agent.start(
        "Research.", agents=["researcher"], budget=Budget(max_total_tokens=1000)
    )
    state = await until(parent, lambda s: s.waiting_for is WaitingFor.BUDGET)
    await child_of(agent, parent)

    assert state.usage.total_tokens == 1050
    assert tool_result((await parent.transcript())[2])["data"] == "Nothing here."


async def research_over_budget(agent: Agent) -> RunHandle:
    """A lead with 1,000 tokens whose researcher's first answer takes it past them."""
    agent.model.add_conversation(
        "Research.",
        call("agent__researcher", {"task": "Look around."}, id="a1", usage=tokens(100)),
        say("The researcher found nothing.", usage=tokens(10)),
    )
    agent.model.add_conversation(
        "Look around.",
        call("list_files", {}, id="r1", usage=tokens(950)),
        say("Nothing here.", usage=tokens(10)),
    )
    return await agent.start(
        "Research.", agents=["researcher"], budget=Budget(max_total_tokens=1000)
    )


async def test_a_sub_agent_over_the_trees_budget_pauses_until_the_parents_is_raised(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory)
    parent = await research_over_budget(agent)
    child = await child_of(agent, parent)
    paused = await until(child, lambda s: s.waiting_for is WaitingFor.BUDGET)
    waiting = await until(parent, lambda s: s.waiting_for is WaitingFor.AGENT)

    await parent.raise_budget(max_total_tokens=2000)
    state = await until(parent, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert paused.budget == Budget(max_total_tokens=900)
    assert waiting.waiting_on == child.id
    assert (await child.state()).budget == Budget(max_total_tokens=1900)
    assert state.last_assistant_text == "The researcher found nothing."
    assert state.usage.total_tokens == 100 + 950 + 10 + 10


# The timed-out attempt finishes before Temporal's cancellation of it reaches the worker.
@pytest.mark.filterwarnings("ignore:Cannot find activity to cancel:UserWarning")
async def test_a_lead_whose_worker_stalled_mid_call_starts_one_sub_agent(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory)
    parent = await research_over_budget(agent)
    await agent.model.wait_for_requests(1, TIMEOUT)

    # The whole worker process stops past the model call's heartbeat timeout, as on a
    # paused machine. Temporal mostly times the attempt out and the worker asks again
    # (a loaded run once saw no retry): either way the tree comes out the same.
    time.sleep((FAST_TIMEOUTS.llm_heartbeat + STALL_PAST_HEARTBEAT).total_seconds())  # noqa: ASYNC251
    child = await child_of(agent, parent)
    await until(child, lambda s: s.waiting_for is WaitingFor.BUDGET)
    history = await agent.tarry.client.get_workflow_handle(parent.id).fetch_history()

    assert child_starts(history) == 1


@pytest.mark.parametrize("cache", [DEFAULT_WORKFLOW_CACHE, 0], ids=["cache", "no-cache"])
async def test_a_tree_survives_a_worker_killed_while_the_sub_agent_works(
    temporal: Client, tmp_path: Path, cache: int
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text('[agents.researcher]\ndescription = "Looks things up."\ntools = ["block"]\n')
    async with ScriptedModel() as model:
        rig = CrashRig(
            temporal,
            model.base_url,
            tmp_path / "workspaces",
            tmp_path / "logs",
            workflow_cache=cache,
            env={"TARRY_CONFIG": str(config)},
        )
        model.add_conversation(
            "Find it.",
            call("agent__researcher", {"task": "Look it up."}, id="a1"),
            say("The researcher found it."),
        )
        model.add_conversation(
            "Look it up.", call("block", {"name": "b"}, id="b1"), say("Found it.")
        )
        try:
            first = await rig.worker()
            parent = await rig.start("Find it.", agents=["researcher"], mode=Mode.TASK)
            child = rig.tarry.get(f"{parent.id}:researcher-1")
            rig.runs.append(child)
            starts = rig.workspace(parent) / "b.starts"  # the lead's, which the child shares
            await wait_for_file_lines(starts, 1)

            await first.kill()
            (rig.workspace(parent) / "b.release").touch()
            await rig.worker()
            result = await finished(parent)
            child_result = await child.result()
            transcript = await parent.transcript()
        finally:
            await rig.close()

    assert result.phase is Phase.COMPLETED
    assert result.output == "The researcher found it."
    assert child_result.output == "Found it."
    delegated = [m for m in transcript if m.tool_call_id == "a1"]
    assert [tool_result(m)["data"] for m in delegated] == ["Found it."]
    assert line_count(starts) == 2  # the child's idempotent tool ran again; nothing else did
    history = await temporal.get_workflow_handle(parent.id).fetch_history()
    assert child_starts(history) == 1


async def test_ag_ui_shows_a_waiting_sub_agent_as_a_nested_step_and_answers_it_on_its_thread(
    agent_factory: Any,
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    plan_the_launch(agent, "Plan our launch.")
    lead = await agent.start(agents=["planner"])
    child = await child_of(agent, lead, name="planner")

    async with serving(agent) as api:
        asked = await exchange(api, lead.id, "Plan our launch.")
        answered = await exchange(api, child.id, "Monday")
    state = await until(lead, lambda s: s.waiting_for is WaitingFor.INPUT)

    [step] = [e for e in asked if isinstance(e, StepStartedEvent)]
    nested = asked[asked.index(step) : -1]
    words = "".join(e.delta for e in nested if isinstance(e, TextMessageContentEvent))
    finished = asked[-1]
    assert step.step_name == child.id
    assert nested[-1].type == EventType.STEP_FINISHED
    assert words == "Which day should we launch?"
    assert isinstance(finished, RunFinishedEvent)
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    [interrupt] = finished.outcome.interrupts
    assert (interrupt.reason, interrupt.subagent_run_id) == ("agent", child.id)
    assert answered[-1].type == EventType.RUN_FINISHED
    assert state.last_assistant_text == "The plan: launch on Monday."


async def test_the_mcp_server_lists_a_waiting_sub_agent_with_its_parent(
    agent_factory: Any, payload_store: Path
) -> None:
    agent = await team(agent_factory, planner=PLANNER)
    parent, child = await asking_child(agent)

    async with asyncio.timeout(deadline(30)), mcp_client(agent, payload_store) as client:
        # Visibility records the child's phase a moment after it waits; no notification.
        while not (
            rows := [r for r in await use(client, "waiting_runs") if r["run_id"] == child.id]
        ):
            await asyncio.sleep(0.2)

    assert rows[0]["parent"] == parent.id
    assert rows[0]["waiting_for"] == "input"
