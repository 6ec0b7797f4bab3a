"""The memory tools, `remember`, `recall` and `forget`: offered by a run's `memory_access`,
gated like any tool (a rule that asks the owner is "every memory is approved by its
owner"), run as activities over the worker's memory store, and each memory kept with
where it came from (issue 59, item 3 and acceptance 1)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import AgentSpec, ErrorCode, Phase, RunInput, WaitingFor
from tarry.contracts.memories import Memory, NewMemory, Provenance
from tarry.contracts.timeline import SpanKind, SpanStatus
from tarry.core.identities import Caller
from tarry.search import open_store
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT
from tests.test_sub_agents import child_of

WAITING = {Phase.WAITING_USER}
FACT = "Priya owns the blog"
OWNER_ASKED = {
    "approval_rules": [{"tool": "remember", "decision": "ask"}],
    "approvers": {"remember": ["alice"]},
}
"""Every memory is approved by its owner, alice: one rule, and who may decide it."""


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "search.db"


@pytest.fixture
async def agent(agent_factory: Callable[..., Awaitable[Agent]], index: Path) -> Agent:
    """An agent whose worker keeps memories (and the index) in `index`."""
    made: Agent = await agent_factory(worker_settings={"tarry_search_index": str(index)})
    return made


def person(agent: Agent, name: str) -> Tarry:
    return agent.tarry.acting_as(Caller(name))


async def start(tarry: Tarry, agent: Agent, prompt: str, **input: Any) -> RunHandle:
    return await tarry.start(RunInput(prompt=prompt, timeouts=agent.timeouts, **input))


async def memories(index: Path) -> list[Memory]:
    store = await open_store(str(index))
    try:
        return await store.list_memories(None, deleted=True)
    finally:
        await store.close()


async def remembered_by_alice(agent: Agent, text: str = FACT) -> RunHandle:
    """Alice's run that remembers `text`, which she approves."""
    agent.model.add(call("remember", {"text": text, "tags": ["people"]}, id="m1"), say("Noted."))
    run = await start(
        person(agent, "alice"), agent, "remember it", memory_access="read-write", **OWNER_ASKED
    )
    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    await run.approve("m1")
    await run.wait_for(WAITING, TIMEOUT)
    return run


async def recalled(agent: Agent, who: str, query: str = "who owns the blog?") -> Any:
    """What a `recall` in a new run of `who` answers."""
    agent.model.add(call("recall", {"query": query}, id="r1"), say("Done."))
    run = await start(person(agent, who), agent, "what do you know?", memory_access="read")
    await run.wait_for(WAITING, TIMEOUT)
    [message] = [m for m in await run.transcript() if m.tool_call_id == "r1"]
    return tool_result(message)["data"]


async def test_a_memory_its_owner_approved_is_kept_with_its_provenance(
    agent: Agent, index: Path
) -> None:
    run = await remembered_by_alice(agent)

    [kept] = await memories(index)

    assert (kept.text, kept.tags, kept.scope) == (FACT, ["people"], "alice")
    assert kept.provenance == Provenance(run_id=run.id, turn=1, approved_by="alice")


async def test_a_later_run_of_the_owner_recalls_it(agent: Agent, index: Path) -> None:
    await remembered_by_alice(agent)

    [memory] = await recalled(agent, "alice")

    assert memory["text"] == FACT
    assert memory["id"] == (await memories(index))[0].id


async def test_a_recall_is_a_tool_call_in_the_runs_timeline(agent: Agent) -> None:
    await remembered_by_alice(agent)
    agent.model.add(call("recall", {"query": "blog"}, id="r1"), say("Done."))
    run = await start(person(agent, "alice"), agent, "what do you know?", memory_access="read")
    await run.wait_for(WAITING, TIMEOUT)

    timeline = await run.timeline()

    [span] = [s for s in timeline.spans if s.name.startswith("recall")]
    assert (span.kind, span.name, span.status) == (SpanKind.TOOL, "recall blog", SpanStatus.OK)


async def test_a_run_of_another_user_never_recalls_it(agent: Agent) -> None:
    await remembered_by_alice(agent)

    assert await recalled(agent, "bob") == []
    assert await recalled(agent, "bob", query="") == []


async def test_only_the_owner_may_approve_a_memory(agent: Agent, index: Path) -> None:
    agent.model.add(call("remember", {"text": FACT}, id="m1"))
    run = await start(
        person(agent, "alice"), agent, "remember it", memory_access="read-write", **OWNER_ASKED
    )
    await run.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await person(agent, "bob").get(run.id).decide("m1")

    assert refused.value.code is ErrorCode.APPROVAL_NOT_ALLOWED
    assert await memories(index) == []


async def test_the_text_the_owner_approves_it_with_is_what_is_kept(
    agent: Agent, index: Path
) -> None:
    agent.model.add(call("remember", {"text": "Priya owns the blg"}, id="m1"), say("Noted."))
    run = await start(
        person(agent, "alice"), agent, "remember it", memory_access="read-write", **OWNER_ASKED
    )
    await run.wait_for(WAITING, TIMEOUT)

    await run.approve("m1", arguments={"text": FACT, "tags": ["people"]})
    await run.wait_for(WAITING, TIMEOUT)

    [kept] = await memories(index)
    assert (kept.text, kept.tags) == (FACT, ["people"])
    [message] = [m for m in await run.transcript() if m.tool_call_id == "m1"]
    assert message.decision is not None
    assert message.decision.arguments == {"text": FACT, "tags": ["people"]}


