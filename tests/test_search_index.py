"""Every message a run writes is indexed as it is written, once, on a worker with a
search index (`workflows.search_index`); a worker without one indexes nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from tarry.contracts import Phase
from tarry.contracts.search import INDEX_ACTIVITY
from tarry.search import SearchQuery, open_store
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.faults import CrashRig, wait_until
from tests.search_stores import empty, until_found

WAITING = {Phase.WAITING_USER}
PENDING_ACTIVITY_STATE_STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED

AgentFactory = Callable[..., Awaitable[Agent]]


async def indexed_agent(agent_factory: AgentFactory, path: Path) -> Agent:
    return await agent_factory(worker_settings={"tarry_search_index": str(path)})


async def indexed(path: Path, run_id: str) -> list[int]:
    """The transcript indexes of `run_id`'s messages in the index at `path`, each as
    often as it is there."""
    store = await open_store(str(path))
    try:
        hits = await store.search(SearchQuery("the", limit=10_000))
        return sorted(h.index for h in hits if h.run_id == run_id)
    finally:
        await store.close()


async def activities_of(agent: Agent, run_id: str) -> list[str]:
    history = await agent.tarry.client.get_workflow_handle(run_id).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


@pytest.fixture
async def empty_index(index_location: str) -> str:
    """An empty store's location, of each kind (`tests/search_stores.STORES`)."""
    await empty(index_location)
    return index_location


async def test_a_runs_answer_is_found_once_the_run_waits_on_it(
    agent_factory: AgentFactory, empty_index: str
) -> None:
    agent = await agent_factory(worker_settings={"tarry_search_index": empty_index})
    agent.model.add(say("The pricing page is ready."))
    run = await agent.start("make the pricing page")
    await run.wait_for(WAITING, TIMEOUT)

    hits = await until_found(empty_index, "pricing", 2)

    assert {(h.run_id, h.index, h.role) for h in hits} == {
        (run.id, 0, "user"),
        (run.id, 1, "assistant"),
    }


async def test_tool_calls_and_results_are_indexed(
    agent_factory: AgentFactory, tmp_path: Path
) -> None:
    agent = await indexed_agent(agent_factory, tmp_path / "search.db")
    agent.model.add(call("write_file", {"path": "zebra.txt", "content": "hi"}), say("Done."))
    run = await agent.start("write the file")
    await run.wait_for(WAITING, TIMEOUT)

    hits = await until_found(tmp_path / "search.db", "zebra", 2)

    assert sorted(h.role for h in hits) == ["assistant", "tool"]


async def test_every_message_of_a_long_run_is_indexed_once_across_hand_overs(
    agent_factory: AgentFactory, tmp_path: Path
) -> None:
    agent = await indexed_agent(agent_factory, tmp_path / "search.db")
    turns = 7
    agent.model.add(*(say(f"the answer {n}") for n in range(turns)))
    run = await agent.start("the question 0", continue_as_new_after_turns=2)
    for n in range(1, turns):
        await run.wait_for(WAITING, TIMEOUT)
        await run.reply(f"the question {n}")
    state = await run.wait_for(WAITING, TIMEOUT)

    assert len(await agent.histories(run)) > 2  # it handed over
    assert await indexed(tmp_path / "search.db", run.id) == list(range(state.message_count))


async def test_a_run_on_a_worker_without_an_index_indexes_nothing(agent: Agent) -> None:
    agent.model.add(say("The pricing page is ready."))
    run = await agent.start("make the pricing page")
    await run.wait_for(WAITING, TIMEOUT)

    assert INDEX_ACTIVITY not in await activities_of(agent, run.id)


async def test_a_run_hands_the_index_its_messages_once_a_turn_at_most(
    agent_factory: AgentFactory, tmp_path: Path
) -> None:
    agent = await indexed_agent(agent_factory, tmp_path / "search.db")
    agent.model.add(call("write_file", {"path": "a.txt", "content": "hi"}), say("Done."))
    run = await agent.start("write it")
    await run.wait_for(WAITING, TIMEOUT)

    activities: Any = Counter(await activities_of(agent, run.id))

    # The prompt, the call and its result beside the second call; the answer as the run
    # waits.
    assert activities[INDEX_ACTIVITY] == 2


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as scripted:
        yield scripted


@pytest.fixture
async def rig(temporal: Client, model: ScriptedModel, tmp_path: Path) -> AsyncIterator[CrashRig]:
    """Worker processes that index into `tmp_path/search.db`."""
    crash_rig = CrashRig(
        temporal,
        model.base_url,
        tmp_path / "workspaces",
        tmp_path / "logs",
        env={"TARRY_SEARCH_INDEX": str(tmp_path / "search.db")},
    )
    yield crash_rig
    await crash_rig.close()


async def indexing(client: Client, run_id: str) -> bool:
    """Whether a worker has started the run's index activity and not finished it."""
    pending = (await client.get_workflow_handle(run_id).describe()).raw_description
    return any(
        a.activity_type.name == INDEX_ACTIVITY and a.state == PENDING_ACTIVITY_STATE_STARTED
        for a in pending.pending_activities
    )


async def test_a_worker_killed_while_indexing_loses_no_message_and_doubles_none(
    rig: CrashRig, model: ScriptedModel, tmp_path: Path
) -> None:
    model.add(say("the answer"))
    first = await rig.worker()
    # A writer holding the index: the worker's index activity waits on it, mid-request.
    holder = sqlite3.connect(tmp_path / "search.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("BEGIN IMMEDIATE")
    run = await rig.start("the question")
    await wait_until(lambda: indexing(rig.client, run.id), what="the run indexing")

    await first.kill()
    holder.execute("ROLLBACK")
    holder.close()
    await rig.worker()
    async with asyncio.timeout(TIMEOUT):
        await run.wait_for(WAITING, TIMEOUT)
        while await indexed(tmp_path / "search.db", run.id) != [0, 1]:
            await asyncio.sleep(0.1)

    assert await indexed(tmp_path / "search.db", run.id) == [0, 1]
