"""The Anthropic provider, served over real HTTP by the scripted model's `/v1/messages`:
its dialect, the faults only it has, its key kept out of history, and prompt caching
that makes a turn pay full price only for its news. The faults both providers have
(401, 429 with `retry-after`, 5xx, other 4xx, garbage, a cut stream) are specified once
for both, with the `provider_agent` fixture (`test_llm_errors.py`, `test_streaming.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from activities.anthropic_messages import OMITTED_NOTE
from tarry.contracts import ErrorCode, Phase, Usage
from tarry.testing.anthropic_wire import TOKENS_PER_BLOCK
from tarry.testing.scripted_model import ScriptedToolCall, ScriptStep, calls, fail, say
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
async def claude(agent_factory: Any) -> Agent:
    """An agent whose default profile is an Anthropic one."""
    made: Agent = await agent_factory(provider="anthropic")
    return made


def marked(blocks: list[dict[str, Any]]) -> list[int]:
    """The positions of the blocks marked as cache breakpoints."""
    return [i for i, block in enumerate(blocks) if block.get("cache_control") == EPHEMERAL]


async def test_the_request_is_in_the_messages_dialect(claude: Agent) -> None:
    claude.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments={"path": "a", "content": "1"}, id="c1"),
            ScriptedToolCall(name="list_files", id="c2"),
        ),
        say("done"),
    )
    run = await claude.start("write a file", system="You are careful.")
    await run.wait_for(WAITING, TIMEOUT)

    first, second = (r.body for r in claude.model.requests)
    assert first["system"][0]["text"] == "You are careful."
    assert all(m["role"] != "system" for m in first["messages"])
    assert first["max_tokens"] == 4096
    write_file = next(t for t in first["tools"] if t["name"] == "write_file")
    assert write_file["input_schema"]["properties"]["path"]["type"] == "string"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    uses = [b for b in second["messages"][1]["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b["name"], b["input"]) for b in uses] == [
        ("c1", "write_file", {"path": "a", "content": "1"}),
        ("c2", "list_files", {}),
    ]
    # Both results of the one assistant turn, in one user message, in order.
    results = second["messages"][2]["content"]
    assert [(b["type"], b["tool_use_id"]) for b in results] == [
        ("tool_result", "c1"),
        ("tool_result", "c2"),
    ]


async def test_the_key_goes_in_x_api_key_and_never_into_history(claude: Agent) -> None:
    claude.model.add(ScriptStep(tool_calls=[ScriptedToolCall(name="list_files")]), say("done"))
    run = await claude.start("look around", system="You are careful.")
    await run.wait_for(WAITING, TIMEOUT)
    await run.stop()
    await run.result()

    for request in claude.model.requests:
        assert request.headers["x-api-key"] == CANARY_KEY
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in request.headers
    assert CANARY_KEY not in await claude.history_json(run)


async def test_an_overloaded_api_is_retried(claude: Agent) -> None:
    claude.model.add(fail(529), say("back again"))
    run = await claude.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "back again"
    assert await claude.retries(run) == [(2, ErrorCode.LLM_HTTP_ERROR)]


async def test_a_body_that_is_not_a_message_is_a_bad_response(claude: Agent) -> None:
    claude.model.add(ScriptStep(body='{"type": "message"}'), say("better"))
    run = await claude.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "better"
    assert len(claude.model.requests) == 2
    assert await claude.retries(run) == []


async def test_requests_mark_cache_breakpoints_after_tools_system_and_the_stable_prefix(
    claude: Agent,
) -> None:
    claude.model.add(ScriptStep(tool_calls=[ScriptedToolCall(name="list_files")]), say("done"))
    run = await claude.start("look around", system="You are careful.")
    await run.wait_for(WAITING, TIMEOUT)

    first, second = (r.body for r in claude.model.requests)
    for body in (first, second):
        assert marked(body["tools"]) == [len(body["tools"]) - 1]
        assert marked(body["system"]) == [0]
    # The first call's conversation is all news; the second's news is the tool call and
    # its result, after the prompt, which the first call sent too.
    assert [marked(m["content"]) for m in first["messages"]] == [[]]
    assert [marked(m["content"]) for m in second["messages"]] == [[0], [], []]


async def test_the_cache_usage_the_provider_reports_is_counted(claude: Agent) -> None:
    usage = Usage(
        prompt_tokens=1000,
        completion_tokens=7,
        total_tokens=1007,
        cache_read_tokens=900,
        cache_write_tokens=60,
    )
    claude.model.add(say("cached", usage=usage))
    run = await claude.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.usage == usage


async def test_each_turn_pays_full_price_only_for_its_news(claude: Agent) -> None:
    """With a model server that caches what requests mark (the scripted model counts
    `TOKENS_PER_BLOCK` per content block), the input billed at full price per turn
    stays flat as the conversation grows: the prompt at first, then an answer and a
    reply each turn."""
    claude.model.add(*(say(f"answer {n}") for n in range(4)))
    run = await claude.start("hello", system="You are careful.")
    states = [await run.wait_for(WAITING, TIMEOUT)]
    for reply in ("one", "two", "three"):
        states.append(await run.send(reply))

    billed = [
        s.usage.prompt_tokens - s.usage.cache_read_tokens - s.usage.cache_write_tokens
        for s in states
    ]
    per_turn = [b - a for a, b in zip([0, *billed], billed, strict=False)]
    assert per_turn == [TOKENS_PER_BLOCK, *[2 * TOKENS_PER_BLOCK] * 3]
    assert states[-1].usage.cache_read_tokens > states[-2].usage.cache_read_tokens


async def test_a_conversation_cut_to_its_budget_at_an_answer_still_begins_with_the_user(
    agent_factory: Any,
) -> None:
    claude: Agent = await agent_factory(provider="anthropic", context_budget=400)
    claude.model.add(ScriptStep(tool_calls=[ScriptedToolCall(name="list_files")]), say("none"))
    # Too long to fit the budget beside the call and its result: left out of the second call.
    run = await claude.start("any files? " + "please " * 300)
    await run.wait_for(WAITING, TIMEOUT)

    sent = claude.model.requests[1].body["messages"]
    assert sent[0] == {"role": "user", "content": [{"type": "text", "text": OMITTED_NOTE}]}
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][0]["type"] == "tool_use"