async def test_a_forgotten_memory_is_not_recalled_again(agent: Agent, index: Path) -> None:
    await remembered_by_alice(agent)
    [kept] = await memories(index)
    agent.model.add(call("forget", {"id": kept.id}, id="f1"), say("Forgotten."))
    run = await start(person(agent, "alice"), agent, "forget it", memory_access="read-write")
    await run.wait_for(WAITING, TIMEOUT)

    assert await recalled(agent, "alice") == []
    [gone] = await memories(index)
    assert gone.deleted_by == run.id


async def test_a_run_cannot_forget_another_scopes_memory(agent: Agent, index: Path) -> None:
    await remembered_by_alice(agent)
    [kept] = await memories(index)
    agent.model.add(call("forget", {"id": kept.id}, id="f1"), say("Could not."))
    run = await start(person(agent, "bob"), agent, "forget it", memory_access="read-write")
    await run.wait_for(WAITING, TIMEOUT)

    [message] = [m for m in await run.transcript() if m.tool_call_id == "f1"]
    assert tool_result(message)["error"]["code"] == ErrorCode.TOOL_FAILED
    assert [m.deleted for m in await memories(index)] == [None]


async def test_a_group_scope_is_shared_by_its_runs(agent: Agent) -> None:
    agent.model.add(call("remember", {"text": FACT}, id="m1"), say("Noted."))
    run = await start(
        person(agent, "alice"),
        agent,
        "remember it",
        memory_access="read-write",
        memory_scope="group:ops",
    )
    await run.wait_for(WAITING, TIMEOUT)
    agent.model.add(call("recall", {"query": "blog"}, id="r1"), say("Done."))
    later = await start(
        person(agent, "bob"), agent, "recall", memory_access="read", memory_scope="group:ops"
    )
    await later.wait_for(WAITING, TIMEOUT)

    [message] = [m for m in await later.transcript() if m.tool_call_id == "r1"]
    assert [m["text"] for m in tool_result(message)["data"]] == [FACT]


@pytest.mark.parametrize(
    ("access", "offered"),
    [("off", []), ("read", ["recall"]), ("read-write", ["remember", "recall", "forget"])],
)
async def test_the_memory_setting_decides_the_tools_offered(
    agent: Agent, access: str, offered: list[str]
) -> None:
    agent.model.add(say("Hello."))
    run = await agent.start("hi", memory_access=access)
    await run.wait_for(WAITING, TIMEOUT)

    tools = [t["function"]["name"] for t in agent.model.requests[-1].body.get("tools", [])]
    assert [t for t in tools if t in ("remember", "recall", "forget")] == offered


async def test_a_run_naming_its_tools_still_offers_its_memory_tools(agent: Agent) -> None:
    agent.model.add(say("Hello."))
    run = await agent.start("hi", tools=["read_file"], memory_access="read")
    await run.wait_for(WAITING, TIMEOUT)

    tools = [t["function"]["name"] for t in agent.model.requests[-1].body["tools"]]
    assert tools == ["read_file", "recall", "finish"]


async def test_a_sub_agent_recalls_the_memories_of_the_scope_its_definition_names(
    agent_factory: Callable[..., Awaitable[Agent]], index: Path
) -> None:
    researcher = AgentSpec(
        description="Knows the team.", memory_access="read", memory_scope="agent:researcher"
    )
    team: Agent = await agent_factory(
        agents={"researcher": researcher}, worker_settings={"tarry_search_index": str(index)}
    )
    store = await open_store(str(index))
    await store.remember(NewMemory(id="m1", text=FACT, scope="agent:researcher"))
    await store.close()
    team.model.add_conversation(
        "Who owns the blog?",
        call("agent__researcher", {"task": "Look up the blog's owner."}, id="a1"),
        say("Priya."),
    )
    team.model.add_conversation(
        "Look up the blog's owner.", call("recall", {"query": "blog"}, id="r1"), say("Priya.")
    )

    lead = await team.start("Who owns the blog?", agents=["researcher"])
    await lead.wait_for(WAITING, TIMEOUT)

    child = await child_of(team, lead)
    [message] = [m for m in await child.transcript() if m.tool_call_id == "r1"]
    assert [m["text"] for m in tool_result(message)["data"]] == [FACT]


async def test_a_worker_without_a_memory_store_refuses_a_run_with_memory(
    agent_factory: Callable[..., Awaitable[Agent]],
) -> None:
    plain: Agent = await agent_factory()

    with pytest.raises(TarryError) as refused:
        await plain.start("hi", memory_access="read")

    assert refused.value.code is ErrorCode.SEARCH_UNAVAILABLE
    assert "TARRY_SEARCH_INDEX" in refused.value.message
