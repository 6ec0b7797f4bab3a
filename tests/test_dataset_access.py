"""Who reads a dataset over the HTTP API: each version on its own, by its maker and by
those who may read every run, since an admin's version of someone's dataset may hold
runs its first maker may not read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tarry.contracts import ErrorCode
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.http_api import Api
from tests.test_http_api import error_of, listed, until_stopped
from tests.test_http_api_people import as_
from tests.test_owners import ALICE, BOB, ERIN, people_api, points_of, with_people


@pytest.fixture
async def api(agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    """The API with `tests.test_owners.CONFIG`'s people: erin is an admin."""
    with_people(tmp_path, monkeypatch)
    async with people_api(agent) as api:
        yield api


async def private_runs(api: Api) -> tuple[str, str]:
    """Alice's run and bob's, each private to its owner, both listed for an admin."""
    api.agent.model.add(say("alice's answer"), say("bob's private answer"))
    alices = await api.start("alice's question")
    await until_stopped(api, alices)
    api.http.headers.update(as_(BOB))
    bobs = await api.start("bob's private question")
    await until_stopped(api, bobs)
    api.http.headers.update(as_(ERIN))
    await listed(api, "", {alices, bobs})
    return alices, bobs


async def created(api: Api, name: str, token: str) -> dict[str, Any]:
    response = await api.http.post("/v1/datasets", json={"name": name}, headers=as_(token))
    assert response.status_code == 201, response.text
    manifest: dict[str, Any] = response.json()
    return manifest


async def test_an_admin_s_version_of_a_dataset_is_not_read_by_its_first_maker(api: Api) -> None:
    alices, bobs = await private_runs(api)
    await created(api, "alices", ALICE)
    second = await created(api, "alices", ERIN)

    as_alice = as_(ALICE)
    shown = await api.http.get("/v1/datasets/alices", params={"version": 2}, headers=as_alice)
    exported = await api.http.get(
        "/v1/datasets/alices/points", params={"version": 2}, headers=as_alice
    )
    latest = await api.http.get("/v1/datasets/alices", headers=as_alice)
    listing = await api.http.get("/v1/datasets", headers=as_alice)

    assert second["version"] == 2
    assert error_of(shown) == (404, ErrorCode.DATASET_NOT_FOUND)
    assert error_of(exported) == (404, ErrorCode.DATASET_NOT_FOUND)
    assert latest.json()["version"] == 1
    assert [(d["name"], d["version"]) for d in listing.json()["datasets"]] == [("alices", 1)]
    assert await points_of(api, "alices", ALICE) == {alices}
    assert {alices, bobs} <= await points_of(api, "alices", ERIN)
