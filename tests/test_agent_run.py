"""The run's behaviour end to end: a real dev server, a worker, the scripted model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tarry.client import TarryError
from tarry.contracts import MAX_INPUT_BYTES, ChatMessage, ErrorCode, Mode, Phase, UserInput
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT, deadline
from workflows.tool_calls import REPEAT_HINT

WAITING = {Phase.WAITING_USER}
ENDED = {Phase.COMPLETED, Phase.FAILED}


def roles(transcript: list[ChatMessage]) -> list[str]:
    return [m.role for m in transcript]


def is_tool_result(sent: dict[str, Any]) -> bool:
    """Whether a message a model request sent is a tool's result, in either dialect: an
    OpenAI `tool` message, or an Anthropic user message of `tool_result` blocks."""
    if sent["role"] == "tool":
        return True
    content = sent["content"]
    return isinstance(content, list) and content[0]["type"] == "tool_result"


async def test_tool_call_then_answer_waits_for_user(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(call("write_file", {"path": "a.txt", "content": "hi"}), say("Wrote it."))
    run = await agent.start("write hi to a.txt")

    state = await run.wait_for(WAITING, TIMEOUT)

    transcript = await run.transcript()
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert transcript[1].tool_calls is not None
    assert transcript[2].tool_call_id == transcript[1].tool_calls[0].id
    assert tool_result(transcript[2]) == {"ok": True, "data": {"path": "a.txt", "bytes": 2}}
    assert state.last_assistant_text == "Wrote it."
    assert state.turn == 2
    # The model saw the tool's result in its second call.
    second = agent.model.requests[1].body["messages"]
    assert is_tool_result(second[-1])


async def test_empty_prompt_starts_waiting_for_user(agent: Agent) -> None:
    run = await agent.start("")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.message_count == 0
    assert agent.model.requests == []


async def test_reply_moves_the_run_on_and_finish_completes_it(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(say("What should I call it?"), call("finish", {"result": "named it Bob"}))
    run = await agent.start("name the cat")
    await run.wait_for(WAITING, TIMEOUT)

    await run.reply("Bob")

    result = await run.result()
    assert result.phase is Phase.COMPLETED
    assert result.output == "named it Bob"
    assert result.turns == 2
    transcript = await run.transcript()
    assert [m.content for m in transcript if m.role == "user"] == ["name the cat", "Bob"]


async def test_task_mode_completes_on_a_plain_answer(agent: Agent) -> None:
    agent.model.add(say("42"))
    run = await agent.start("what is six times seven?", mode=Mode.TASK)

    result = await run.result()

    assert result.phase is Phase.COMPLETED
    assert result.output == "42"


async def test_pause_stops_at_the_next_turn_boundary(agent: Agent) -> None:
    agent.model.add(call("list_files", {}, delay=1.0), say("never asked"))
    run = await agent.start("look around")
    await agent.model.wait_for_requests(1, timeout=deadline(10))

    await run.pause()

    state = await run.wait_for(WAITING, TIMEOUT)
    assert roles(await run.transcript()) == ["user", "assistant", "tool"]
    assert state.turn == 1
    assert len(agent.model.requests) == 1


async def test_a_pause_overtaken_by_a_stop_point_does_not_swallow_the_next_reply(
    agent: Agent,
) -> None:
    agent.model.add(say("Which colour?", delay=1.0), say("Blue it is."))
    run = await agent.start("paint it")
    await agent.model.wait_for_requests(1, timeout=deadline(10))
    await run.pause()
    await run.wait_for(WAITING, TIMEOUT)

    state = await run.send("blue")

    assert state.last_assistant_text == "Blue it is."
    assert state.turn == 2


async def test_a_reply_that_arrives_with_a_pause_is_answered(agent: Agent) -> None:
    agent.model.add(call("list_files", {}, delay=1.0), say("Answering your note."))
    run = await agent.start("look around")
    await agent.model.wait_for_requests(1, timeout=deadline(10))

    await run.pause()
    await run.reply("also check the notes")

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.last_assistant_text == "Answering your note."
    assert roles(await run.transcript()) == ["user", "assistant", "tool", "user", "assistant"]


async def test_stop_during_a_model_call_aborts_the_run_and_cancels_the_request(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(say("too late", delay=30))
    run = await agent.start("think hard")
    request = await agent.model.wait_for_requests(1, timeout=deadline(10))

    await run.stop("changed my mind")

    result = await run.result()
    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.ENGINE_ABORTED
    assert "changed my mind" in result.error.message
    assert roles(await run.transcript()) == ["user"]
    await asyncio.wait_for(request.settled.wait(), timeout=deadline(10))
    assert request.cancelled


async def test_stop_while_a_tool_runs_records_its_result_then_aborts(agent: Agent) -> None:
    agent.model.add(call("list_files", {}, delay=1.0))
    run = await agent.start("look around")
    await agent.model.wait_for_requests(1, timeout=deadline(10))

    await run.stop()

    result = await run.result()
    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.ENGINE_ABORTED
    assert roles(await run.transcript()) == ["user", "assistant", "tool"]


async def test_stop_while_waiting_for_the_user_completes_the_run(agent: Agent) -> None:
    agent.model.add(say("Anything else?"))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    await run.stop()

    result = await run.result()
    assert result.phase is Phase.COMPLETED
    assert result.error is None
    assert result.output == "Anything else?"
    assert roles(await run.transcript()) == ["user", "assistant"]


async def test_replies_sent_while_running_arrive_once_in_order(agent: Agent) -> None:
    agent.model.add(say("first answer", delay=1.0), say("second answer"))
    run = await agent.start("hello")
    await agent.model.wait_for_requests(1, timeout=deadline(10))

    await run.reply("one")
    await run.reply("two")

    state = await run.wait_for(WAITING, TIMEOUT)
    assert state.turn == 2
    transcript = await run.transcript()
    assert [(m.role, m.content) for m in transcript] == [
        ("user", "hello"),
        ("assistant", "first answer"),
        ("user", "one"),
        ("user", "two"),
        ("assistant", "second answer"),
    ]


async def test_a_reply_retried_with_the_same_id_enters_the_transcript_once(agent: Agent) -> None:
    agent.model.add(say("Which colour?"), say("Blue it is.", delay=0.5))
    run = await agent.start("paint it")
    await run.wait_for(WAITING, TIMEOUT)

    await run.reply("blue", id="msg-1")
    await run.reply("blue", id="msg-1")
    await agent.model.wait_for_requests(2, timeout=deadline(10))
    await run.reply("blue", id="msg-1")

    await run.wait_for(WAITING, TIMEOUT)
    transcript = await run.transcript()
    assert [m.content for m in transcript if m.role == "user"] == ["paint it", "blue"]
    assert len(agent.model.requests) == 2


async def test_send_returns_the_state_at_the_next_stop_point(agent: Agent) -> None:
    agent.model.add(say("Hi! What now?"), call("list_files", {}), say("Nothing here."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    state = await run.send("list the files")

    assert state.phase is Phase.WAITING_USER
    assert state.last_assistant_text == "Nothing here."
    assert state.turn == 3


async def test_send_retried_with_the_same_id_delivers_once(agent: Agent) -> None:
    agent.model.add(say("Hi!"), say("Got it."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    first = await run.send("remember 7", id="m-7")
    again = await run.send("remember 7", id="m-7")

    assert first.last_assistant_text == again.last_assistant_text == "Got it."
    user_texts = [m.content for m in await run.transcript() if m.role == "user"]
    assert user_texts == ["hello", "remember 7"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", ErrorCode.INPUT_EMPTY),
        ("   ", ErrorCode.INPUT_EMPTY),
        ("x" * (MAX_INPUT_BYTES + 1), ErrorCode.INPUT_TOO_LARGE),
    ],
)
async def test_send_validator_rejects_bad_text_and_leaves_no_trace(
    agent: Agent, text: str, code: ErrorCode
) -> None:
    agent.model.add(say("Hi!"))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)
    handle = agent.tarry.client.get_workflow_handle(run.id)  # around the client's own check

    with pytest.raises(WorkflowUpdateFailedError) as error:
        await handle.execute_update("send", UserInput(text=text))

    assert isinstance(error.value.cause, ApplicationError)
    assert error.value.cause.type == code
    assert not any("UPDATE" in event for event in await agent.event_types(run))
    assert (await run.state()).message_count == 2


async def test_send_validator_rejects_an_ended_run(agent: Agent) -> None:
    agent.model.add(say("done", finish_reason="stop"))
    run = await agent.start("hello", mode=Mode.TASK)
    await run.result()

    with pytest.raises(TarryError) as error:
        await run.send("are you there?")

    assert error.value.code is ErrorCode.RUN_ENDED


async def test_loop_guard_waits_for_the_user_after_repeated_identical_failures(
    agent: Agent,
) -> None:
    missing = call("read_file", {"path": "missing.txt"})
    agent.model.add(missing, missing, missing, say("never asked"))
    run = await agent.start("read missing.txt", max_repeated_failures=3)

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.warning is ErrorCode.ENGINE_LOOP_DETECTED
    assert state.turn == 3
    assert len(agent.model.requests) == 3


async def test_max_turns_guard_waits_for_the_user(agent: Agent) -> None:
    agent.model.add(call("list_files", {}), call("list_files", {"path": "."}), say("never asked"))
    run = await agent.start("look around", max_turns=2)

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.warning is ErrorCode.ENGINE_MAX_TURNS
    assert state.turn == 2
    assert len(agent.model.requests) == 2


async def test_the_same_tool_five_times_in_a_row_earns_one_hint(agent: Agent) -> None:
    agent.model.add(*(call("list_files", {}) for _ in range(5)), say("ok, stopping"))
    run = await agent.start("look around")

    await run.wait_for(WAITING, TIMEOUT)

    sixth = agent.model.requests[5].body["messages"]
    assert sixth[-1] == {"role": "user", "content": REPEAT_HINT}
    hints = [m for m in await run.transcript() if m.content == REPEAT_HINT]
    assert len(hints) == 1


async def test_parallel_tool_calls_keep_their_order(provider_agent: Agent) -> None:
    agent = provider_agent
    agent.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments={"path": "a", "content": "1"}, id="c1"),
            ScriptedToolCall(name="list_files", arguments={}, id="c2"),
            ScriptedToolCall(name="write_file", arguments={"path": "b", "content": "22"}, id="c3"),
        ),
        say("done"),
    )
    run = await agent.start("write two files")

    await run.wait_for(WAITING, TIMEOUT)

    tool_messages = [m for m in await run.transcript() if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["c1", "c2", "c3"]
    assert tool_result(tool_messages[2])["data"] == {"path": "b", "bytes": 2}
