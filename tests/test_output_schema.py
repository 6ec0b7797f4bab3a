"""Strict JSON output: a task run with `output_schema` ends with JSON that fits it, after
at most one repair pass, or fails `OUTPUT_INVALID`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from tarry.contracts import ErrorCode, Mode, Phase, RunInput
from tarry.testing.scripted_model import say
from tests.conftest import Agent

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"files": {"type": "integer"}},
    "required": ["files"],
    "additionalProperties": False,
}


async def test_an_answer_that_fits_the_schema_is_the_output(agent: Agent) -> None:
    agent.model.add(say('{"files": 3}'))
    run = await agent.start("count the files", mode=Mode.TASK, output_schema=SCHEMA)

    result = await run.result()

    assert result.phase is Phase.COMPLETED
    assert json.loads(result.output or "") == {"files": 3}
    sent = agent.model.requests[0].body["response_format"]
    assert sent == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA, "strict": True},
    }


async def test_an_answer_that_misses_is_shown_its_errors_once_and_repaired(
    agent: Agent,
) -> None:
    agent.model.add(say("There are three files."), say('{"files": 3}'))
    run = await agent.start("count the files", mode=Mode.TASK, output_schema=SCHEMA)

    result = await run.result()

    assert result.phase is Phase.COMPLETED
    assert result.output == '{"files": 3}'
    transcript = await run.transcript()
    assert [(m.role, m.content) for m in transcript[:2]] == [
        ("user", "count the files"),
        ("assistant", "There are three files."),
    ]
    repair = transcript[2]
    assert repair.role == "user"
    assert repair.content is not None
    assert "the answer is not JSON" in repair.content
    assert repair.content.endswith(json.dumps(SCHEMA))  # for a provider that was not sent it
    assert [(m.role, m.content) for m in transcript[3:]] == [("assistant", '{"files": 3}')]
    assert "response_format" in agent.model.requests[1].body


async def test_an_answer_that_misses_again_fails_the_run_with_its_errors(agent: Agent) -> None:
    agent.model.add(say('{"files": "three"}'), say('{"files": 3, "dirs": 1}'))
    run = await agent.start("count the files", mode=Mode.TASK, output_schema=SCHEMA)

    result = await run.result()

    assert result.phase is Phase.FAILED
    assert result.error is not None
    assert result.error.code is ErrorCode.OUTPUT_INVALID
    assert result.error.details == {
        "errors": ["at $: Additional properties are not allowed ('dirs' was unexpected)"]
    }
    assert len(agent.model.requests) == 2


async def test_a_run_without_a_schema_sends_no_response_format(agent: Agent) -> None:
    agent.model.add(say("There are three files."))
    run = await agent.start("count the files", mode=Mode.TASK)

    assert (await run.result()).output == "There are three files."
    assert "response_format" not in agent.model.requests[0].body


def test_an_output_schema_that_is_not_a_json_schema_is_refused() -> None:
    with pytest.raises(ValidationError, match="output_schema is not a JSON Schema"):
        RunInput(prompt="x", mode=Mode.TASK, output_schema={"type": "integer", "minimum": "no"})
