"""Semantic search of runs' messages: a worker with an embedding profile embeds every
message as it indexes it (the `embed` model task, inside the index activity), what that
costs counts against the run's budget, and a search embeds its query with the same
profile, as does a recall of memories. Here the scripted model's deterministic embeddings
(texts that share words are near); `tests/test_search_llama.py` does it with llama.cpp's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tarry.cli.processes import free_port
from tarry.config.settings import TarrySettings
from tarry.config.tables import EmbeddingProfile
from tarry.contracts import ErrorCode, Phase
from tarry.contracts.search import IndexAnswer
from tarry.core.errors import TarryError
from tarry.search import SearchQuery, StoreOpener
from tarry.temporal.codec import data_converter
from tarry.testing.scripted_model import ScriptedModel, say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.faults import wait_until
from tests.search_stores import until_found
from tests.test_bounded_memory import SMALL_BUDGET, answer
from tests.test_ledger import ledger_of, person, start_as, used, with_cap
from tests.test_memory_store import MEANING, MEANT
from tests.test_memory_tools import recalled, remembered_by_alice
from tests.test_owners import ALICE, BOB, people_api, with_people
from tests.test_search_doors import found_by

WAITING = {Phase.WAITING_USER}
PRICE = 1_000.0
"""Dollars per million embedded tokens: the chat profile has no prices, so every cent a
run spends here is its embeddings'."""

AgentFactory = Callable[..., Awaitable[Agent]]


@pytest.fixture
async def embeddings() -> AsyncIterator[EmbeddingProfile]:
    """An embedding profile at a scripted model of its own."""
    model = ScriptedModel()
    await model.start()
    try:
        yield EmbeddingProfile(base_url=model.base_url, model="scripted", price=PRICE)
    finally:
        await model.close()


async def embedding_agent(
    agent_factory: AgentFactory, index: Path, embeddings: EmbeddingProfile, **profile: object
) -> Agent:
    settings = {"tarry_search_index": str(index), "tarry_embedding": embeddings.model_dump()}
    made: Agent = await agent_factory(worker_settings=settings, **profile)
    return made


async def searched(index: Path, embeddings: EmbeddingProfile | None, text: str) -> list[str]:
    """The run ids and transcript indexes `text` finds, best first, as `tarry search`
    with the same embedding profile would."""
    opener = StoreOpener(str(index), embeddings)
    try:
        return [f"{h.run_id}#{h.index}" for h in await opener.search(SearchQuery(text))]
    finally:
        await opener.aclose()


async def test_messages_are_found_by_meaning_across_hand_overs_and_pages(
    agent_factory: AgentFactory, tmp_path: Path, embeddings: EmbeddingProfile
) -> None:
    index = tmp_path / "search.db"
    agent = await embedding_agent(agent_factory, index, embeddings, context_budget=SMALL_BUDGET)
    answers = [*(f"noted item {n}" for n in range(5)), "Rahul sends the invoices."]
    agent.model.add(say("Priya owns the company blog."), *(say(text) for text in answers))
    run = await agent.start("tell me about the team", continue_as_new_after_turns=2)
    await run.wait_for(WAITING, TIMEOUT)
    for n, answered in enumerate(answers):
        await run.reply(f"another item {n}")
        await until_found(index, answered)  # the turn's answer: the run waits again
    state = await run.wait_for(WAITING, TIMEOUT)
    assert len(await agent.histories(run)) > 2  # it handed over
    assert (await answer(agent, run.id)).stored  # and paged its first messages out

    assert await searched(index, None, "blog ownership") == []
    assert (await searched(index, embeddings, "blog ownership"))[0] == f"{run.id}#1"
    last = state.message_count - 1
    assert (await searched(index, embeddings, "invoices billing"))[0] == f"{run.id}#{last}"


