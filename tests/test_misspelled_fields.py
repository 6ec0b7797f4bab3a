"""A misspelled field in a run's input is refused at every door that takes one, naming
the field and the nearest known name: ignored, `require_aproval` would leave the gate off
and the tool would run unasked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError

from tarry.contracts import WORKFLOW_TYPE, ErrorCode, RunInput, RunResult
from tests.conftest import Agent
from tests.http_api import serving
from tests.test_mcp_server import mcp_client, text_of

TYPO = {"require_aproval": ["write_file"]}
HINT = "unknown field 'require_aproval'; did you mean 'require_approval'?"


def assert_refused(response: Any) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == ErrorCode.INPUT_INVALID
    assert HINT in error["message"]


async def test_the_api_refuses_a_misspelled_field_at_each_door_that_takes_a_run_s_input(
    agent: Agent,
) -> None:
    async with serving(agent) as api:
        started = await api.http.post("/v1/runs", json={"prompt": "tidy up", **TYPO})
        get_or_create = await api.http.post(
            "/v1/runs/run-typo/messages?start=true",
            json={"text": "tidy up", "input": {"prompt": "", **TYPO}},
        )
        scheduled = await api.http.post(
            "/v1/schedules",
            json={"name": "nightly-typo", "every": "1h", "input": {"prompt": "tidy", **TYPO}},
        )
        nested = await api.http.post(
            "/v1/runs", json={"prompt": "tidy up", "budget": {"max_cost": 1}}
        )
        run = await api.http.get("/v1/runs/run-typo")
        schedule = await api.http.get("/v1/schedules/nightly-typo")

    for response in (started, get_or_create, scheduled):
        assert_refused(response)
    assert nested.status_code == 422
    assert "unknown field 'max_cost'; did you mean 'max_cost_usd'?" in nested.text
    assert (run.status_code, schedule.status_code) == (404, 404)
    assert agent.model.requests == []


def test_the_python_client_s_input_refuses_a_misspelled_field() -> None:
    """`Tarry.start`, `send(start=...)` and `create_schedule` take a `RunInput`, which
    cannot be made with one."""
    with pytest.raises(ValidationError, match=HINT):
        RunInput.model_validate({"prompt": "tidy up", **TYPO})
    with pytest.raises(ValidationError, match=HINT):
        RunInput(prompt="tidy up", **TYPO)


async def test_mcp_start_run_refuses_a_misspelled_argument(
    agent: Agent, payload_store: Path
) -> None:
    async with mcp_client(agent, payload_store) as client:
        result = await client.call_tool("start_run", {"prompt": "tidy up", **TYPO})
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert result.is_error
    assert HINT in text_of(result)
    assert tools["start_run"].input_schema["additionalProperties"] is False
    assert agent.model.requests == []


async def test_a_raw_start_with_a_misspelled_field_fails_the_run_at_once(agent: Agent) -> None:
    """Started around the client (the Temporal UI, `temporal workflow start`): the run
    fails with the API's message, instead of its workflow task failing on and on."""
    handle = await agent.tarry.client.start_workflow(
        WORKFLOW_TYPE,
        {"prompt": "tidy up", **TYPO},
        id="run-raw-misspelled",
        task_queue=agent.tarry.task_queue,
        result_type=RunResult,
    )

    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()

    assert failed.value.cause.type == ErrorCode.INPUT_INVALID  # type: ignore[attr-defined]
    assert HINT in str(failed.value.cause)
    assert agent.model.requests == []
