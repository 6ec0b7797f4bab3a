"""Each user's share of the API (`[api.limits] starts_per_minute`, `streams_per_user`):
beyond it a user's request is 429 `QUOTA_EXCEEDED` with `Retry-After`, and the other
users keep theirs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tarry.contracts import ErrorCode
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.faults import wait_until
from tests.http_api import Api
from tests.test_http_api import error_of
from tests.test_http_api_people import as_
from tests.test_owners import ALICE, BOB, CONFIG, people_api

QUOTAS = CONFIG + "\n[api.limits]\nstarts_per_minute = 2\nstreams_per_user = 1\n"
"""`CONFIG`'s people, each with two starts a minute and one event stream at a time."""


@pytest.fixture
async def api(agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    """The API with `QUOTAS`; its requests are alice's unless they send another token."""
    config = tmp_path / "tarry.toml"
    config.write_text(QUOTAS)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    async with people_api(agent) as api:
        yield api


async def started(api: Api, token: str = ALICE) -> str:
    """A run of `token`'s user, started (it says hello and waits for input)."""
    api.agent.model.add(say("Hello."))
    response = await api.http.post("/v1/runs", json={"prompt": "hi"}, headers=as_(token))
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


async def test_a_start_beyond_a_user_s_starts_per_minute_is_429_and_another_user_still_starts(
    api: Api,
) -> None:
    for _ in range(2):
        await started(api)

    refused = await api.http.post("/v1/runs", json={"prompt": "a third"})
    refused_by_message = await api.http.post(
        "/v1/runs/alices-fourth/messages?start=true", json={"text": "a fourth"}
    )
    bobs = await started(api, BOB)

    assert error_of(refused) == (429, ErrorCode.QUOTA_EXCEEDED)
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert error_of(refused_by_message) == (429, ErrorCode.QUOTA_EXCEEDED)
    assert bobs


async def stream_answer(api: Api, path: str, token: str = ALICE) -> httpx.Response:
    """The answer to a request for an event stream, closed at once: its body read only
    when it is refused (an open stream's does not end)."""
    async with api.http.stream("GET", path, headers=as_(token)) as response:
        if response.status_code != 200:
            await response.aread()
        return response


async def test_an_event_stream_beyond_a_user_s_streams_per_user_is_429_until_one_closes(
    api: Api,
) -> None:
    run_id = await started(api)
    bobs_run = await started(api, BOB)
    events = f"/v1/runs/{run_id}/events"

    async with api.http.stream("GET", events) as first:
        second = await stream_answer(api, events)
        bobs = await stream_answer(api, f"/v1/runs/{bobs_run}/events", BOB)

    async def opens_again() -> bool:
        return (await stream_answer(api, events)).status_code == 200

    assert first.status_code == 200
    assert error_of(second) == (429, ErrorCode.QUOTA_EXCEEDED)
    assert "Retry-After" in second.headers
    assert bobs.status_code == 200
    await wait_until(opens_again, what="alice's stream given back once she closed it")


async def test_without_limits_a_user_s_starts_and_streams_are_not_counted(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    async with people_api(agent) as api:
        run_ids = [await started(api) for _ in range(3)]
        async with api.http.stream("GET", f"/v1/runs/{run_ids[0]}/events") as first:
            second = await stream_answer(api, f"/v1/runs/{run_ids[0]}/events")

    assert (first.status_code, second.status_code) == (200, 200)