async def test_through_the_api_another_user_finds_nothing_by_meaning_either(
    agent_factory: AgentFactory,
    tmp_path: Path,
    embeddings: EmbeddingProfile,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = tmp_path / "search.db"
    agent = await embedding_agent(agent_factory, index, embeddings)
    with_people(tmp_path, monkeypatch)
    monkeypatch.setenv("TARRY_SEARCH_INDEX", str(index))
    monkeypatch.setenv("TARRY_EMBEDDING", embeddings.model_dump_json())
    agent.model.add(say("Priya owns the company blog."))
    async with people_api(agent) as api:
        run_id = await api.start("tell me about the team")  # alice's
        await until_found(index, "Priya")

        alices = await found_by(api, ALICE, "blog ownership")
        bobs = await found_by(api, BOB, "blog ownership")

    assert alices[0]["run_id"] == run_id
    assert bobs == []


async def test_embedding_a_runs_messages_counts_against_its_usage(
    agent_factory: AgentFactory, tmp_path: Path, embeddings: EmbeddingProfile
) -> None:
    agent = await embedding_agent(agent_factory, tmp_path / "search.db", embeddings)
    agent.model.add(say("The pricing page is ready."))
    run = await agent.start("make the pricing page")
    await run.wait_for(WAITING, TIMEOUT)

    async def charged() -> bool:
        return (await run.state()).usage.cost_usd > 0

    await wait_until(charged, what="the embeddings' cost in the run's usage")
    # "make the pricing page", "The pricing page is ready.": 9 words, a token each.
    assert (await run.state()).usage.cost_usd == pytest.approx(9 * PRICE / 1_000_000)


async def test_a_capped_runs_embeddings_reach_its_owners_ledger_with_its_next_call(
    agent_factory: AgentFactory, tmp_path: Path, embeddings: EmbeddingProfile
) -> None:
    agent = await embedding_agent(agent_factory, tmp_path / "search.db", embeddings)
    agent.model.add(
        say("The pricing page is ready.", usage=used(10, 5)), say("Done.", usage=used(20, 5))
    )
    alice = person("alice")
    run = await start_as(agent, with_cap(alice, cap=100_000), "make the pricing page")
    await run.wait_for(WAITING, TIMEOUT)

    async def embedded() -> bool:  # the prompt and the answer: 9 words, a token each
        return (await run.state()).usage.total_tokens == 15 + 9

    await wait_until(embedded, what="the first turn's embeddings in the run's usage")
    await run.reply("thanks")
    await until_found(tmp_path / "search.db", "Done")

    assert (await ledger_of(agent.tarry.client, alice)).spent.tokens == 15 + 9 + 25


async def test_a_rebuilt_index_finds_by_meaning_what_live_indexing_found(
    agent_factory: AgentFactory, tmp_path: Path, embeddings: EmbeddingProfile
) -> None:
    index = tmp_path / "search.db"
    agent = await embedding_agent(agent_factory, index, embeddings)
    agent.model.add(say("Priya owns the company blog."))
    await agent.start("tell me about the team")
    await until_found(index, "Priya")
    live = await searched(index, embeddings, "blog ownership")
    cli = Cli.of(agent, TARRY_SEARCH_INDEX=str(index), TARRY_EMBEDDING=embeddings.model_dump_json())

    await cli.ok("index", "rebuild")

    assert await searched(index, embeddings, "blog ownership") == live


async def test_a_later_run_recalls_by_meaning_a_memory_of_none_of_its_querys_words(
    agent_factory: AgentFactory, tmp_path: Path, embeddings: EmbeddingProfile
) -> None:
    """The worker embeds a memory as it keeps it, and a recall's query as it recalls."""
    agent = await embedding_agent(agent_factory, tmp_path / "search.db", embeddings)
    await remembered_by_alice(agent, MEANT)

    [memory] = await recalled(agent, "alice", MEANING)

    assert memory["text"] == MEANT


async def test_a_query_the_embedding_model_cannot_embed_is_search_unavailable(
    tmp_path: Path,
) -> None:
    nobody = EmbeddingProfile(base_url=f"http://127.0.0.1:{free_port()}/v1")
    opener = StoreOpener(str(tmp_path / "search.db"), nobody)

    with pytest.raises(TarryError) as refused:
        await opener.search(SearchQuery("launch plans"))
    await opener.aclose()

    assert refused.value.code is ErrorCode.SEARCH_UNAVAILABLE
    assert "cannot be embedded" in refused.value.message


async def test_an_index_answer_recorded_before_embeddings_still_reads() -> None:
    """The activity answered a count alone before: a recorded history's result decodes
    as the workflow now asks for it."""
    converter = data_converter(TarrySettings.model_construct())

    [answered] = await converter.decode(await converter.encode([3]), [IndexAnswer])

    assert answered == IndexAnswer(new=3)
