"""Streamed model answers: assembled exactly as a plain answer, their faults handled
like a plain call's, and their words seen live by the run's observers."""

from __future__ import annotations

import asyncio
import io
import json
import re
from functools import partial
from pathlib import Path
from typing import Any

import pexpect
import pytest
from temporalio.client import Client

from activities.observers import PUBLISH_LIMIT
from tarry.client import RunHandle
from tarry.contracts import INTERRUPTED_NOTE, LLM_ACTIVITY, ErrorCode, Phase, Timeouts, Usage
from tarry.contracts.events import EventKind, RunEvent
from tarry.testing.scripted_model import ScriptedToolCall, ScriptStep, call, calls, say
from tests.cli import TARRY, agent_env
from tests.conftest import PROVIDERS, Agent, tool_result
from tests.deadline import HEARTBEAT, TIMEOUT, deadline
from tests.faults import activity_attempts, wait_until

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


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_streamed_answer_is_exactly_the_message_the_plain_call_gives(
    agent_factory: Any, provider: str
) -> None:
    streamed: Agent = await agent_factory(stream=True, provider=provider)
    plain: Agent = await agent_factory(stream=False, provider=provider)
    transcripts = []
    for agent in (streamed, plain):
        agent.model.add(*conversation())
        run = await agent.start("summarise my notes")
        await run.wait_for(WAITING, TIMEOUT)
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

    state = await run.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[0].body["stream_options"] == {"include_usage": True}
    # The first call's default usage (10 per request message, 5 completion), then the
    # second's scripted usage, which the stream sends in its last chunk.
    assert state.usage == Usage(prompt_tokens=10 + 40, completion_tokens=5 + 17, total_tokens=72)


async def test_a_plain_json_answer_to_a_streaming_request_is_read_as_an_answer(
    agent: Agent,
) -> None:
    agent.model.add(say("in one piece", plain=True))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[0].body["stream"] is True
    assert state.last_assistant_text == "in one piece"
    assert await agent.retries(run) == []


async def test_a_stream_cut_in_the_middle_is_retried(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(say(TEXT, stream_fault="cut", fault_after=5), say(TEXT))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == TEXT
    assert await agent.retries(run) == [(2, ErrorCode.LLM_HTTP_ERROR)]


async def test_a_stream_that_ends_before_the_answer_does_is_retried(agent: Agent) -> None:
    agent.model.add(say(TEXT, stream_fault="no_end", fault_after=5), say(TEXT))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == TEXT
    assert await agent.retries(run) == [(2, ErrorCode.LLM_HTTP_ERROR)]


async def test_a_malformed_event_is_a_bad_response_asked_again(agent: Agent) -> None:
    agent.model.add(say(TEXT, stream_fault="malformed", fault_after=3), say(TEXT))
    run = await agent.start("hello", bad_response_attempts=2)

    state = await run.wait_for(WAITING, TIMEOUT)

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
    # The whole call may take 30 s (FAST_TIMEOUTS); the heartbeat timeout is `HEARTBEAT`.
    agent.model.add(say(TEXT, stream_fault="stall", fault_after=5), say(TEXT))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, timeout=HEARTBEAT.total_seconds() + deadline(20))

    assert state.last_assistant_text == TEXT
    [llm] = [
        a for a in await activity_attempts(agent.tarry.client, run.id) if a.activity == LLM_ACTIVITY
    ]
    assert llm.attempts == 2
    assert "heartbeat" in llm.last_failure.lower()


# --- Observers -----------------------------------------------------------------------

LONG = " ".join(f"word{i}" for i in range(60))


async def events_until(run: RunHandle, last: EventKind, from_offset: int = 0) -> list[RunEvent]:
    """The run's events from `from_offset` up to and including the first of kind `last`."""
    seen: list[RunEvent] = []
    async with asyncio.timeout(deadline(30)):
        async for event in run.events(from_offset):
            seen.append(event)
            if event.kind is last:
                return seen
    raise AssertionError(f"the stream ended before a {last} event: {seen}")


def words(events: list[RunEvent]) -> str:
    return "".join(e.text or "" for e in events if e.kind is EventKind.TEXT)


