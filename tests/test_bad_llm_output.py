"""What a provider's odd answers do to a run: each is handled as docs/guides/errors.md documents,
none fails a workflow task. (Arguments that are not JSON and unknown tools are in
test_tool_errors.py: they come back to the model as tool results.)"""

from __future__ import annotations

import json
from typing import Any

from tarry.contracts import ErrorCode, Phase
from tarry.testing.scripted_model import ScriptStep, call, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}


def raw_answer(message: dict[str, Any], finish_reason: str = "stop") -> ScriptStep:
    """A 200 answer with exactly this `choices[0].message`, as some provider sends it."""
    return ScriptStep(
        body=json.dumps({"choices": [{"message": message, "finish_reason": finish_reason}]})
    )


async def no_failed_workflow_task(agent: Agent, run: Any) -> bool:
    return "WORKFLOW_TASK_FAILED" not in await agent.event_types(run)


async def test_a_tool_call_without_an_id_gets_one(agent: Agent) -> None:
    nameless = {"function": {"name": "list_files", "arguments": "{}"}, "type": "function"}
    agent.model.add(raw_answer({"role": "assistant", "tool_calls": [nameless]}), say("Empty."))
    run = await agent.start("look around")

    await run.wait_for(WAITING, TIMEOUT)

    transcript = await run.transcript()
    assert transcript[1].tool_calls is not None
    assert transcript[1].tool_calls[0].id == "call_1_0"
    assert transcript[2].tool_call_id == "call_1_0"
    assert tool_result(transcript[2])["ok"] is True
    assert await no_failed_workflow_task(agent, run)


async def test_content_as_a_list_of_parts_is_joined(agent: Agent) -> None:
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world."}]
    agent.model.add(raw_answer({"role": "assistant", "content": parts}))
    run = await agent.start("greet me")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "Hello, world."
    assert [m.content for m in await run.transcript()] == ["greet me", "Hello, world."]


async def test_an_empty_answer_is_asked_again(agent: Agent) -> None:
    agent.model.add(say(""), say("Sorry, here I am."))
    run = await agent.start("hello")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "Sorry, here I am."
    assert [m.content for m in await run.transcript()] == ["hello", "Sorry, here I am."]
    assert await no_failed_workflow_task(agent, run)


async def test_only_empty_answers_fail_the_run_with_bad_response(agent: Agent) -> None:
    agent.model.add(say(""), say(""), say(""))
    run = await agent.start("hello", bad_response_attempts=3)

    result = await run.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_BAD_RESPONSE
    assert [m.content for m in await run.transcript()] == ["hello"]


async def test_an_answer_cut_off_at_the_length_limit_is_kept_and_flagged(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(say("The three reasons are: first, the", finish_reason="length"))
    run = await agent.start("why?")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.warning is ErrorCode.LLM_TRUNCATED
    assert state.last_assistant_text == "The three reasons are: first, the"


async def test_tool_arguments_cut_off_at_the_length_limit_go_back_to_the_model(
    agent: Agent,
) -> None:
    agent.model.add(
        call("write_file", '{"path": "a.md", "content": "very lo', finish_reason="length"),
        say("Let me write it in parts."),
    )
    run = await agent.start("write a long file")

    await run.wait_for(WAITING, TIMEOUT)

    error = tool_result((await run.transcript())[2])["error"]
    assert error["code"] == ErrorCode.TOOL_INVALID_ARGUMENTS
    assert not (agent.workspace_root / run.id / "a.md").exists()
    assert await no_failed_workflow_task(agent, run)
