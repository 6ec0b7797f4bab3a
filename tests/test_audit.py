"""The audit trail: every act that changes a run is one record of who, when, through
which door and what, kept in the run's own history and read back through the HTTP API
(`GET /v1/audit`), `tarry audit` and the client, across the run's whole chain."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tarry.api import ApiServer, create_app
from tarry.api.auth import DOOR_HEADER
from tarry.client import RunHandle
from tarry.config.settings import TarrySettings
from tarry.contracts import TEMPORAL_UI, AuditRecord, ErrorCode, Phase, ReplyPolicy, WaitingFor
from tarry.testing.scripted_model import ScriptedToolCall, calls, say
from tests.cli import Cli, agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api, api_client
from tests.test_approval_rules import NOTES_FREE
from tests.test_approvals import WRITE, gated_run
from tests.test_http_api import error_of, until_stopped
from tests.test_http_api_people import as_
from tests.test_owners import ERIN, people_api, with_people
from tests.test_stuck_runs import REASON, stuck  # noqa: F401 - a fixture
from workflows.audit import RECORDS_PER_SEGMENT

ALICE = "alice-token-0123456789"
BEA = "bea-token-0123456789ab"
WAITING = {Phase.WAITING_USER}
NOTE = {"path": "notes/a.md", "content": "x"}
APPROVE_W1 = {"call_id": "w1", "approved": True}


@pytest.fixture
async def api(agent: Agent) -> AsyncIterator[Api]:
    """The API with two people, alice and bea; its requests are alice's unless they send
    bea's token."""
    tokens = [SecretStr(f"alice:{ALICE}"), SecretStr(f"bea:{BEA}")]
    settings = TarrySettings.model_construct(tarry_api_tokens=tokens)
    async with (
        ApiServer(create_app(agent.tarry, settings), "127.0.0.1", 0) as server,
        api_client(server.url, ALICE) as http,
    ):
        yield Api(http, agent, server.url)


