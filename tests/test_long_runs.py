"""Runs of any length: continue-as-new hands everything over, history grows linearly,
and the model sees a conversation cut to its profile's context budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from activities.tool_calls import tool
from tarry.contracts import LLM_ACTIVITY, Mode, Phase
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}


@tool
def lookup(key: str) -> str:
    """Looks a key up; answers 5 KB of text."""
    return (key + " ") * (5000 // (len(key) + 1))


def bytes_per_turn(events: Sequence[HistoryEvent]) -> list[int]:
    """History bytes from one LLM call's scheduling to the next one's."""
    turns: list[int] = []
    for event in events:
        attributes = event.activity_task_scheduled_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and attributes.activity_type.name == LLM_ACTIVITY
        ):
            turns.append(0)
        if turns:
            turns[-1] += event.ByteSize()
    return turns


async def test_a_run_hands_over_to_a_fresh_run_and_loses_nothing(agent: Agent) -> None:
    agent.model.add(
        call("write_file", {"path": "a.txt", "content": "hi"}),
        say("Wrote it."),
        say("Second."),
        call("read_file", {"path": "a.txt"}),
        say("It says hi."),
    )
    run = await agent.start("write hi", continue_as_new_after_turns=2)
    await run.wait_for(WAITING, TIMEOUT)

    second = await run.send("and now?", id="m-1")
    third = await run.send("read it back")
    await run.stop()
    result = await run.result()

    histories = await agent.histories(run)
    assert len(histories) >= 2
    assert (second.turn, third.turn) == (3, 5)
    # The scripted model counts 10 prompt tokens per message it was sent, plus 5.
    assert [len(r.body["messages"]) for r in agent.model.requests] == [1, 3, 5, 7, 9]
    assert (result.phase, result.turns, result.usage.total_tokens) == (Phase.COMPLETED, 5, 275)
    transcript = await run.transcript()
    assert [(m.role, m.content) for m in transcript if m.role != "tool"] == [
        ("user", "write hi"),
        ("assistant", None),
        ("assistant", "Wrote it."),
        ("user", "and now?"),
        ("assistant", "Second."),
        ("user", "read it back"),
        ("assistant", None),
        ("assistant", "It says hi."),
    ]


async def test_signals_updates_and_queries_during_hand_overs_are_each_served_once(
    agent: Agent,
) -> None:
    answers = [f"answer {n}" for n in range(13)]
    agent.model.add(*(say(text) for text in answers))  # one per reply at most
    run = await agent.start(continue_as_new_after_turns=1)
    await run.wait_for(WAITING, TIMEOUT)
    seen: list[tuple[int, int]] = []

    async def watch() -> None:
        while True:
            state = await run.state()
            seen.append((state.turn, len(await run.transcript())))

    watcher = asyncio.create_task(watch())
    for n in range(12):
        if n % 3 == 2:  # an update, answered by whichever run of the chain reaches it
            await run.send(f"r{n}", id=f"id-{n}")
        else:
            await run.reply(f"r{n}", id=f"id-{n}")
            await run.reply(f"r{n}", id=f"id-{n}")  # a retry: never doubled
    last = await run.send("last")  # answered once every earlier reply was delivered
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher  # re-raises any error a query met

    transcript = await run.transcript()
    users = [m.content for m in transcript if m.role == "user"]
    said = [m.content for m in transcript if m.role == "assistant"]
    assert users == [*(f"r{n}" for n in range(12)), "last"]
    # Replies that meet at one turn boundary share an answer: the answers are the
    # script's, in order, each once, one per turn.
    assert said == answers[: len(said)]
    assert last.turn == len(said)
    assert seen == sorted(seen)  # every query answered, by the newest run, never going back
    assert len(await agent.histories(run)) >= 4


async def test_each_turn_adds_as_much_history_at_turn_100_as_at_turn_10(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(tools=[lookup])
    agent.model.add(*(call("lookup", {"key": f"k{n}"}) for n in range(100)), say("Done."))
    # sdk-python #1890 at small scale: 5 KB results on a conversation seeded with 100 KB.
    # One segment, so a history that grew with the conversation would show.
    prompt = "Look up a hundred keys in this:\n" + "seed " * 20_000
    run = await agent.start(prompt, mode=Mode.TASK, max_turns=200, continue_as_new_after_turns=500)

    result = await run.result()

    assert result.phase is Phase.COMPLETED
    [history] = await agent.histories(run)
    turns = bytes_per_turn(history.events)
    assert len(turns) == 101
    print(f"history bytes per turn: turn 10 {turns[9]}, turn 100 {turns[99]}")
    assert turns[99] <= 1.2 * turns[9], turns


async def test_a_conversation_of_200k_tokens_in_53_calls_keeps_a_small_history(
    agent_factory: Any,
) -> None:
    # sdk-python #1890: a run like this, sending the whole context each turn, reached
    # Temporal's 50 MB history limit. Three 5 KB results a turn: ~800 KB of conversation.
    agent: Agent = await agent_factory(tools=[lookup])
    agent.model.add(
        *(
            calls(
                *(ScriptedToolCall(name="lookup", arguments={"key": f"k{n}.{i}"}) for i in range(3))
            )
            for n in range(52)
        ),
        say("Done."),
    )
    run = await agent.start("look everything up", mode=Mode.TASK, max_turns=100)

    result = await run.result()

    assert (result.phase, result.turns) == (Phase.COMPLETED, 53)
    conversation = sum(len(m.model_dump_json()) for m in await run.transcript())
    assert conversation > 750_000
    history = sum(e.ByteSize() for h in await agent.histories(run) for e in h.events)
    # Each message enters history about twice (as it arrives, and as news to the next
    # model call); the whole conversation resent per turn would be ~25x this.
    assert history < 3 * conversation
