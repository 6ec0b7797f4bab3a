"""Concurrent-run caps (issue 58, item 1): past a person's `max_concurrent_runs`, a
start waits for a slot (`at_max_concurrent_runs = "queue"`: the run exists, shows
`waiting_for: slot`, and makes its first call once one of their runs ends) or is refused
(`refuse`: 429 `TOO_MANY_RUNS`, exit 2, nothing starts). The count is one `RunSlots`
workflow per owner: many starts at once lose and double nothing, and another owner's
runs are untouched."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tarry.api import ApiServer, create_app
from tarry.client import RunHandle
from tarry.config.settings import load_settings
from tarry.contracts import ErrorCode, Mode, Phase, RunInput, WaitingFor
from tarry.contracts.slots import SlotsState, slots_id
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.limits import ConcurrencyPolicy, Limits
from tarry.testing.scripted_model import say
from tests.cli import Cli, until_listed
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Api, api_client
from tests.test_http_api import error_of
from tests.test_mcp_server import error_code, mcp_client
from tests.waiting import until_waiting_for
from workers.plugin import workflows_passed_through
from workflows.agent_run import AgentRunWorkflow
from workflows.run_slots import RunSlots

WAITING = {Phase.WAITING_USER}
QUEUE, REFUSE = ConcurrencyPolicy.QUEUE, ConcurrencyPolicy.REFUSE


def person(name: str) -> str:
    """A name of its own per test: the tests of a process share a Temporal server, and a
    person's slots are one workflow there."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


def capped(owner: str, runs: int, policy: ConcurrencyPolicy = QUEUE) -> Caller:
    return Caller(owner, limits=Limits(max_concurrent_runs=runs, at_max_concurrent_runs=policy))


async def start_as(agent: Agent, caller: Caller, prompt: str, **input: Any) -> RunHandle:
    run_input = RunInput(prompt=prompt, timeouts=agent.timeouts, **input)
    return await agent.tarry.acting_as(caller).start(run_input)


async def slots_of(client: Client, owner: str) -> SlotsState:
    state: SlotsState = await client.get_workflow_handle(slots_id(owner)).query(
        "state", result_type=SlotsState
    )
    return state


# --- Queue ---------------------------------------------------------------------------


async def test_a_start_past_the_cap_waits_for_a_slot_without_calling_the_model(
    agent: Agent,
) -> None:
    agent.model.add(say("first"))
    alice = capped(person("alice"), 1)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)

    second = await start_as(agent, alice, "two")
    state = await until_waiting_for(second, WaitingFor.SLOT)

    assert state.phase is Phase.WAITING_USER
    assert state.warning is ErrorCode.TOO_MANY_RUNS
    assert state.error is not None
    assert f"{alice.user} has 1 runs open, at their max_concurrent_runs of 1" in state.error.message
    assert len(agent.model.requests) == 1


async def test_the_command_line_shows_a_queued_run_waiting_for_a_slot_and_lists_it(
    agent: Agent,
) -> None:
    agent.model.add(say("first"))
    alice = capped(person("alice"), 1)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)
    queued = await start_as(agent, alice, "two")
    await until_waiting_for(queued, WaitingFor.SLOT)
    await until_listed(agent.tarry.client, "TarryWaitingFor = 'slot'", queued.id)
    cli = Cli.of(agent)

    status = await cli.ok("status", queued.id)
    listed = await cli.ok("list", "--waiting-for", "slot")

    assert "slot" in status
    assert "TOO_MANY_RUNS" in status
    assert queued.id in listed
    assert first.id not in listed


async def test_a_queued_run_makes_its_first_call_when_one_of_the_owner_s_runs_is_stopped(
    agent: Agent,
) -> None:
    agent.model.add(say("first"), say("second"))
    alice = capped(person("alice"), 1)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)
    second = await start_as(agent, alice, "two")
    await until_waiting_for(second, WaitingFor.SLOT)

    await first.stop()

    state = await until_waiting_for(second, WaitingFor.INPUT)
    assert state.last_assistant_text == "second"
    assert state.error is None
    assert state.warning is None


async def test_a_completed_run_frees_its_slot_for_the_next(agent: Agent) -> None:
    # The task's answer comes a second late: once its call has reached the model the
    # task holds the slot (a run calls only from a slot), and the next start queues
    # behind it. Polling the slots instead missed a task that ended between two polls.
    agent.model.add(say("done", delay=1.0), say("next"))
    alice = capped(person("alice"), 1)
    task = await start_as(agent, alice, "one", mode=Mode.TASK)
    await agent.model.wait_for_requests(1, TIMEOUT)
    queued = await start_as(agent, alice, "two")

    assert (await task.result()).phase is Phase.COMPLETED
    assert (await until_waiting_for(queued, WaitingFor.INPUT)).last_assistant_text == "next"


