"""The response cache (`ModelProfile.cache`): a model call identical to one answered
before is answered from the payload store, at no cost, and says so; a sensitive run, or
one under a `pii` guardrail, neither reads nor writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.converter import DataConverter

from activities.provider import ModelCall
from activities.response_cache import ResponseCache
from tarry.config.settings import ModelProfile, Prices
from tarry.contracts import ChatMessage, LlmResponse, Mode, Phase, RunResult, Sampling, SpanKind
from tarry.temporal.storage import FileStorageDriver
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.test_guardrails import PII

PRICES = Prices(input=2.0, output=10.0)


@pytest.fixture
async def agent(agent_factory: Any) -> Agent:
    """An agent whose priced `default` profile keeps a response cache."""
    made: Agent = await agent_factory(cache=True, prices=PRICES)
    return made


async def result_of(agent: Agent, prompt: str, **input: Any) -> RunResult:
    run = await agent.start(prompt, mode=Mode.TASK, **input)
    return await run.result()


async def test_a_second_identical_call_is_answered_from_the_cache(agent: Agent) -> None:
    agent.model.add(say("Hello there."))
    first = await result_of(agent, "hello")

    second = await result_of(agent, "hello")

    assert (first.output, second.output) == ("Hello there.", "Hello there.")
    assert len(agent.model.requests) == 1


async def test_a_cached_answer_costs_nothing_and_says_so(agent: Agent) -> None:
    agent.model.add(say("Hello there."))
    first = await result_of(agent, "hello")
    run = await agent.start("hello", mode=Mode.TASK)
    second = await run.result()

    [model] = [s for s in (await run.timeline()).spans if s.kind is SpanKind.MODEL]
    answer = (await run.transcript())[-1]

    assert (first.usage.cost_usd > 0, first.usage.cached_calls) == (True, 0)
    assert (second.usage.cost_usd, second.usage.total_tokens) == (0, 0)
    assert second.usage.cached_calls == 1
    assert (model.cached, model.cost_usd) == (True, None)
    assert answer.cached


async def test_a_different_call_is_not_answered_from_the_cache(agent: Agent) -> None:
    agent.model.add(say("Hello there."), say("Goodbye."))
    await result_of(agent, "hello")

    other = await result_of(agent, "hello", sampling=Sampling(temperature=0.2))

    assert other.output == "Goodbye."
    assert other.usage.cached_calls == 0


async def test_a_sensitive_run_neither_reads_nor_writes_the_cache(agent: Agent) -> None:
    agent.model.add(*(say(f"Answer {n}.") for n in range(4)))
    await result_of(agent, "hello")  # cached

    read = await result_of(agent, "hello", sensitive=True)
    await result_of(agent, "bye", sensitive=True)
    written = await result_of(agent, "bye")

    assert (read.output, written.output) == ("Answer 1.", "Answer 3.")
    assert len(agent.model.requests) == 4


async def test_a_run_under_a_pii_guardrail_neither_reads_nor_writes_the_cache(
    agent: Agent,
) -> None:
    agent.model.add(*(say(f"Answer {n}.") for n in range(3)))
    await result_of(agent, "hello")

    guarded = await result_of(agent, "hello", guardrails=[PII])
    again = await result_of(agent, "hello", guardrails=[PII])

    assert (guarded.phase, guarded.output, again.output) == (
        Phase.COMPLETED,
        "Answer 1.",
        "Answer 2.",
    )


def call_of(profile: ModelProfile, text: str = "hello") -> ModelCall:
    messages = [ChatMessage(role="user", content=text)]
    return ModelCall("default", profile, None, messages, [], Sampling(), turn=1, stable=0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


ANSWER = LlmResponse(message=ChatMessage(role="assistant", content="Hi."))


async def test_a_cached_answer_older_than_the_ttl_is_not_used(
    tmp_path: Path, converter: DataConverter
) -> None:
    clock = Clock()
    cache = ResponseCache(FileStorageDriver(tmp_path), converter, clock)
    call = call_of(ModelProfile(cache=True, cache_ttl=60))
    await cache.put("default", call, ANSWER)

    clock.now = 59
    fresh = await cache.get("default", call)
    clock.now = 121
    stale = await cache.get("default", call)

    assert fresh is not None
    assert fresh.message.content == "Hi."
    assert stale is None


async def test_the_cache_keeps_its_most_recently_used_entries(
    tmp_path: Path, converter: DataConverter
) -> None:
    cache = ResponseCache(FileStorageDriver(tmp_path), converter)
    profile = ModelProfile(cache=True, cache_entries=2)
    one, two, three = (call_of(profile, text) for text in ("one", "two", "three"))
    await cache.put("default", one, ANSWER)
    await cache.put("default", two, ANSWER)
    await cache.get("default", one)  # used: two is now the oldest

    await cache.put("default", three, ANSWER)

    kept = [await cache.get("default", c) is not None for c in (one, two, three)]
    assert kept == [True, False, True]
