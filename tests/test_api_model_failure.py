"""Over HTTP, a failing model shows and a person can act on it: `GET /v1/runs/{id}`
carries `retrying` while a call is retried and `waiting_for: "model"` once the run asks a
person; `POST /v1/runs/{id}/model` switches its profile and `POST /v1/runs/{id}/retry`
asks again."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tarry.contracts import ErrorCode, Phase, WaitingFor
from tarry.testing.scripted_model import ScriptedModel, say
from tests.deadline import TIMEOUT
from tests.http_api import Api, serving
from tests.test_model_failure import ASK_SOON, WAITING, failing_agent
from tests.test_retrying import LONG_OUTAGE, retrying_state

SOON = json.loads(ASK_SOON.model_dump_json())


@pytest.fixture
async def backup() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as model:
        yield model


@pytest.fixture
async def failing(agent_factory: Any, backup: ScriptedModel) -> AsyncIterator[Api]:
    """The API over an agent whose `default` model answers 500, with a working `backup`."""
    async with serving(await failing_agent(agent_factory, backup)) as served:
        yield served


async def waiting_for_model(api: Api) -> str:
    run_id = await api.start("hello", timeouts=SOON)
    state = await api.run(run_id).wait_for(WAITING, TIMEOUT)
    assert state.waiting_for is WaitingFor.MODEL
    return run_id


async def test_while_the_model_fails_the_run_s_state_shows_the_retry(api: Api) -> None:
    api.agent.model.add(*LONG_OUTAGE, say("back online"))
    run_id = await api.start("hello")
    await retrying_state(api.run(run_id))

    view = await api.state(run_id)

    assert view.phase is Phase.RUNNING
    assert view.retrying is not None
    assert (view.retrying.call, view.retrying.attempt >= 2) == ("model", True)
    assert view.retrying.last_error is not None
    assert view.retrying.last_error.code is ErrorCode.LLM_HTTP_ERROR
    assert view.retrying.next_attempt_at is not None


async def test_a_run_whose_model_keeps_failing_reads_waiting_for_model(failing: Api) -> None:
    run_id = await waiting_for_model(failing)

    response = await failing.http.get(f"/v1/runs/{run_id}")

    body = response.json()
    assert (body["phase"], body["waiting_for"]) == ("WaitingUser", "model")
    assert body["error"]["code"] == "LLM_HTTP_ERROR"
    assert "Failed to parse tool call arguments" in body["error"]["message"]


async def test_switching_the_model_then_retrying_over_http_finishes_the_turn(
    failing: Api, backup: ScriptedModel
) -> None:
    backup.add(say("Hello from the backup."))
    run_id = await waiting_for_model(failing)

    switched = await failing.http.post(f"/v1/runs/{run_id}/model", json={"profile": "backup"})
    retried = await failing.http.post(f"/v1/runs/{run_id}/retry", json={})

    assert (switched.status_code, switched.json()["model"]) == (200, "backup")
    assert retried.status_code == 200
    body = retried.json()
    assert (body["phase"], body["waiting_for"]) == ("WaitingUser", "input")
    assert body["last_assistant_text"] == "Hello from the backup."


async def test_a_retry_with_the_model_still_failing_waits_for_the_model_again(
    failing: Api,
) -> None:
    run_id = await waiting_for_model(failing)
    asked = len(failing.agent.model.requests)

    retried = await failing.http.post(f"/v1/runs/{run_id}/retry", json={})

    assert (retried.status_code, retried.json()["waiting_for"]) == (200, "model")
    assert len(failing.agent.model.requests) > asked


async def test_retry_of_a_run_waiting_for_a_reply_is_409_retry_not_waiting(api: Api) -> None:
    api.agent.model.add(say("Hi."))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    response = await api.http.post(f"/v1/runs/{run_id}/retry", json={})

    assert response.status_code == 409
    assert response.json()["error"]["code"] == ErrorCode.RETRY_NOT_WAITING


async def test_a_blank_model_profile_is_422_input_invalid(api: Api) -> None:
    api.agent.model.add(say("Hi."))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    response = await api.http.post(f"/v1/runs/{run_id}/model", json={"profile": "  "})

    assert response.status_code == 422
    assert response.json()["error"]["code"] == ErrorCode.INPUT_INVALID
    assert (await api.state(run_id)).model is None


async def test_retry_and_model_take_only_json_bodies(api: Api) -> None:
    api.agent.model.add(say("Hi."))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    retry = await api.http.post(f"/v1/runs/{run_id}/retry", content=b"{}")
    model = await api.http.post(f"/v1/runs/{run_id}/model", data={"profile": "backup"})

    assert (retry.status_code, model.status_code) == (415, 415)
    assert (await api.state(run_id)).model is None


async def test_retry_of_an_unknown_run_is_404(api: Api) -> None:
    response = await api.http.post("/v1/runs/no-such-run/retry", json={})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == ErrorCode.RUN_NOT_FOUND