def acts(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(act, by, door) of each record."""
    return [(r["act"], r["by"], r["door"]) for r in records]


async def audit_of(api: Api, **query: str) -> list[dict[str, Any]]:
    response = await api.http.get("/v1/audit", params=query)
    assert response.status_code == 200, response.text
    records: list[dict[str, Any]] = response.json()["records"]
    return records


async def test_each_act_on_a_run_is_one_record_with_its_person_and_door(
    api: Api, agent: Agent
) -> None:
    bea = {"Authorization": f"Bearer {BEA}", DOOR_HEADER: "inbox"}
    agent.model.add(
        say("What shall I write?"),
        calls(
            ScriptedToolCall(name="write_file", arguments=NOTE, id="n1"),
            ScriptedToolCall(name="write_file", arguments=WRITE, id="w1"),
        ),
        say("Both written."),
    )
    # Handed over after every turn: the trail is read across the run's segments.
    run_id = await api.start(
        "take notes",
        require_approval=["write_file"],
        approval_rules=[NOTES_FREE],
        budget={"max_total_tokens": 10**6},
        continue_as_new_after_turns=1,
        share={"bea": "write"},
    )
    await until_stopped(api, run_id)

    replied = await api.http.post(
        f"/v1/runs/{run_id}/messages", json={"text": "a plan"}, headers=bea
    )
    assert replied.status_code == 202, replied.text
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.APPROVAL
    decided = await api.http.post(f"/v1/runs/{run_id}/approvals", json=APPROVE_W1)
    assert decided.status_code == 200, decided.text
    cli = Cli(agent_env(agent) | {"TARRY_USER": "carl"}, agent)
    await cli.ok("budget", run_id, "--tokens", str(2 * 10**6))
    stopped = await api.http.post(
        f"/v1/runs/{run_id}/stop",
        json={"reason": "done"},
        headers={"Authorization": f"Bearer {BEA}"},
    )
    assert stopped.status_code == 202, stopped.text
    await api.run(run_id).wait_for({Phase.COMPLETED}, TIMEOUT)

    records = await audit_of(api, run=run_id)
    printed = await cli.ok("audit", "--run", run_id, "--json")
    table = await cli.ok("audit", "--run", run_id)

    assert acts(records) == [
        ("start", "alice", "api"),
        ("reply", "bea", "inbox"),
        ("decision", "rule 1", "rule"),
        ("decision", "alice", "api"),
        ("budget", "carl", "cli"),
        ("stop", "bea", "api"),
    ]
    assert {r["run"] for r in records} == {run_id}
    assert [r["at"] for r in records] == sorted(r["at"] for r in records)
    assert records[2]["what"] == "approved write_file call n1"
    assert records[3]["what"] == "approved write_file call w1"
    assert records[4]["what"] == "budget set to max_total_tokens=2000000"
    assert records[5]["what"] == "stopped: done"
    # `--json`: JSON lines, one record each, the records the API answers.
    assert [json.loads(line) for line in printed.splitlines()] == records
    lines = table.splitlines()
    assert len(lines) == 1 + len(records)
    assert all(run_id in line for line in lines[1:])
    assert lines[5].split()[2:5] == ["budget", "carl", "cli"]


async def test_the_audit_reads_across_runs_by_person_and_time(api: Api, agent: Agent) -> None:
    bea = {"Authorization": f"Bearer {BEA}"}
    agent.model.add(say("one"), say("two"), say("three"))
    first = await api.start("first")
    await until_stopped(api, first)
    since = datetime.fromisoformat((await audit_of(api, run=first))[0]["at"])
    second = await api.start("second", share={"bea": "write"})
    await until_stopped(api, second)
    replied = await api.http.post(f"/v1/runs/{second}/messages", json={"text": "hi"}, headers=bea)
    assert replied.status_code == 202, replied.text

    # Other tests' runs share the server: only these two are looked at.
    ours = {first, second}
    by_bea = await audit_of(api, user="bea", since=since.isoformat())
    later = await audit_of(api, since=(since + timedelta(microseconds=1)).isoformat())

    assert [(r["run"], r["act"]) for r in by_bea if r["run"] in ours] == [(second, "reply")]
    assert [(r["run"], r["act"]) for r in later if r["run"] in ours] == [
        (second, "start"),
        (second, "reply"),
    ]


async def test_a_signal_from_outside_tarry_is_recorded_at_the_temporal_ui_door(
    agent: Agent,
) -> None:
    agent.model.add(say("hello"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    handle = agent.tarry.client.get_workflow_handle(run.id)

    # As the Temporal UI sends them: no `by`, no door; an update with the bare profile.
    await handle.execute_update("set_model", "default")
    await handle.signal("stop", {"reason": "from the UI"})
    await run.wait_for({Phase.COMPLETED}, TIMEOUT)

    records = (await agent.tarry.audit(run=run.id)).records

    assert [(r.act, r.by, r.door) for r in records][1:] == [
        ("model", TEMPORAL_UI, TEMPORAL_UI),
        ("stop", TEMPORAL_UI, TEMPORAL_UI),
    ]


async def test_a_segment_full_of_acts_hands_over_and_its_trail_stays_whole(
    agent: Agent,
) -> None:
    agent.model.add(say("hello"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    # Acts that take no turn: only the trail's own bound hands the run over.
    for n in range(RECORDS_PER_SEGMENT + 5):
        await run.set_reply_policy(ReplyPolicy.INTERRUPT if n % 2 else ReplyPolicy.QUEUE)
    handle = agent.tarry.client.get_workflow_handle(run.id)
    current: list[AuditRecord] = await handle.query("audit", result_type=list[AuditRecord])
    records = (await agent.tarry.audit(run=run.id)).records
    segments = await agent.histories(run)

    assert len(segments) == 2
    assert len(current) < RECORDS_PER_SEGMENT  # the memory holds one segment's
    assert [r.act for r in records] == ["start"] + ["reply_policy"] * (RECORDS_PER_SEGMENT + 5)
    assert {r.by for r in records} == {agent.tarry.caller.user}


async def test_the_audit_of_a_run_there_is_not_is_run_not_found(api: Api) -> None:
    response = await api.http.get("/v1/audit", params={"run": "no-such-run"})

    assert error_of(response) == (404, ErrorCode.RUN_NOT_FOUND)


async def test_a_decision_on_a_gated_call_records_the_decider(agent: Agent) -> None:
    run = await gated_run(agent, say("Written."))

    await run.decide("w1", approved=False, reason="not now")
    records = (await agent.tarry.audit(run=run.id)).records

    assert records[-1].what == "rejected write_file call w1: not now"
    assert (records[-1].by, records[-1].door) == (agent.tarry.caller.user, "cli")


async def test_a_reply_sent_again_with_its_id_is_queued_and_recorded_once(agent: Agent) -> None:
    agent.model.add(say("Hello."), say("Noted."))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    # Two updates (`reply`, then `send`), one message: the inbox knows it by its id.
    await run.reply("remember the milk", id="milk-1")
    await run.send("remember the milk", id="milk-1")
    records = (await agent.tarry.audit(run=run.id)).records

    assert [r.act for r in records] == ["start", "reply"]
    assert records[1].what == "reply 2 (17 characters)"
    users = [m.content for m in await run.transcript() if m.role == "user"]
    assert users == ["hi", "remember the milk"]


# --- Runs the audit cannot read ------------------------------------------------------


async def test_a_stuck_run_is_named_unread_and_the_audit_answers_for_the_others(
    stuck: tuple[Agent, RunHandle],  # noqa: F811 - the fixture, imported
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent, stuck_run = stuck
    agent.model.add(say("hello"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    with_people(tmp_path, monkeypatch)

    async with people_api(agent) as api:  # an admin's read: every run
        response = await api.http.get("/v1/audit", headers=as_(ERIN))

    assert response.status_code == 200, response.text
    answer = response.json()
    assert [(r["run"], r["act"]) for r in answer["records"]] == [(run.id, "start")]
    [unread] = answer["unread"]
    assert unread["run"] == stuck_run.id
    assert REASON in unread["reason"]


async def test_runs_whose_worker_is_gone_are_named_unread_and_ended_ones_still_answer(
    agent: Agent,
) -> None:
    agent.model.add(say("hello"), say("hello"), say("hello"))
    ended, waiting, terminated = [await agent.start("hi") for _ in range(3)]
    for run in (ended, waiting, terminated):
        await run.wait_for(WAITING, TIMEOUT)
    await ended.stop()
    async with asyncio.timeout(TIMEOUT):
        await ended.result()
    await agent.tarry.client.get_workflow_handle(terminated.id).terminate("by an operator")
    await agent.stop_worker()

    trail = await agent.tarry.audit()

    assert {(r.run, r.act) for r in trail.records} == {(ended.id, "start"), (ended.id, "stop")}
    assert {u.run for u in trail.unread} == {waiting.id, terminated.id}


async def test_tarry_audit_warns_of_a_stuck_run_and_prints_the_others(
    stuck: tuple[Agent, RunHandle],  # noqa: F811 - the fixture, imported
) -> None:
    agent, stuck_run = stuck
    agent.model.add(say("hello"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    result = await Cli.of(agent)("audit", "--json")

    assert result.code == 0, result
    assert [json.loads(line)["run"] for line in result.out.splitlines()] == [run.id]
    assert result.err.startswith(f"warning: run {stuck_run.id} left out: "), result.err
    assert REASON in result.err
