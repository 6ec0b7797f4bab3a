"""The conversation a model call sees (stored once, cut to the profile's budget) and the
transcript pages callers read."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.context import ContextStore, fit_to_budget
from tarry.client import Tarry
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.contracts import (
    TRANSCRIPT_PAGE_BYTES,
    ChatMessage,
    ErrorCode,
    FunctionCall,
    Mode,
    Phase,
    RunInput,
    ToolCall,
    ToolDefinition,
    TranscriptPage,
    estimate_tokens,
)
from tarry.testing.scripted_model import ScriptedModel, ScriptedToolCall, calls, say
from tests.conftest import CANARY_KEY, FAST_TIMEOUTS, Agent
from tests.deadline import TIMEOUT
from workers.plugin import TarryPlugin


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def calling(*ids: str) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        tool_calls=[ToolCall(id=i, function=FunctionCall(name="t", arguments="{}")) for i in ids],
    )


def result(id: str, text: str = "ok") -> ChatMessage:
    return ChatMessage(role="tool", tool_call_id=id, content=text)


async def test_a_stored_conversation_reads_back_on_another_worker(tmp_path: Path) -> None:
    writer = ContextStore.on_disk(tmp_path, pydantic_data_converter)
    first, _ = await writer.extend(None, [user("a"), user("b")])
    second, whole = await writer.extend(first, [user("c")])

    reader = ContextStore.on_disk(tmp_path, pydantic_data_converter)

    assert await reader.load(second) == whole
    assert whole.messages == [user("a"), user("b"), user("c")]


async def test_a_stored_conversation_keeps_the_tools_it_was_offered(tmp_path: Path) -> None:
    tools = [ToolDefinition(name="lookup", parameters={"type": "object"})]
    writer = ContextStore.on_disk(tmp_path, pydantic_data_converter)
    first, _ = await writer.extend(None, [user("a")], tools)
    second, _ = await writer.extend(first, [user("b")])

    reader = ContextStore.on_disk(tmp_path, pydantic_data_converter)

    assert (await reader.load(second)).tools == tools


async def test_a_conversation_the_store_lacks_is_llm_context_missing(tmp_path: Path) -> None:
    ref, _ = await ContextStore.on_disk(tmp_path / "a", pydantic_data_converter).extend(
        None, [user("a")]
    )
    elsewhere = ContextStore.on_disk(tmp_path / "b", pydantic_data_converter)

    with pytest.raises(ApplicationError) as raised:
        await elsewhere.load(ref)

    assert raised.value.type == ErrorCode.LLM_CONTEXT_MISSING
    assert raised.value.non_retryable


def test_the_budget_keeps_the_newest_messages_that_fit() -> None:
    messages = [user("x" * 400), user("y" * 400), user("z" * 400)]
    budget = estimate_tokens(messages[0]) * 2

    assert fit_to_budget(messages, budget) == messages[1:]


def test_the_budget_never_separates_tool_results_from_their_call() -> None:
    messages = [user("go"), calling("1", "2"), result("1", "r" * 400), result("2", "s" * 400)]
    budget = estimate_tokens(messages[3]) + 1

    assert fit_to_budget(messages, budget) == messages[1:]


def test_the_budget_keeps_the_newest_exchange_even_when_it_alone_is_too_big() -> None:
    messages = [user("old"), user("n" * 4000)]

    assert fit_to_budget(messages, 10) == messages[1:]


async def test_the_model_sees_the_system_prompt_and_the_newest_messages_that_fit(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=400)
    lookups = (
        calls(ScriptedToolCall(name="list_files", arguments={}, id=f"c{n}")) for n in range(12)
    )
    agent.model.add(*lookups, say("Done."))
    run = await agent.start("list it all", system="Be brief.", mode=Mode.TASK)

    assert (await run.result()).phase is Phase.COMPLETED
    sent = agent.model.requests[-1].body["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[1]["role"] == "assistant"  # cut at a call, never between it and its result
    transcript = await run.transcript()
    assert 2 < len(sent) < len(transcript)
    assert transcript[0].content == "list it all"  # the durable transcript stays whole


def test_a_transcript_page_stops_before_its_byte_limit() -> None:
    transcript = [user("x" * 50_000) for _ in range(10)]

    page = TranscriptPage.of(transcript[2:], start=2, total=10, limit=100)

    assert page.messages == transcript[2:4]
    assert (page.total, page.next_start) == (10, 4)
    assert len(page.model_dump_json()) < TRANSCRIPT_PAGE_BYTES


def test_a_message_bigger_than_a_page_comes_alone() -> None:
    transcript = [user("x" * 2 * TRANSCRIPT_PAGE_BYTES), user("next")]

    assert TranscriptPage.of(transcript, start=0, total=2, limit=100).messages == transcript[:1]


async def test_a_worker_without_the_stored_conversation_sends_it_whole(
    temporal: Client, tmp_path: Path
) -> None:
    async with ScriptedModel([say("One."), say("Two.")]) as model:
        profile = ModelProfile(base_url=model.base_url, model="m", api_key=SecretStr(CANARY_KEY))
        tarry = Tarry(temporal, f"test-{uuid.uuid4().hex[:8]}")

        @asynccontextmanager
        async def worker_with_store(store: str) -> AsyncIterator[None]:
            settings = TarrySettings.model_construct(
                tarry_workspace_root=tmp_path / "workspaces", tarry_storage_dir=tmp_path / store
            )
            plugin = TarryPlugin(settings, profiles={"default": profile})
            async with Worker(temporal, task_queue=tarry.task_queue, plugins=[plugin]):
                yield
            await plugin.aclose()

        async with worker_with_store("first"):
            run = await tarry.start(RunInput(prompt="one", timeouts=FAST_TIMEOUTS))
            await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
        async with worker_with_store("elsewhere"):
            state = await run.send("two")

    assert state.last_assistant_text == "Two."
    assert [len(r.body["messages"]) for r in model.requests] == [1, 3]
    history = await temporal.get_workflow_handle(run.id).fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    assert failures == [ErrorCode.LLM_CONTEXT_MISSING]