async def test_an_observer_sees_the_first_words_while_the_model_is_still_writing(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.1))  # about 6 s of writing
    run = await agent.start("talk to me")

    first = await events_until(run, EventKind.TEXT)
    still_writing = not agent.model.requests[0].settled.is_set()
    whole = await events_until(run, EventKind.STOP)

    assert still_writing
    assert [e.kind for e in whole[:2]] == [EventKind.MESSAGE, EventKind.ANSWER]
    assert LONG.startswith(words(first))
    assert words(whole) == LONG
    ends = [e for e in whole if e.kind is EventKind.ANSWER_END]
    assert [e.usage for e in ends] == [(await run.state()).usage]
    message = whole[-2].message
    assert message is not None
    assert (whole[-2].index, message.content) == (1, LONG)


async def test_an_observer_attaching_after_the_answer_ended_still_receives_it(
    agent: Agent,
) -> None:
    # Each takes longer than a batch interval: a quicker answer is not streamed at all.
    agent.model.add(
        call("list_files", chunk_chars=1, chunk_delay=0.1),
        say(LONG, chunk_chars=3, chunk_delay=0.005),
    )
    run = await agent.start("look around")
    await run.wait_for(WAITING, TIMEOUT)

    seen = await events_until(run, EventKind.STOP)

    assert words(seen) == LONG
    calls_seen = [(e.kind, e.name, e.text) for e in seen if e.kind.startswith("tool")]
    assert calls_seen[0] == (EventKind.TOOL_CALL, "list_files", None)
    assert "".join(text or "" for _, _, text in calls_seen[1:]) == "{}"
    messages = [e.message for e in seen if e.kind is EventKind.MESSAGE]
    assert messages == await run.transcript()
    assert seen[-1].state is not None
    assert seen[-1].state.phase is Phase.WAITING_USER


