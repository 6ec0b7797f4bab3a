"""Every message a run writes is indexed as it is written, once, on a worker with a
search index (`workflows.search_index`); a worker without one indexes nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tarry.contracts import Phase
from tarry.contracts.search import INDEX_ACTIVITY
from tarry.search import SearchQuery, open_store
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}

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


async def test_a_runs_answer_is_found_once_the_run_waits_on_it(
    agent_factory: AgentFactory, tmp_path: Path
) -> None:
    agent = await indexed_agent(agent_factory, tmp_path / "search.db")
    agent.model.add(say("The pricing page is ready."))
    run = await agent.start("make the pricing page")
    await run.wait_for(WAITING, TIMEOUT)

    store = await open_store(str(tmp_path / "search.db"))
    hits = await store.search(SearchQuery("pricing"))
    await store.close()

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

    store = await open_store(str(tmp_path / "search.db"))
    hits = await store.search(SearchQuery("zebra"))
    await store.close()

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


async def test_a_run_hands_the_index_its_messages_once_per_turn_and_wait(
    agent_factory: AgentFactory, tmp_path: Path
) -> None:
    agent = await indexed_agent(agent_factory, tmp_path / "search.db")
    agent.model.add(call("write_file", {"path": "a.txt", "content": "hi"}), say("Done."))
    run = await agent.start("write it")
    await run.wait_for(WAITING, TIMEOUT)

    activities: Any = Counter(await activities_of(agent, run.id))

    # The prompt beside the first call, the call and its result beside the second, the
    # answer before the wait.
    assert activities[INDEX_ACTIVITY] == 3
