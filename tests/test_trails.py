"""The trail of what is not a run: every act on a schedule (its creation, pause, unpause,
trigger and deletion) and an eval's start is one audit record of its real person, read
through `GET /v1/audit` by those who may read the schedule or the eval; a scheduled run's
own start is the schedule's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tarry.client.evals import load_points, start_eval, wait_report
from tarry.contracts import EvalInput
from tests.cli import Cli
from tests.conftest import Agent
from tests.eval_dataset import agree_on_three, write_dataset
from tests.faults import wait_until
from tests.http_api import Api
from tests.test_http_api_people import as_
from tests.test_owners import BOB, ERIN, people_api, with_people
from tests.test_schedules import PATIENCE, Schedules, task

Acted = tuple[str, str, str]
"""A record's act, person and door."""


@pytest.fixture
async def people(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Api, Schedules]]:
    """The API with `tests.test_owners`' people (its requests alice's, erin an admin),
    and the schedules of the test, deleted at its end."""
    with_people(tmp_path, monkeypatch)
    schedules = Schedules(agent)
    async with people_api(agent) as api:
        yield api, schedules
    await schedules.close()


async def created(api: Api, schedules: Schedules) -> str:
    """A schedule alice creates through the API, once a year: its name."""
    name = schedules.name()
    body = {
        "name": name,
        "cron": "0 0 1 1 *",
        "input": json.loads(task("Check the inbox").model_dump_json()),
    }
    response = await api.http.post("/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    return name


async def trail(api: Api, count: int, token: str | None = None, **of: str) -> list[Acted]:
    """The acts of the records naming `of` (`schedule=NAME`, `eval=ID`, `run=ID`) in the
    trail as `token`'s holder (alice, by default) reads it, once it has `count` of them:
    an act's record is listed through visibility, which may lag its act."""
    found: list[dict[str, Any]] = []

    async def listed() -> bool:
        nonlocal found
        headers = as_(token) if token else {}
        response = await api.http.get("/v1/audit", headers=headers)
        assert response.status_code == 200, response.text
        records = response.json()["records"]
        found = [r for r in records if all(r.get(k) == v for k, v in of.items())]
        return len(found) >= count

    await wait_until(listed, timeout=PATIENCE, what=f"{count} records of {of}")
    return [(r["act"], r["by"], r["door"]) for r in found]


async def test_creating_a_schedule_is_recorded_as_its_creator_s(
    people: tuple[Api, Schedules],
) -> None:
    api, schedules = people

    name = await created(api, schedules)

    assert await trail(api, 1, schedule=name) == [("schedule_create", "alice", "api")]


async def test_pausing_a_schedule_is_recorded_as_the_person_who_paused_it(
    people: tuple[Api, Schedules],
) -> None:
    api, schedules = people
    name = await created(api, schedules)

    paused = await api.http.post(f"/v1/schedules/{name}/pause", json={}, headers=as_(ERIN))

    assert paused.status_code == 200, paused.text
    assert (await trail(api, 2, schedule=name))[1] == ("schedule_pause", "erin", "api")


async def test_unpausing_a_schedule_is_recorded_as_the_person_who_unpaused_it(
    people: tuple[Api, Schedules],
) -> None:
    api, schedules = people
    name = await created(api, schedules)
    await api.http.post(f"/v1/schedules/{name}/pause", json={})

    unpaused = await api.http.post(f"/v1/schedules/{name}/unpause", json={}, headers=as_(ERIN))

    assert unpaused.status_code == 200, unpaused.text
    assert (await trail(api, 3, schedule=name))[2] == ("schedule_unpause", "erin", "api")


async def test_a_trigger_is_recorded_as_its_person_s_and_its_run_starts_as_the_schedule_s(
    people: tuple[Api, Schedules],
) -> None:
    api, schedules = people
    name = await created(api, schedules)

    triggered = await api.http.post(f"/v1/schedules/{name}/trigger", json={}, headers=as_(ERIN))
    view = await schedules.until_started(schedules.tarry.schedule(name), 1)
    [run] = view.recent_runs

    assert triggered.status_code == 202, triggered.text
    assert (await trail(api, 2, schedule=name))[1] == ("schedule_trigger", "erin", "api")
    assert (await trail(api, 1, run=run))[0] == ("start", f"schedule {name}", "schedule")


async def test_deleting_a_schedule_is_recorded_as_the_person_who_deleted_it(
    people: tuple[Api, Schedules],
) -> None:
    api, schedules = people
    name = await created(api, schedules)

    deleted = await api.http.delete(f"/v1/schedules/{name}", headers=as_(ERIN))

    assert deleted.status_code == 204, deleted.text
    assert (await trail(api, 2, schedule=name))[1] == ("schedule_delete", "erin", "api")


async def test_a_schedule_s_trail_is_read_only_by_those_who_may_read_the_schedule(
    people: tuple[Api, Schedules],
) -> None:
    api, schedules = people
    name = await created(api, schedules)
    await trail(api, 1, schedule=name)  # listed for alice, so for anyone it is shown to

    response = await api.http.get("/v1/audit", headers=as_(BOB))

    assert response.status_code == 200, response.text
    assert [r for r in response.json()["records"] if r.get("schedule") == name] == []


async def test_an_eval_s_start_is_recorded_as_its_person_s(
    people: tuple[Api, Schedules], tmp_path: Path
) -> None:
    api, _ = people
    dataset = write_dataset(tmp_path / "decisions.jsonl")
    agree_on_three(api.agent.model)
    points = load_points(str(dataset), api.agent.tarry.datasets.store)
    input = EvalInput(dataset="decisions", points=points, model="default")

    handle = await start_eval(api.agent.tarry.client, api.agent.tarry.task_queue, "alice", input)
    await wait_report(handle)

    assert await trail(api, 1, eval=handle.id) == [("eval", "alice", "cli")]


async def test_tarry_audit_names_the_schedule_an_act_changed(cli: Cli, agent: Agent) -> None:
    schedules = Schedules(agent)
    schedule = await schedules.create(task("Check the inbox"), cron="0 0 1 1 *")
    table = ""

    async def shown() -> bool:
        nonlocal table
        table = await cli.ok("audit")
        return "schedule_create" in table

    try:
        await wait_until(shown, timeout=PATIENCE, what="the schedule's creation in the table")
    finally:
        await schedules.close()

    [row] = [line for line in table.splitlines() if "schedule_create" in line]
    assert f"schedule {schedule.name}" in row
    assert agent.tarry.caller.user in row