async def test_an_answer_written_within_one_batch_costs_no_history(agent: Agent) -> None:
    agent.model.add(say("Hi there."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    seen = await events_until(run, EventKind.STOP)

    assert "WORKFLOW_EXECUTION_SIGNALED" not in await agent.event_types(run)
    messages = [e.message for e in seen if e.kind is EventKind.MESSAGE]
    assert [m.content for m in messages if m is not None] == ["hello", "Hi there."]
    assert words(seen) == ""  # shown whole, as its message, the moment it arrived


async def signals_for(agent: Agent, chunks: int) -> tuple[int, int]:
    """The signals in the history of a run whose one answer comes in `chunks` pieces
    over about two seconds, and the text events the stream kept for it."""
    text = "x" * chunks
    agent.model.add(say(text, chunk_chars=1, chunk_delay=2.0 / chunks))
    run = await agent.start("go")
    await run.wait_for(WAITING, TIMEOUT)
    kept = await events_until(run, EventKind.STOP)
    assert words(kept) == text
    signals = (await agent.event_types(run)).count("WORKFLOW_EXECUTION_SIGNALED")
    return signals, sum(e.kind is EventKind.TEXT for e in kept)


async def test_the_history_cost_of_an_answer_is_bounded_by_time_not_by_its_chunks(
    agent: Agent,
) -> None:
    few = await signals_for(agent, 20)
    many = await signals_for(agent, 400)

    # About one signal per 200 ms batch: some ten over two seconds, in either case.
    assert 1 <= few[0] <= 20
    assert 1 <= many[0] <= 20
    # Deltas are merged per batch before they are published, so the stream's log (held in
    # the workflow and carried through continue-as-new) grows per batch as well.
    assert many[1] <= many[0]


async def test_an_answer_of_megabytes_costs_a_bounded_history_and_streams_without_restarts(
    agent: Agent,
) -> None:
    text = "".join(f"word{i} " for i in range(400_000))  # 3.4 MB, written over ~10 s
    agent.model.add(say(text, chunk_delay=0.005))
    run = await agent.start("say it all")

    seen = await events_until(run, EventKind.STOP)

    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    size = len(history.to_json())
    print(f"answer {len(text)} chars; history {len(history.events)} events, {size} bytes")
    assert size < len(text) // 4
    assert len(history.events) < 100
    assert await agent.retries(run) == []  # no restarts: the model never broke off
    assert EventKind.RESET not in [e.kind for e in seen]
    assert words(seen) == text[:PUBLISH_LIMIT]  # the rest comes with the message
    assert (await run.transcript())[-1].content == text


def a_long_answer() -> tuple[str, str, ScriptStep]:
    """150,000 text deltas and a write_file call whose 3 MB of content come in 5-character
    argument fragments, as a model writing token by token sends them: the text, the
    content, and the answer's script step."""
    text = "".join(f"w{i:06d} " for i in range(93_750))  # 750,000 chars: 150,000 deltas
    content = "".join(f"line {i:07d}\n" for i in range(230_000))  # 3.0 MB, escaped in JSON
    answer = ScriptStep(
        content=text,
        tool_calls=[
            ScriptedToolCall(name="write_file", arguments={"path": "big.txt", "content": content})
        ],
        chunk_chars=5,
        max_pieces=None,
    )
    return text, content, answer


async def test_an_answer_of_150000_deltas_and_a_3_mb_tool_argument_arrive_whole(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    text, content, answer = a_long_answer()
    agent.model.add(answer, say("Wrote it."))
    # Some 750,000 events take minutes on a small, busy machine: a long attempt timeout,
    # and the suite's heartbeat timeout, which a worker whose loop froze would miss.
    timeouts = Timeouts(llm_heartbeat=HEARTBEAT, llm_attempt=900)
    run = await agent.start("write it all down", timeouts=timeouts)

    await run.wait_for(WAITING, timeout=deadline(600))

    transcript = await run.transcript()
    assert transcript[1].content == text
    assert tool_result(transcript[2]) == {
        "ok": True,
        "data": {"path": "big.txt", "bytes": len(content)},
    }
    assert (agent.workspace_root / run.id / "big.txt").read_text() == content
    assert await agent.retries(run) == []  # the worker kept heartbeating throughout


async def test_watch_shows_an_answer_longer_than_the_publish_limit_whole_and_once(
    agent: Agent, payload_store: Path
) -> None:
    text = "".join(f"word{i} " for i in range(60_000))  # 470 kB, written over ~4 s
    agent.model.add(say(text, chunk_delay=0.002))
    run = await agent.start("say it all")
    watching = await asyncio.create_subprocess_exec(
        str(TARRY), "watch", run.id,
        # The answer's message is over 256 KiB: the store holds it, as it does for the worker.
        env=agent_env(agent) | {"TARRY_STORAGE_DIR": str(payload_store)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(watching.communicate(), timeout=deadline(60))

    assert (watching.returncode, err) == (0, b"")
    assert len(text) > PUBLISH_LIMIT
    assert out.decode().splitlines() == ["you: say it all", f"agent: {text}"]


async def test_a_stream_cut_in_the_middle_shows_a_reset_then_the_whole_answer_once(
    agent: Agent,
) -> None:
    cut = say(LONG, chunk_chars=5, chunk_delay=0.1, stream_fault="cut", fault_after=6)
    agent.model.add(cut, say(LONG, chunk_delay=0.01))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    seen = await events_until(run, EventKind.STOP)

    kinds = [e.kind for e in seen]
    reset = kinds.index(EventKind.RESET)
    assert kinds.count(EventKind.ANSWER) == 1
    assert kinds.index(EventKind.ANSWER) < reset
    before, after = words(seen[:reset]), words(seen[reset:])
    assert before
    assert LONG.startswith(before)
    assert after == LONG
    assert kinds.count(EventKind.ANSWER_END) == 1


async def test_stop_in_the_middle_of_an_answer_keeps_its_words_marked_interrupted(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.2))  # about 12 s of writing
    run = await agent.start("talk to me")
    first = await events_until(run, EventKind.TEXT)

    await run.stop("enough")
    result = await run.result()

    assert result.error is not None
    assert result.error.code is ErrorCode.ENGINE_ABORTED
    kept = (await run.transcript())[-1]
    assert (kept.role, kept.interrupted) == ("assistant", True)
    assert kept.content is not None
    assert kept.content.startswith(words(first))
    assert LONG.startswith(kept.content)
    assert kept.content != LONG
    assert kept.for_model()["content"] == f"{kept.content} {INTERRUPTED_NOTE}"
    assert agent.model.requests[0].cancelled


async def test_the_publisher_leaves_at_once_when_its_stream_ends(
    agent_factory: Any, time_skipping: Client
) -> None:
    # On Python 3.11 the stream client's own exit can hang after a forced flush until the
    # activity's start-to-close timeout, which the test server would skip to: the answer
    # would then be a retry. Two answers, the second streamed, each on its first attempt.
    agent: Agent = await agent_factory(client=time_skipping)
    agent.model.add(call("list_files"), say("Nothing here.", chunk_chars=1, chunk_delay=0.05))
    run = await agent.start("look around", mode="task")

    async with asyncio.timeout(deadline(60)):
        result = await run.result()

    assert result.phase is Phase.COMPLETED
    assert result.output == "Nothing here."
    assert await agent.retries(run) == []


async def test_watch_in_a_terminal_shows_the_words_before_the_answer_ends(agent: Agent) -> None:
    agent.model.add(call("list_files"), say(LONG, chunk_chars=5, chunk_delay=0.15))  # ~9 s
    run = await agent.start("look around")
    await agent.model.wait_for_requests(2, timeout=deadline(10))
    screen = io.StringIO()
    # A terminal that can redraw a line, as a person's: the spinner and cursor are on.
    env = agent_env(agent) | {"TERM": "xterm-256color"}
    child = pexpect.spawn(
        str(TARRY),
        ["watch", run.id],
        env=env,
        encoding="utf-8",
        timeout=deadline(30),
        dimensions=(24, 200),
    )
    child.logfile_read = screen
    try:
        await asyncio.to_thread(child.expect_exact, "agent: ")
        await asyncio.to_thread(child.expect_exact, "word0 word1")
        still_writing = not agent.model.requests[1].settled.is_set()
        await asyncio.to_thread(child.expect_exact, "word59")
        await asyncio.to_thread(child.expect, pexpect.EOF)
    finally:
        child.close(force=True)

    assert still_writing
    assert child.exitstatus == 0
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # no styles, no cursor moves
    assert shown.index("you: look around") < shown.index("→ list_files()") < shown.index("← []")
    assert shown.count("word59") == 1


async def test_an_observer_follows_the_run_across_continue_as_new(agent: Agent) -> None:
    answers = [f"answer number {n}, " * 8 for n in range(6)]
    agent.model.add(*(say(text, chunk_chars=7, chunk_delay=0.03) for text in answers))
    run = await agent.start("go", continue_as_new_after_turns=1)
    await run.wait_for(WAITING, TIMEOUT)
    seen: list[RunEvent] = []

    async def observe() -> None:
        async for event in run.events():
            seen.append(event)

    async def observed(turn: int) -> bool:
        return any(
            e.kind is EventKind.STOP and e.state is not None and e.state.turn >= turn for e in seen
        )

    observer = asyncio.create_task(observe())
    for n in range(1, 6):
        # Each reply once the observer has read the last turn's end, as a person reads
        # an answer before replying: a hand-over keeps only the last two turns' events,
        # so an observer the chain has run two turns ahead of misses words by design.
        await wait_until(partial(observed, n), what=f"turn {n} observed")
        await run.send(f"reply {n}")
    await run.stop()
    await run.result()
    async with asyncio.timeout(deadline(30)):
        await observer  # it ends once the last run of the chain has ended

    by_turn = [words([e for e in seen if e.turn == turn]) for turn in range(1, 7)]
    assert by_turn == answers
    messages = [e.index for e in seen if e.kind is EventKind.MESSAGE]
    assert messages == list(range(len(await run.transcript())))
    # What each hand-over carries of the stream (the last two turns' events; the first
    # hand-over has had one turn) stays the same size, turn after turn.
    logs = [len(memory["events"]["state"]["log"]) for memory in await handed_over(agent, run)]
    assert len(logs) >= 4
    assert max(logs[1:]) <= min(logs[1:]) + 2


async def handed_over(agent: Agent, run: RunHandle) -> list[dict[str, Any]]:
    """The memory each run of the chain handed to the next, as JSON."""
    *handing_over, _last = await agent.histories(run)
    return [
        json.loads(
            h.events[-1].workflow_execution_continued_as_new_event_attributes.input.payloads[0].data
        )["memory"]
        for h in handing_over
    ]
