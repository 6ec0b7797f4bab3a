"""A rolling deploy on the dev server: workers of build v1 hold parked runs, a v2 build
of other workflow code is made current, and every run moves to it at its hand-over.

The workers are builds of one worker deployment (`TARRY_DEPLOYMENT`, `TARRY_BUILD_ID`):
`AgentRun` is pinned to the build it started on, and continues as new onto the current
one. A parked run learns that its build is no longer current only when it is next woken
(the server tells a workflow so with a workflow task, never while it sleeps): so it
answers its next reply on v1, then hands over to v2 at once.
"""

from __future__ import annotations

import shlex
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, WorkerConfig

from tarry.client import RunHandle
from tarry.contracts import SUMMARY_MEMO, Budget, Phase, Usage, WaitingFor
from tarry.testing.scripted_model import call, say
from tests.build_v2 import MARK, AgentRunV2
from tests.conftest import Agent, temporal_cli
from tests.deadline import TIMEOUT
from tests.deployments import build_of, make_current, moved_to, versioned_agent
from tests.faults import replay, wait_until
from tests.test_doctor import deployment_report
from tests.test_schedules import Schedules, task
from tests.test_sub_agents import PLANNER, child_of, until
from workers.plugin import TarryPlugin
from workflows.agent_run import AgentRunWorkflow

WAITING = {Phase.WAITING_USER}
STORY = " ".join(f"word{i}" for i in range(120))
"""The mid-stream run's answer: 120 pieces, sent slowly enough to be under way while
the v2 build is deployed and made current."""


class BuildV2(TarryPlugin):
    """The next build's worker: Tarry's plugin, serving `AgentRunV2` as `AgentRun`."""

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        workflows = config.get("workflows", ())
        config["workflows"] = [AgentRunV2 if w is AgentRunWorkflow else w for w in workflows]
        return config


def builds_recording(history: WorkflowHistory) -> set[str]:
    """The builds whose workers completed the history's workflow tasks."""
    return {
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in history.events
        if e.HasField("workflow_task_completed_event_attributes")
    }


async def user_texts(run: RunHandle) -> list[str | None]:
    return [m.content for m in await run.transcript() if m.role == "user"]


def script(agent: Agent) -> None:
    """Each parked run's conversation: what it answers on v1, then on v2."""
    model = agent.model
    model.add_conversation("Hello from before the deploy", say("Hello!"), say("Still here."))
    model.add_conversation(
        "Write the plan",
        call("write_file", {"path": "plan.md", "content": "ship it"}, id="w1"),
        say("Written."),
        say("It says: ship it."),
    )
    model.add_conversation(
        "Plan our launch",
        call("agent__planner", {"task": "Plan the launch."}, id="a1"),
        say("The plan: launch on Monday."),
        say("Monday it is."),
    )
    model.add_conversation(
        "Plan the launch.",
        say("Which day should we launch?"),
        call("finish", {"result": "Launch on Monday."}, id="f1"),
    )
    model.add_conversation(
        "Look around",
        call("list_files", id="c1", usage=Usage(prompt_tokens=120, total_tokens=120)),
        say("Nothing here yet."),
        say("Still nothing."),
    )
    model.add_conversation(
        "Tell me a long story",
        say(STORY, chunk_chars=len("word100 "), max_pieces=None, chunk_delay=0.1),
        say("The end."),
    )
    model.add_conversation("Hello, new build", say("Hello from v2!"))
    model.add_conversation("Park me", say("Parked."), say("Awake on v2."))


async def summary(agent: Agent, run: RunHandle) -> str:
    described = await agent.tarry.client.get_workflow_handle(run.id).describe()
    text: str = await described.memo_value(SUMMARY_MEMO)
    return text


async def story_streaming(agent: Agent) -> bool:
    """Whether the long story's answer is under way: asked for and not yet all sent."""
    return any(
        _first_user_text(r.body) == "Tell me a long story" and not r.settled.is_set()
        for r in agent.model.requests
    )


def _first_user_text(body: dict[str, object]) -> object:
    messages = body.get("messages")
    assert isinstance(messages, list)
    return next((m.get("content") for m in messages if m.get("role") == "user"), None)


