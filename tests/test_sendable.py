"""Nothing the model said can poison its own conversation: the transcript keeps its
calls as written, and the provider is sent a conversation it accepts (a server such as
llama.cpp answers HTTP 500 to a call whose arguments are not JSON, forever)."""

from __future__ import annotations

import json
from typing import Any

from tarry.contracts import ErrorCode, Phase
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}


async def test_arguments_that_are_not_json_stay_in_the_transcript_as_written(
    agent: Agent,
) -> None:
    agent.model.add(call("read_file", "{"), say("Sorry, that call was cut."))
    run = await agent.start("read the notes")

    await run.wait_for(WAITING, TIMEOUT)

    transcript = await run.transcript()
    assert transcript[1].tool_calls is not None
    assert transcript[1].tool_calls[0].function.arguments == "{"
    assert tool_result(transcript[2])["error"]["code"] == ErrorCode.TOOL_INVALID_ARGUMENTS


async def test_arguments_that_are_not_json_are_sent_as_an_object_with_the_text_and_error(
    agent: Agent,
) -> None:
    agent.model.add(call("read_file", "{"), say("Sorry, that call was cut."))
    run = await agent.start("read the notes")

    await run.wait_for(WAITING, TIMEOUT)

    sent = agent.model.requests[1].body["messages"][-2]["tool_calls"][0]["function"]
    arguments = json.loads(sent["arguments"])
    assert arguments["unparsed_arguments"] == "{"
    assert arguments["parse_error"].startswith("not valid JSON")
    assert sent["name"] == "read_file"


async def test_arguments_that_are_not_an_object_reach_anthropic_as_an_object(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(provider="anthropic")
    agent.model.add(call("read_file", "[1, 2]"), say("Sorry."))
    run = await agent.start("read the notes")

    await run.wait_for(WAITING, TIMEOUT)

    [assistant] = [m for m in agent.model.requests[1].body["messages"] if m["role"] == "assistant"]
    [use] = [b for b in assistant["content"] if b["type"] == "tool_use"]
    assert use["input"] == {"unparsed_arguments": "[1, 2]", "parse_error": "not a JSON object"}


async def test_repeated_call_ids_are_sent_unique_and_each_result_names_its_own_call(
    agent: Agent,
) -> None:
    agent.model.add(
        calls(
            ScriptedToolCall(name="list_files", id="call_0"),
            ScriptedToolCall(name="read_file", arguments={"path": "x"}, id="call_0"),
        ),
        call("list_files", id="call_0"),
        say("Nothing here."),
    )
    run = await agent.start("look around")

    await run.wait_for(WAITING, TIMEOUT)

    messages = agent.model.requests[2].body["messages"]
    sent_ids = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    assert len(set(sent_ids)) == 3
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == sent_ids
    # The run itself renames a repeated id (`unique-call-ids`), so that a person can decide
    # each call by its id; the sending keeps unique the transcripts of runs from before.
    transcript_ids = [c.id for m in await run.transcript() for c in m.tool_calls or []]
    assert transcript_ids == ["call_0", "call_0-2", "call_0-3"]


async def test_a_call_without_a_name_is_sent_with_one(agent: Agent) -> None:
    agent.model.add(call("", {"path": "x"}), say("Let me try again."))
    run = await agent.start("look around")

    await run.wait_for(WAITING, TIMEOUT)

    transcript = await run.transcript()
    assert tool_result(transcript[2])["error"]["code"] == ErrorCode.TOOL_NOT_FOUND
    [sent] = agent.model.requests[1].body["messages"][-2]["tool_calls"]
    assert sent["function"]["name"] == "unnamed_tool"