async def test_a_cap_raised_in_the_config_lets_the_first_in_line_go_before_a_newcomer(
    agent: Agent,
) -> None:
    agent.model.add(say("first"), say("second"))
    owner = person("alice")
    first = await start_as(agent, capped(owner, 1), "one")
    await first.wait_for(WAITING, TIMEOUT)
    queued = await start_as(agent, capped(owner, 1), "two")
    await until_waiting_for(queued, WaitingFor.SLOT)

    newcomer = await start_as(agent, capped(owner, 2), "three")

    assert (await until_waiting_for(queued, WaitingFor.INPUT)).last_assistant_text == "second"
    assert (await until_waiting_for(newcomer, WaitingFor.SLOT)).warning is ErrorCode.TOO_MANY_RUNS


async def test_a_run_stopped_while_queued_leaves_the_line(agent: Agent) -> None:
    agent.model.add(say("first"))
    owner = person("alice")
    alice = capped(owner, 1)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)
    queued = await start_as(agent, alice, "two")
    await until_waiting_for(queued, WaitingFor.SLOT)

    await queued.stop()

    assert (await queued.result()).phase is Phase.FAILED
    state = await slots_of(agent.tarry.client, owner)
    assert list(state.holders) == [first.id]
    assert state.queue == []


# --- Refuse ------------------------------------------------------------------------


async def test_a_start_past_the_cap_under_refuse_is_too_many_runs_and_starts_nothing(
    agent: Agent,
) -> None:
    agent.model.add(say("first"))
    owner = person("alice")
    alice = capped(owner, 1, REFUSE)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await agent.tarry.acting_as(alice).start(RunInput(prompt="two"), run_id="run-refused")

    assert refused.value.code is ErrorCode.TOO_MANY_RUNS
    assert "has 1 runs open, at their max_concurrent_runs of 1" in refused.value.message
    with pytest.raises(TarryError):
        await agent.tarry.get("run-refused").state()
    assert list((await slots_of(agent.tarry.client, owner)).holders) == [first.id]


async def test_a_terminated_run_s_slot_is_freed_by_the_next_start_that_meets_the_cap(
    agent: Agent,
) -> None:
    agent.model.add(say("first"), say("second"))
    alice = capped(person("alice"), 1, REFUSE)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)
    await agent.tarry.client.get_workflow_handle(first.id).terminate("gone")

    second = await start_as(agent, alice, "two")

    assert (await second.wait_for(WAITING, TIMEOUT)).last_assistant_text == "second"


async def test_a_resumption_past_the_cap_under_refuse_is_too_many_runs_and_the_run_stays_ended(
    agent: Agent,
) -> None:
    agent.model.add(say("done"), say("second"))
    alice = capped(person("alice"), 1, REFUSE)
    ended = await start_as(agent, alice, "one", mode=Mode.TASK)
    await ended.result()
    other = await start_as(agent, alice, "two")
    await other.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await ended.resume()

    assert refused.value.code is ErrorCode.TOO_MANY_RUNS
    assert (await ended.state()).phase is Phase.COMPLETED


# --- Many at once ----------------------------------------------------------------------


@pytest.mark.parametrize("policy", [QUEUE, REFUSE])
async def test_many_starts_at_once_run_exactly_the_cap_and_lose_none(
    agent: Agent, policy: ConcurrencyPolicy
) -> None:
    starts, cap = 8, 3
    agent.model.add(*(say(f"answer {n}") for n in range(starts + 1)))
    owner = person("alice")
    alice = capped(owner, cap, policy)
    bob = await start_as(agent, capped(person("bob"), cap, policy), "bob's")

    tried = await asyncio.gather(
        *(start_as(agent, alice, f"run {n}") for n in range(starts)), return_exceptions=True
    )

    runs = [r for r in tried if isinstance(r, RunHandle)]
    refused = [r for r in tried if isinstance(r, TarryError)]
    assert (await bob.wait_for(WAITING, TIMEOUT)).waiting_for is WaitingFor.INPUT
    if policy is REFUSE:
        assert (len(runs), len(refused)) == (cap, starts - cap)
        assert all(e.code is ErrorCode.TOO_MANY_RUNS for e in refused)
    else:
        assert (len(runs), len(refused)) == (starts, 0)
    states = [await run.wait_for(WAITING, TIMEOUT) for run in runs]
    async with asyncio.timeout(TIMEOUT):
        while (waits := [(await r.state()).waiting_for for r in runs]).count(None):
            await asyncio.sleep(0.1)
    assert waits.count(WaitingFor.INPUT) == cap
    assert waits.count(WaitingFor.SLOT) == len(runs) - cap
    slots = await slots_of(agent.tarry.client, owner)
    answered = {run.id for run, w in zip(runs, waits, strict=True) if w is WaitingFor.INPUT}
    assert set(slots.holders) == answered
    assert sorted(slots.queue) == sorted({run.id for run in runs} - answered)
    assert len(agent.model.requests) == cap + 1  # alice's that hold a slot, and bob's
    assert states  # every run reached a stop point


