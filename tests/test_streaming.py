"""Streamed model answers: assembled exactly as a plain answer, their faults handled
like a plain call's, and their words seen live by the run's observers."""

from __future__ import annotations

from typing import Any

from tarry.contracts import ErrorCode, Phase, Usage
from tarry.scripted_llm import ScriptedToolCall, ScriptStep, calls, say
from tests.conftest import Agent

WAITING = {Phase.WAITING_USER}
TEXT = "The notes say three things: ship on Friday, call Priya, and buy more coffee."


def conversation() -> list[ScriptStep]:
    """Text in one-character pieces, two tool calls whose arguments come in fragments,
    then a closing answer with its own usage."""
    return [
        calls(
            ScriptedToolCall(name="list_files"),
            ScriptedToolCall(name="read_file", arguments={"path": "notes.md", "limit": 3}),
            chunk_chars=2,
        ),
        say(
            TEXT,
            chunk_chars=1,
            usage=Usage(prompt_tokens=40, completion_tokens=17, total_tokens=57),
        ),
    ]


async def test_a_streamed_answer_is_exactly_the_message_the_plain_call_gives(
    agent_factory: Any,
) -> None:
    streamed: Agent = await agent_factory(stream=True)
    plain: Agent = await agent_factory(stream=False)
    transcripts = []
    for agent in (streamed, plain):
        agent.model.add(*conversation())
        run = await agent.start("summarise my notes")
        await run.wait_for(WAITING)
        transcripts.append(await run.transcript())

    assert streamed.model.requests[0].body["stream"] is True
    assert "stream" not in plain.model.requests[0].body
    assert transcripts[0] == transcripts[1]
    assert transcripts[0][-1].content == TEXT
    assert transcripts[0][1].tool_calls is not None
    assert [c.function.arguments for c in transcripts[0][1].tool_calls] == [
        "{}",
        '{"path": "notes.md", "limit": 3}',
    ]


async def test_a_streamed_answer_counts_its_usage(agent: Agent) -> None:
    agent.model.add(*conversation())
    run = await agent.start("summarise my notes")

    state = await run.wait_for(WAITING)

    assert agent.model.requests[0].body["stream_options"] == {"include_usage": True}
    # The first call's default usage (10 per request message, 5 completion), then the
    # second's scripted usage, which the stream sends in its last chunk.
    assert state.usage == Usage(prompt_tokens=10 + 40, completion_tokens=5 + 17, total_tokens=72)


async def test_a_plain_json_answer_to_a_streaming_request_is_read_as_an_answer(
    agent: Agent,
) -> None:
    agent.model.add(say("in one piece", plain=True))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING)

    assert agent.model.requests[0].body["stream"] is True
    assert state.last_assistant_text == "in one piece"
    assert await agent.retries(run) == []


async def test_a_stream_cut_in_the_middle_is_retried(agent: Agent) -> None:
    agent.model.add(say(TEXT, stream_fault="cut", fault_after=5), say(TEXT))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING)

    assert state.last_assistant_text == TEXT
    assert await agent.retries(run) == [(2, ErrorCode.LLM_HTTP_ERROR)]


async def test_a_stream_that_ends_before_the_answer_does_is_retried(agent: Agent) -> None:
    agent.model.add(say(TEXT, stream_fault="no_end", fault_after=5), say(TEXT))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING)

    assert state.last_assistant_text == TEXT
    assert await agent.retries(run) == [(2, ErrorCode.LLM_HTTP_ERROR)]


async def test_a_malformed_event_is_a_bad_response_asked_again(agent: Agent) -> None:
    agent.model.add(say(TEXT, stream_fault="malformed", fault_after=3), say(TEXT))
    run = await agent.start("hello", bad_response_attempts=2)

    state = await run.wait_for(WAITING)

    assert state.last_assistant_text == TEXT
    assert len(agent.model.requests) == 2


async def test_malformed_events_fail_the_run_with_a_bad_response(agent: Agent) -> None:
    agent.model.add(say(TEXT, stream_fault="malformed"), say(TEXT, stream_fault="malformed"))
    run = await agent.start("hello", bad_response_attempts=2)

    result = await run.result()

    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_BAD_RESPONSE
    assert "malformed event" in result.error.message


async def test_a_stream_stuck_mid_answer_is_caught_by_the_heartbeat_timeout(agent: Agent) -> None:
    # The whole call may take 30 s (FAST_TIMEOUTS); the heartbeat timeout is 2 s.
    agent.model.add(say(TEXT, stream_fault="stall", fault_after=5), say(TEXT))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, timeout=20)

    assert state.last_assistant_text == TEXT
    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    started = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert [s.attempt for s in started] == [2]
    assert "heartbeat" in started[0].last_failure.message.lower()