async def test_parked_runs_answer_their_next_reply_on_v1_and_go_on_on_v2(
    agent_factory: Any, temporal: Client
) -> None:
    agent, deployment = await versioned_agent(agent_factory, temporal, agents={"planner": PLANNER})
    script(agent)

    # Build v1 holds parked runs.
    waiting = await agent.start()  # no prompt: it takes its summary from its first reply
    approval = await agent.start("Write the plan", require_approval=["write_file"])
    lead = await agent.start("Plan our launch", agents=["planner"])
    budget = await agent.start("Look around", budget=Budget(max_total_tokens=100))
    parked = await agent.start("Park me")
    child = await child_of(agent, lead, name="planner")
    await until(child, lambda s: s.waiting_for is WaitingFor.INPUT)
    for run, waits_for in [
        (waiting, WaitingFor.INPUT),
        (approval, WaitingFor.APPROVAL),
        (lead, WaitingFor.AGENT),
        (budget, WaitingFor.BUDGET),
        (parked, WaitingFor.INPUT),
    ]:
        assert (await run.wait_for(WAITING, TIMEOUT)).waiting_for is waits_for
    streaming = await agent.start("Tell me a long story")
    await wait_until(lambda: story_streaming(agent), what="the story under way")
    before = [waiting, approval, lead, child, budget, parked, streaming]
    assert [await build_of(agent, run) for run in before] == ["v1"] * len(before)

    # Build v2 starts and is made current while the story is still being told.
    await agent.add_worker(plugin=BuildV2, tarry_build_id="v2")
    await make_current(temporal, deployment, "v2")
    assert await story_streaming(agent)

    # New runs go to v2, whose code shows.
    fresh = await agent.start()
    assert (await fresh.send("Hello, new build")).last_assistant_text == "Hello from v2!"
    assert await build_of(agent, fresh) == "v2"
    assert await summary(agent, fresh) == f"{MARK}Hello, new build"

    # A run parked on v1 stays there until it is woken; doctor says how to wake them.
    line, found = await deployment_report(agent, deployment)
    assert line.startswith(f"Deployment   {deployment}: v2 current (")
    assert "v1 draining (" in line
    [holding] = found
    assert holding.startswith(f"version v1 of deployment {deployment!r} is no longer current")
    assert await build_of(agent, parked) == "v1"

    # Each answers its next reply on v1 (its code: no mark), then hands over to v2.
    story = await streaming.wait_for(WAITING, TIMEOUT)
    assert story.last_assistant_text == STORY
    answered = await waiting.send("Hello from before the deploy")
    assert answered.last_assistant_text == "Hello!"
    assert await summary(agent, waiting) == "Hello from before the deploy"
    assert (await approval.decide("w1")).last_assistant_text == "Written."
    assert (await child.send("Monday")).phase is Phase.COMPLETED
    assert (await lead.wait_for(WAITING, TIMEOUT)).last_assistant_text == (
        "The plan: launch on Monday."
    )
    assert (await budget.raise_budget(max_total_tokens=1000)).last_assistant_text == (
        "Nothing here yet."
    )
    # The parked run no one replies to: woken by doctor's command, it hands over too.
    await temporal_cli(temporal, *shlex.split(holding.split("wake them all now with: ")[1])[1:])
    for run in [streaming, waiting, approval, lead, budget, parked]:
        await moved_to(agent, run, "v2")

    # v1 drains to zero open runs, and its worker stops.
    async def drained() -> bool:
        line, found = await deployment_report(agent, deployment)
        return "v1 draining (0 open runs)" in line and not found

    await wait_until(drained, what="v1 drained")
    # A closed run is queried on the build it ended on: read the sub-agent's while v1 is up.
    assert await user_texts(child) == ["Plan the launch.", "Monday"]
    await agent.stop_worker()

    # On v2 alone, every run goes on where it stood.
    replies = {
        waiting: ("And now?", "Still here."),
        approval: ("What does it say?", "It says: ship it."),
        lead: ("Good?", "Monday it is."),
        budget: ("And now?", "Still nothing."),
        streaming: ("And then?", "The end."),
        parked: ("Still there?", "Awake on v2."),
    }
    for run, (reply, answer) in replies.items():
        assert (await run.send(reply)).last_assistant_text == answer
        assert await build_of(agent, run) == "v2"

    # Every reply entered exactly once.
    assert await user_texts(waiting) == ["Hello from before the deploy", "And now?"]
    assert await user_texts(approval) == ["Write the plan", "What does it say?"]
    assert await user_texts(lead) == ["Plan our launch", "Good?"]
    assert await user_texts(budget) == ["Look around", "And now?"]
    assert await user_texts(streaming) == ["Tell me a long story", "And then?"]
    assert await user_texts(parked) == ["Park me", "Still there?"]

    # Every history replays on the build that recorded it: v1's, then v2's.
    replayers = {
        build: Replayer(workflows=[workflow], data_converter=agent.tarry.client.data_converter)
        for build, workflow in [("v1", AgentRunWorkflow), ("v2", AgentRunV2)]
    }
    chains: dict[str, list[str]] = {}
    for run in agent.runs:
        chain = await agent.histories(run)
        chains[run.id] = []
        for history in chain:
            [build] = builds_recording(history)
            await replay(replayers[build], history)
            chains[run.id].append(build)
    for run in [waiting, approval, lead, budget, parked, streaming]:
        assert (chains[run.id][0], chains[run.id][-1]) == ("v1", "v2"), chains
    assert set(chains[child.id]) == {"v1"}  # a sub-agent stays on its lead's build
    assert set(chains[fresh.id]) == {"v2"}


async def test_a_schedule_starts_its_runs_on_the_current_build(
    agent_factory: Any, temporal: Client
) -> None:
    agent, deployment = await versioned_agent(agent_factory, temporal)
    schedules = Schedules(agent)
    try:
        schedule = await schedules.create(task("Check the inbox"), cron="0 0 1 1 *")
        await schedule.trigger()
        [first] = (await schedules.until_started(schedule, 1)).recent_runs
        # A run is pinned when a worker completes its first workflow task, not when the
        # schedule starts it: one not yet taken when v2 is made current would go to v2.
        before = await build_of(agent, agent.tarry.get(first))
        await agent.add_worker(plugin=BuildV2, tarry_build_id="v2")
        await make_current(temporal, deployment, "v2")
        await schedule.trigger()
        view = await schedules.until_started(schedule, 2)

        builds = [await build_of(agent, agent.tarry.get(run)) for run in view.recent_runs]
    finally:
        await schedules.close()

    assert before == "v1"
    assert builds == ["v1", "v2"]