# --- Schedules ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def triggered(agent: Agent, caller: Caller) -> AsyncIterator[RunHandle]:
    """The run a schedule created by `caller` starts when triggered (the schedule and
    the run go again after)."""
    tarry = agent.tarry.acting_as(caller)
    run_input = RunInput(prompt="nightly", timeouts=agent.timeouts)
    schedule = await tarry.create_schedule(f"capped-{uuid.uuid4().hex[:6]}", run_input, every="9h")
    try:
        await schedule.trigger()
        async with asyncio.timeout(TIMEOUT):
            while not (started := (await schedule.describe()).recent_runs):
                await asyncio.sleep(0.2)
        run = tarry.get(started[0])
        agent.runs.append(run)
        yield run
    finally:
        await schedule.delete()


async def test_a_schedule_s_run_waits_for_a_slot_as_its_creator_s_start_would(
    agent: Agent,
) -> None:
    agent.model.add(say("first"))
    alice = capped(person("alice"), 1)
    first = await start_as(agent, alice, "one")
    await first.wait_for(WAITING, TIMEOUT)

    async with triggered(agent, alice) as run:
        state = await until_waiting_for(run, WaitingFor.SLOT)

    assert state.warning is ErrorCode.TOO_MANY_RUNS


async def test_a_schedule_s_run_reserves_its_calls_on_its_creator_s_daily_cap(
    agent: Agent,
) -> None:
    agent.model.add(say("nightly answer"))
    alice = Caller(person("alice"), limits=Limits(max_tokens_per_day=100_000))

    async with triggered(agent, alice) as run:
        await run.wait_for(WAITING, TIMEOUT)
        history = await agent.history_json(run)

    assert "reserve_spend" in history


# --- Doors ---------------------------------------------------------------------------

TOKEN = "dora-token-0123456789ab"
REFUSING = """
[api.users]
{user} = "{token}"

[limits]
at_max_concurrent_runs = "refuse"

[limits.user.{user}]
max_concurrent_runs = 1
"""


@pytest.fixture
def dora() -> str:
    """The person of the config file, whose one slot a run holds."""
    return person("dora")


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dora: str) -> Path:
    path = tmp_path / "tarry.toml"
    path.write_text(REFUSING.format(user=dora, token=TOKEN))
    monkeypatch.setenv("TARRY_CONFIG", str(path))
    return path


@pytest.fixture
async def api(agent: Agent, config: Path) -> AsyncIterator[Api]:
    """The API under `REFUSING`; its requests are dora's."""
    async with (
        ApiServer(create_app(agent.tarry, load_settings()), "127.0.0.1", 0) as server,
        api_client(server.url, TOKEN, timeout=deadline(60)) as http,
    ):
        yield Api(http, agent, server.url)


@pytest.fixture
async def open_run(agent: Agent, dora: str) -> RunHandle:
    """A run of dora's that holds her one slot."""
    agent.model.add(say("first"))
    run = await start_as(agent, capped(dora, 1, REFUSE), "one")
    await run.wait_for(WAITING, TIMEOUT)
    return run


async def test_the_api_answers_a_start_past_the_cap_429_too_many_runs(
    api: Api, open_run: RunHandle
) -> None:
    response = await api.http.post("/v1/runs", json={"prompt": "two", "id": "run-429"})

    assert error_of(response) == (429, ErrorCode.TOO_MANY_RUNS)
    assert (await api.http.get("/v1/runs/run-429")).status_code == 404


async def test_the_command_line_exits_2_for_a_start_past_the_cap(
    agent: Agent, config: Path, dora: str, open_run: RunHandle
) -> None:
    result = await Cli.of(agent, TARRY_USER=dora, TARRY_CONFIG=str(config))("start", "hi")

    assert result.code == 2
    result.assert_one_error_line(f"error: TOO_MANY_RUNS: {dora} has 1 runs open")


async def test_an_mcp_start_past_the_cap_is_a_too_many_runs_tool_error(
    agent: Agent, config: Path, dora: str, payload_store: Path, open_run: RunHandle
) -> None:
    env = {"TARRY_USER": dora, "TARRY_CONFIG": str(config)}
    async with mcp_client(agent, payload_store, env=env) as client:
        refused = await client.call_tool("start_run", {"prompt": "hi"})

    assert error_code(refused) == ErrorCode.TOO_MANY_RUNS


# --- Without the cap -----------------------------------------------------------------


async def test_a_run_without_the_cap_asks_for_no_slot(agent: Agent) -> None:
    agent.model.add(say("hello"))

    run = await start_as(agent, Caller(person("carol"), limits=Limits(models=("*",))), "hi")

    await run.wait_for(WAITING, TIMEOUT)
    history = await agent.history_json(run)
    assert "call_llm" in history
    assert "acquire_slot" not in history
    assert "release_slot" not in history


async def test_a_capped_run_and_its_slots_replay(agent: Agent) -> None:
    agent.model.add(say("done"))
    owner = person("alice")
    run = await start_as(agent, capped(owner, 2), "one", mode=Mode.TASK)
    await run.result()
    client = agent.tarry.client
    replayer = Replayer(
        workflows=[AgentRunWorkflow, RunSlots],
        data_converter=client.data_converter,
        workflow_runner=workflows_passed_through(None),
    )

    for workflow_id in (run.id, slots_id(owner)):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        await replayer.replay_workflow(history)
