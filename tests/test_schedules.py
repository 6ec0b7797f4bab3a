"""Runs that start on their own: Temporal Schedules on the session's dev
server (the Java time-skipping test server has no schedules), with intervals of a
second, served by the test's worker; through the client, the command line and the API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path

import pytest
from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleSpec

from tarry.client import ScheduleHandle, Tarry, TarryError
from tarry.client.run_list import RunRow, find_runs
from tarry.client.schedules import (
    MAX_SCHEDULE_NAME_LENGTH,
    SCHEDULED_BY_ATTRIBUTE,
    Overlap,
    ScheduleView,
)
from tarry.contracts import ErrorCode, Mode, Phase, RunInput, run_id_problem
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import FAST_TIMEOUTS, Agent
from tests.deadline import TIMEOUT, deadline
from tests.faults import wait_until
from tests.http_api import serving
from tests.test_mcp_server import mcp_client, use

SCHEDULED_ID = re.compile(r"^(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
"""A scheduled run's id: the schedule's name and the time Temporal started it, in UTC."""
COMMANDS = {"pause": "paused", "unpause": "unpaused", "trigger": "triggered", "delete": "deleted"}
"""The schedule commands that change it, and the word each says it with."""
PATIENCE = deadline(60)
"""How long a schedule of one second may take to do what it does, on a loaded machine."""
QUIET = 3.0
"""Seconds a paused schedule is watched for a run it should not start: three intervals."""


def task(prompt: str) -> RunInput:
    """A run that ends with its first answer, so the next time starts another."""
    return RunInput(prompt=prompt, mode=Mode.TASK, timeouts=FAST_TIMEOUTS)


def chat(prompt: str) -> RunInput:
    """A run that waits for a person after its first answer."""
    return RunInput(prompt=prompt, timeouts=FAST_TIMEOUTS)


class Schedules:
    """Creates the test's schedules under fresh names and deletes them afterwards, and
    hands their runs to the agent's replay check."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.tarry: Tarry = agent.tarry
        self.names: list[str] = []
        # Enough answers for every run a schedule of one second starts in a test.
        agent.model.add(*[say("Done.")] * 200)

    def name(self, stem: str = "digest") -> str:
        name = f"{stem}-{uuid.uuid4().hex[:6]}"
        self.names.append(name)
        return name

    async def create(
        self,
        input: RunInput,
        *,
        cron: str | None = None,
        every: str | None = None,
        time_zone: str | None = None,
    ) -> ScheduleHandle:
        return await self.tarry.create_schedule(
            self.name(), input, cron=cron, every=every, time_zone=time_zone
        )

    async def runs(self, name: str) -> list[RunRow]:
        page = await find_runs(self.tarry.client, schedule=name, limit=100)
        return page.rows

    async def until_started(self, schedule: ScheduleHandle, count: int) -> ScheduleView:
        """The schedule's view once it has started `count` runs."""
        view: ScheduleView | None = None

        async def started() -> bool:
            nonlocal view
            view = await schedule.describe()
            return view.runs_started >= count

        await wait_until(started, timeout=PATIENCE, what=f"{count} runs of {schedule.name}")
        assert view is not None
        return view

    async def until_listed(self, name: str, count: int) -> list[RunRow]:
        """The schedule's runs once visibility lists `count` of them."""
        rows: list[RunRow] = []

        async def listed() -> bool:
            nonlocal rows
            rows = await self.runs(name)
            return len(rows) >= count

        await wait_until(listed, timeout=PATIENCE, what=f"{count} runs of {name} listed")
        return rows

    async def close(self) -> None:
        for name in self.names:
            schedule = self.tarry.schedule(name)
            try:
                await schedule.delete()
            except TarryError as e:
                if e.code is not ErrorCode.SCHEDULE_NOT_FOUND:  # the test deleted it
                    raise
            for row in await self.runs(name):
                run = self.tarry.get(row.run_id)
                self.agent.runs.append(run)
                with contextlib.suppress(TarryError):  # one that ended meanwhile
                    await run.stop("the test is over")


@pytest.fixture
async def schedules(agent: Agent) -> AsyncIterator[Schedules]:
    made = Schedules(agent)
    yield made
    await made.close()


async def until_paused(schedule: ScheduleHandle) -> ScheduleView:
    """The view once the schedule has taken the pause in (Temporal's scheduler workflow
    reads it as a signal, a moment after the call returns)."""
    view: ScheduleView | None = None

    async def paused() -> bool:
        nonlocal view
        view = await schedule.describe()
        return view.paused

    await wait_until(paused, timeout=PATIENCE, what=f"{schedule.name} paused")
    assert view is not None
    return view


# --- The client ---------------------------------------------------------------------


async def test_a_schedule_starts_runs_named_after_it_that_carry_its_name(
    schedules: Schedules,
) -> None:
    schedule = await schedules.create(task("Write the morning digest"), every="1s")

    rows = await schedules.until_listed(schedule.name, 2)

    for row in rows:
        match = SCHEDULED_ID.fullmatch(row.run_id)
        assert match is not None, row.run_id
        assert match["name"] == schedule.name
        assert run_id_problem(row.run_id) is None
        assert row.schedule == schedule.name
        assert row.summary == "Write the morning digest"


async def test_a_scheduled_run_keeps_its_schedules_name_across_continue_as_new(
    schedules: Schedules,
) -> None:
    input = chat("Draft the weekly report").model_copy(update={"continue_as_new_after_turns": 1})
    schedule = await schedules.create(input, every="1s")
    [row] = await schedules.until_listed(schedule.name, 1)
    run = schedules.tarry.get(row.run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    await run.send("Shorter, please")
    description = await run.describe()

    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    assert description.typed_search_attributes.get(SCHEDULED_BY_ATTRIBUTE) == schedule.name


async def test_a_scheduled_run_starts_with_the_schedules_input(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Write the morning digest"), every="1s")

    row = (await schedules.until_listed(schedule.name, 1))[-1]

    run = schedules.tarry.get(row.run_id)
    result = await run.result()
    assert (result.phase, result.output) == (Phase.COMPLETED, "Done.")
    assert [m.content for m in await run.transcript() if m.role == "user"] == [
        "Write the morning digest"
    ]


async def test_a_schedule_skips_while_its_last_run_waits_for_a_person(
    schedules: Schedules,
) -> None:
    schedule = await schedules.create(chat("Draft the weekly report"), every="1s")
    [row] = await schedules.until_listed(schedule.name, 1)
    await schedules.tarry.get(row.run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)

    async def skipped_twice() -> bool:
        return (await schedule.describe()).runs_skipped >= 2

    await wait_until(skipped_twice, timeout=PATIENCE, what="two times skipped")
    view = await schedule.describe()
    assert (view.runs_started, view.running) == (1, [row.run_id])


async def test_a_schedule_starts_the_next_run_once_the_waiting_one_ends(
    schedules: Schedules,
) -> None:
    schedule = await schedules.create(chat("Draft the weekly report"), every="1s")
    [row] = await schedules.until_listed(schedule.name, 1)
    first = schedules.tarry.get(row.run_id)
    await first.wait_for({Phase.WAITING_USER}, TIMEOUT)

    await first.stop("signed off")

    view = await schedules.until_started(schedule, 2)
    assert row.run_id not in view.running


async def test_a_paused_schedule_starts_no_runs_until_unpaused(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Check the inbox"), every="1s")
    await schedules.until_started(schedule, 1)

    await schedule.pause("on holiday")
    paused = await until_paused(schedule)
    await asyncio.sleep(QUIET)  # a negative: three of its times pass, none starts a run

    assert (paused.paused, paused.note) == (True, "on holiday")
    assert (await schedule.describe()).runs_started == paused.runs_started
    await schedule.unpause()
    await schedules.until_started(schedule, paused.runs_started + 1)


async def test_trigger_starts_a_run_now(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Check the inbox"), cron="0 0 1 1 *")

    await schedule.trigger()

    view = await schedules.until_started(schedule, 1)
    assert SCHEDULED_ID.fullmatch(view.recent_runs[0])


async def test_a_timed_run_s_start_is_audited_at_the_schedule_door_as_the_schedule_s(
    schedules: Schedules,
) -> None:
    schedule = await schedules.create(task("Check the inbox"), every="1s")

    view = await schedules.until_started(schedule, 1)
    start, *_ = (await schedules.tarry.audit(run=view.recent_runs[0])).records

    assert (start.act, start.by, start.door) == ("start", f"schedule {schedule.name}", "schedule")


async def test_a_run_started_by_hand_cannot_take_the_id_of_a_schedule_s_run(
    schedules: Schedules,
) -> None:
    """Temporal drops a firing whose id a run has taken without a trace (no run started,
    none skipped): the id of each next firing is refused at every start."""
    schedule = await schedules.create(task("Check the inbox"), cron="0 0 1 1 *")
    [next_run, *_] = (await schedule.describe()).next_runs
    taken = f"{schedule.name}-{next_run.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"

    with pytest.raises(TarryError) as refused:
        await schedules.agent.tarry.start(task("Check the inbox"), run_id=taken)

    assert refused.value.code is ErrorCode.RUN_ID_INVALID
    assert "an id a schedule gives its run" in refused.value.message
    assert SCHEDULED_ID.fullmatch(taken)


async def test_a_first_message_does_not_start_a_run_under_a_schedule_s_next_id(
    schedules: Schedules,
) -> None:
    """Get-or-create goes on with a schedule's run, and never starts one in its place."""
    schedule = await schedules.create(task("Check the inbox"), cron="0 0 1 1 *")
    [next_run, *_] = (await schedule.describe()).next_runs
    taken = f"{schedule.name}-{next_run.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"

    with pytest.raises(TarryError) as refused:
        await schedules.agent.tarry.send(taken, "hello", start=task("Check the inbox"))

    assert refused.value.code is ErrorCode.RUN_NOT_FOUND


async def test_a_deleted_schedule_is_gone_and_its_runs_remain(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Check the inbox"), every="1s")
    await schedules.until_listed(schedule.name, 1)

    await schedule.delete()

    with pytest.raises(TarryError) as raised:
        await schedule.describe()
    assert raised.value.code is ErrorCode.SCHEDULE_NOT_FOUND
    assert await schedules.runs(schedule.name)


async def test_a_schedule_shows_when_and_what_it_starts(schedules: Schedules) -> None:
    schedule = await schedules.create(
        task("Write the morning digest"), cron="0 9 * * 1-5", time_zone="Europe/Berlin"
    )

    view = await schedule.describe()

    assert (view.cron, view.every, view.time_zone) == ("0 9 * * 1-5", None, "Europe/Berlin")
    assert view.overlap == Overlap.SKIP
    assert view.input.prompt == "Write the morning digest"
    assert view.input.mode is Mode.TASK
    assert len(view.next_runs) > 1
    assert all(t.weekday() < 5 for t in view.next_runs)
    assert (view.paused, view.runs_started, view.recent_runs) == (False, 0, [])


async def test_list_schedules_shows_a_new_schedule(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Write the morning digest"), every="1h")

    async def listed() -> bool:
        return schedule.name in {s.name for s in await schedules.tarry.list_schedules()}

    await wait_until(listed, timeout=PATIENCE, what="the schedule listed")
    [summary] = [s for s in await schedules.tarry.list_schedules() if s.name == schedule.name]
    assert (summary.every, summary.summary) == ("1h", "Write the morning digest")


async def test_a_schedule_name_taken_is_refused(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Check the inbox"), every="1h")

    with pytest.raises(TarryError) as raised:
        await schedules.tarry.create_schedule(schedule.name, task("Other"), every="1h")

    assert raised.value.code is ErrorCode.SCHEDULE_EXISTS
    assert (await schedule.describe()).input.prompt == "Check the inbox"


@pytest.mark.parametrize(
    ("timing", "says"),
    [
        ({}, "a cron expression or an interval"),
        ({"cron": "0 9 * * *", "every": "1h"}, "not both"),
        ({"every": "an hour"}, "not an interval"),
        ({"every": "0s"}, "a second or more"),
        ({"cron": "0 25 * * *"}, "Hour is not in range"),
        ({"cron": "0 9 * * *", "time_zone": "Mars/Olympus"}, "unknown time zone"),
    ],
)
async def test_a_timing_temporal_cannot_keep_is_refused(
    schedules: Schedules, timing: dict[str, str], says: str
) -> None:
    with pytest.raises(TarryError) as raised:
        await schedules.create(task("Check the inbox"), **timing)

    assert raised.value.code is ErrorCode.SCHEDULE_INVALID
    assert says in raised.value.message


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "x" * (MAX_SCHEDULE_NAME_LENGTH + 1)])
async def test_a_name_outside_the_run_id_rule_is_refused(agent: Agent, name: str) -> None:
    with pytest.raises(TarryError) as raised:
        await agent.tarry.create_schedule(name, task("Check the inbox"), every="1h")

    assert raised.value.code is ErrorCode.SCHEDULE_INVALID


async def test_an_unknown_schedule_is_not_found(agent: Agent) -> None:
    with pytest.raises(TarryError) as raised:
        await agent.tarry.schedule("nobody-made-this").pause()

    assert raised.value.code is ErrorCode.SCHEDULE_NOT_FOUND


async def test_a_schedule_of_other_workflows_is_not_tarrys_to_touch(agent: Agent) -> None:
    client = agent.tarry.client
    name = f"other-{uuid.uuid4().hex[:6]}"
    action = ScheduleActionStartWorkflow("Billing", id=name, task_queue="billing")
    spec = ScheduleSpec(cron_expressions=["0 0 1 1 *"])
    other = await client.create_schedule(name, Schedule(action=action, spec=spec))

    with pytest.raises(TarryError) as raised:
        await agent.tarry.schedule(name).delete()

    assert raised.value.code is ErrorCode.SCHEDULE_NOT_FOUND
    assert (await other.describe()).id == name
    await other.delete()


# --- The command line ---------------------------------------------------------------


async def test_the_command_line_creates_shows_pauses_and_deletes_a_schedule(
    schedules: Schedules,
) -> None:
    cli = Cli.of(schedules.agent)
    name = schedules.name()

    created = json.loads(
        await cli.ok(
            "schedule", "create", name, "--every", "1s", "--mode", "task", "--max-turns", "3",
            "--json", "Check the inbox",
        )
    )  # fmt: skip
    await schedules.until_listed(name, 1)
    await cli.ok("schedule", "pause", name, "--note", "on holiday")
    shown = json.loads(await cli.ok("schedule", "show", name, "--json"))
    await cli.ok("schedule", "delete", name)
    gone = await cli("schedule", "show", name)

    assert (created["every"], created["input"]["max_turns"]) == ("1s", 3)
    assert (shown["paused"], shown["note"]) == (True, "on holiday")
    gone.assert_one_error_line(f"error: {ErrorCode.SCHEDULE_NOT_FOUND}")


async def test_a_schedule_from_the_command_line_starts_its_runs_with_its_approval_rules(
    schedules: Schedules,
) -> None:
    cli = Cli.of(schedules.agent)
    name = schedules.name()

    created = json.loads(
        await cli.ok(
            "schedule", "create", name, "--every", "1h",
            "--rule", "write_file:/path=notes/*:approve", "--json", "Tidy the notes",
        )
    )  # fmt: skip
    await cli.ok("schedule", "delete", name)

    assert created["input"]["approval_rules"] == [
        {"tool": "write_file", "when": {"/path": "notes/*"}, "decision": "approve", "reason": None}
    ]


async def test_tarry_list_schedule_shows_the_schedules_runs(schedules: Schedules) -> None:
    cli = Cli.of(schedules.agent)
    schedule = await schedules.create(task("Check the inbox"), every="1s")
    await schedules.create(task("Something else"), every="1s")
    await schedules.until_listed(schedule.name, 1)

    listed = json.loads(await cli.ok("list", "--schedule", schedule.name, "--json"))

    assert listed
    assert {row["schedule"] for row in listed} == {schedule.name}


async def test_the_command_line_lists_schedules(schedules: Schedules) -> None:
    cli = Cli.of(schedules.agent)
    schedule = await schedules.create(task("Write the morning digest"), cron="0 9 * * 1-5")

    async def listed() -> bool:
        return schedule.name in await cli.ok("schedule", "list")

    await wait_until(listed, timeout=PATIENCE, what="the schedule listed")
    [line] = [
        line for line in (await cli.ok("schedule", "list")).splitlines() if schedule.name in line
    ]
    assert "0 9 * * 1-5" in line
    assert "Write the morning digest" in line


async def test_each_schedule_command_says_in_one_line_what_it_did(schedules: Schedules) -> None:
    cli = Cli.of(schedules.agent)
    name = schedules.name("a-schedule-whose-name-is-long-enough-to-wrap-a-line-of-80")
    cron = ("--cron", "30 9 * * *", "--time-zone", "Europe/Berlin")

    created = await cli.ok("schedule", "create", name, *cron, "--mode", "task", "Digest")
    said = [await cli.ok("schedule", command, name) for command in COMMANDS]

    next_run = r"\d{4}-\d\d-\d\d 09:30:00 Europe/Berlin"  # 09:30 in Berlin, not 07:30 UTC
    assert re.fullmatch(f"schedule {name} created; next run at {next_run}\n", created), created
    assert said == [f"{done} schedule {name}\n" for done in COMMANDS.values()]


async def test_the_command_line_refuses_a_bad_name_before_connecting(agent: Agent) -> None:
    cli = Cli.of(agent, TEMPORAL_ADDRESS="127.0.0.1:1")

    result = await cli("schedule", "pause", "a/b")

    result.assert_one_error_line(f"error: {ErrorCode.SCHEDULE_INVALID}")
    assert result.code == 2


async def test_the_command_line_says_what_is_wrong_with_a_timing(schedules: Schedules) -> None:
    cli = Cli.of(schedules.agent)

    result = await cli("schedule", "create", schedules.name(), "--every", "soon", "Hi")

    result.assert_one_error_line(f"error: {ErrorCode.SCHEDULE_INVALID}: every 'soon'")


# --- The HTTP API -------------------------------------------------------------------


async def test_the_api_creates_lists_pauses_triggers_and_deletes_a_schedule(
    schedules: Schedules,
) -> None:
    name = schedules.name()
    body = {
        "name": name,
        "every": "1s",
        "input": json.loads(task("Check the inbox").model_dump_json()),
    }
    async with serving(schedules.agent) as api:
        created = await api.http.post("/v1/schedules", json=body)
        await schedules.until_listed(name, 1)
        runs = await api.http.get("/v1/runs", params={"schedule": name})
        paused = await api.http.post(f"/v1/schedules/{name}/pause", json={"note": "on holiday"})
        triggered = await api.http.post(f"/v1/schedules/{name}/trigger", json={})
        deleted = await api.http.delete(f"/v1/schedules/{name}")
        gone = await api.http.get(f"/v1/schedules/{name}")

    assert created.status_code == 201, created.text
    assert created.json()["name"] == name
    assert runs.status_code == 200
    assert {run["schedule"] for run in runs.json()["runs"]} == {name}
    assert (paused.json()["paused"], paused.json()["note"]) == (True, "on holiday")
    assert triggered.status_code == 202
    assert deleted.status_code == 204
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "SCHEDULE_NOT_FOUND")


async def test_the_api_lists_schedules(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Write the morning digest"), every="1h")
    async with serving(schedules.agent) as api:

        async def listed() -> bool:
            response = await api.http.get("/v1/schedules")
            return schedule.name in {s["name"] for s in response.json()["schedules"]}

        await wait_until(listed, timeout=PATIENCE, what="the schedule listed")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "a/b", "every": "1h"}, 422, "SCHEDULE_INVALID"),
        ({"name": "ok", "cron": "0 25 * * *"}, 422, "SCHEDULE_INVALID"),
        ({"name": "ok", "cron": "0 9 * * *", "every": "1h"}, 422, "SCHEDULE_INVALID"),
        ({"name": "ok"}, 422, "SCHEDULE_INVALID"),
    ],
)
async def test_the_api_refuses_a_schedule_it_cannot_keep(
    agent: Agent, body: dict[str, str], status: int, code: str
) -> None:
    async with serving(agent) as api:
        response = await api.http.post("/v1/schedules", json={**body, "input": {"prompt": "Hi"}})

    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


@pytest.mark.parametrize("path", ["/v1/schedules/.hidden", "/v1/runs?schedule=a%27b"])
async def test_the_api_refuses_a_name_outside_the_rule_wherever_it_comes(
    agent: Agent, path: str
) -> None:
    async with serving(agent) as api:
        response = await api.http.get(path)

    assert (response.status_code, response.json()["error"]["code"]) == (422, "SCHEDULE_INVALID")


async def test_the_api_refuses_a_name_taken(schedules: Schedules) -> None:
    schedule = await schedules.create(task("Check the inbox"), every="1h")
    async with serving(schedules.agent) as api:
        body = {"name": schedule.name, "every": "1h", "input": {"prompt": "Hi"}}
        response = await api.http.post("/v1/schedules", json=body)

    assert (response.status_code, response.json()["error"]["code"]) == (409, "SCHEDULE_EXISTS")


# --- MCP ------------------------------------------------------------------------------


async def test_mcp_lists_the_schedules_and_a_schedules_runs(
    schedules: Schedules, payload_store: Path
) -> None:
    schedule = await schedules.create(task("Check the inbox"), every="1s")
    await schedules.create(task("Something else"), every="1s")
    await schedules.until_listed(schedule.name, 1)

    async with mcp_client(schedules.agent, payload_store) as client:
        listed = await use(client, "list_schedules")
        runs = await use(client, "list_runs", schedule=schedule.name)

    assert schedule.name in {s["name"] for s in listed}
    assert runs
    assert {row["schedule"] for row in runs} == {schedule.name}


async def test_mcp_list_runs_refuses_a_name_outside_the_rule(
    agent: Agent, payload_store: Path
) -> None:
    async with mcp_client(agent, payload_store) as client:
        result = await client.call_tool("list_runs", {"schedule": "a'b"})

    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["code"] == "SCHEDULE_INVALID"
