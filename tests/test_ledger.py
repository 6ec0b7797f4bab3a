"""The spend ledger (issue 58, item 2): a person's runs share their daily cap, each
model call reserved on their ledger of the day before it is made and settled with what
it used after; at the cap a run waits (`waiting_for: budget`, `SPEND_CAP_REACHED`)
without calling, until an admin raises the cap. Another person's runs go on."""

from __future__ import annotations

import asyncio
import signal
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tarry.api import ApiServer, create_app
from tarry.client import RunHandle, Tarry
from tarry.config.settings import load_settings
from tarry.contracts import ErrorCode, Phase, RunInput, Sampling, Usage, WaitingFor
from tarry.contracts.ledger import (
    LEDGER_WORKFLOW,
    RESERVE_UPDATE,
    SETTLE_UPDATE,
    DailyCaps,
    LedgerState,
    Reservation,
    ReserveAnswer,
    Settlement,
    Spend,
    ledger_id,
)
from tarry.core.identities import Caller
from tarry.core.limits import Limits
from tarry.temporal.ledger import ledger_start
from tarry.testing.scripted_model import ScriptedModel, say
from tests.cli import Cli
from tests.conftest import FAST_TIMEOUTS, Agent, worker_process
from tests.deadline import TIMEOUT
from tests.http_api import api_client
from tests.test_http_api import error_of
from tests.waiting import until_waiting_for
from workers.plugin import workflows_passed_through
from workflows.agent_run import AgentRunWorkflow
from workflows.ledger import SpendLedger

WAITING = {Phase.WAITING_USER}
CAP = 1000
"""Alice's tokens a day: each call of hers reserves what the last read and wrote (350
tokens below) and its `max_tokens` (100)."""
SAMPLING_MAX = 100
SAMPLING = Sampling(max_tokens=SAMPLING_MAX)
RUNS = 50
FIFTY_CAP = 1_000
"""Fifty runs' first calls reserve 100 tokens each and use 50: about twenty fit."""


def used(prompt: int, completion: int) -> Usage:
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


async def start_as(agent: Agent, caller: Caller, prompt: str, **input: Any) -> RunHandle:
    tarry = agent.tarry.acting_as(caller)
    run_input = RunInput(prompt=prompt, timeouts=agent.timeouts, sampling=SAMPLING, **input)
    return await tarry.start(run_input)


def person(name: str) -> str:
    """A name of its own per test: the tests of a process share a Temporal server, and a
    person's ledger of the day is one workflow there."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


def with_cap(owner: str, cap: int = CAP) -> Caller:
    return Caller(owner, limits=Limits(max_tokens_per_day=cap))


async def ledger_of(client: Client, owner: str) -> LedgerState:
    """`owner`'s ledger of today (the only one a test's day has)."""
    query = f"WorkflowType = '{LEDGER_WORKFLOW}' AND WorkflowId STARTS_WITH 'tarry-ledger-{owner}-'"
    async for found in client.list_workflows(query):
        state: LedgerState = await client.get_workflow_handle(found.id).query(
            "state", result_type=LedgerState
        )
        return state
    raise AssertionError(f"no ledger of {owner}")


async def test_two_runs_share_a_cap_the_next_call_past_it_waits_and_a_raise_lets_both_go_on(
    agent: Agent,
) -> None:
    agent.model.add(*(say(f"answer {n}", usage=used(300, 50)) for n in range(6)))
    alice = person("alice")
    first = await start_as(agent, with_cap(alice), "one")
    await first.wait_for(WAITING, TIMEOUT)
    second = await start_as(agent, with_cap(alice), "two")
    await second.wait_for(WAITING, TIMEOUT)
    assert len(agent.model.requests) == 2  # 700 spent: the next call may take 450

    capped = [await run.send("again") for run in (first, second)]

    for state in capped:  # each waits before its call
        assert state.waiting_for is WaitingFor.BUDGET
        assert state.warning is ErrorCode.SPEND_CAP_REACHED
        assert state.error is not None
        assert f"{alice}'s daily cap" in state.error.message
    assert len(agent.model.requests) == 2  # neither called the model
    bob = await start_as(agent, with_cap(person("bob")), "hi")
    assert (await bob.wait_for(WAITING, TIMEOUT)).last_assistant_text is not None
    assert len(agent.model.requests) == 3

    await Cli.of(agent).ok("limits", "raise", alice, "--tokens", "5000")

    for run in (first, second):
        state = await until_waiting_for(run, WaitingFor.INPUT)
        assert state.warning is None
        assert [m.content for m in await run.transcript()][2] == "again"
    ledger = await ledger_of(agent.tarry.client, alice)
    assert ledger.spent.tokens == 4 * 350
    assert ledger.open == {}


async def test_a_run_without_daily_caps_touches_no_ledger(agent: Agent) -> None:
    agent.model.add(say("hello", usage=used(300, 50)))

    run = await start_as(agent, Caller(person("carol"), limits=Limits(max_concurrent_runs=3)), "hi")

    await run.wait_for(WAITING, TIMEOUT)
    history = await agent.history_json(run)
    assert "call_llm" in history
    assert "reserve_spend" not in history
    assert "settle_spend" not in history


async def test_a_worker_killed_between_reserve_and_settle_leaves_the_ledger_exact(
    temporal: Client, tmp_path: Path, payload_store: Path
) -> None:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    # The first answer is slow: the worker dies while the call is reserved, unsettled.
    steps = [say("lost", delay=30, usage=used(1, 1)), say("kept", usage=used(300, 50))]
    async with ScriptedModel(steps) as model:
        first = await worker_process(temporal, task_queue, model, tmp_path, payload_store)
        alice = person("alice")
        tarry = Tarry(temporal, task_queue, with_cap(alice, cap=100_000))
        run = await tarry.start(RunInput(prompt="hi", sampling=SAMPLING, timeouts=FAST_TIMEOUTS))
        async with asyncio.timeout(TIMEOUT):
            while not model.requests:
                await asyncio.sleep(0.05)
        assert (await ledger_of(temporal, alice)).open  # reserved, not settled
        first.send_signal(signal.SIGKILL)
        await first.wait()

        second = await worker_process(temporal, task_queue, model, tmp_path, payload_store)
        try:
            state = await run.wait_for(WAITING, TIMEOUT)
            ledger = await ledger_of(temporal, alice)
        finally:
            second.send_signal(signal.SIGTERM)
            await second.wait()

    assert state.last_assistant_text == "kept"
    assert ledger.spent.tokens == state.usage.total_tokens == 350
    assert ledger.open == {}
    replayer = Replayer(
        workflows=[AgentRunWorkflow, SpendLedger],
        data_converter=temporal.data_converter,
        workflow_runner=workflows_passed_through(None),
    )
    for workflow_id in (run.id, ledger_id(alice, ledger.day)):
        history = await temporal.get_workflow_handle(workflow_id).fetch_history()
        await replayer.replay_workflow(history)


async def test_fifty_runs_of_one_owner_at_once_spend_up_to_the_cap_and_lose_nothing(
    agent: Agent,
) -> None:
    agent.model.add(*(say("ok", usage=used(30, 20)) for _ in range(RUNS)))
    alice = person("alice")
    me = with_cap(alice, cap=FIFTY_CAP)

    runs = await asyncio.gather(*(start_as(agent, me, f"run {n}") for n in range(RUNS)))

    # Settled, each run at a stop point: answered, or waiting at the cap.
    async with asyncio.timeout(TIMEOUT):
        while True:
            await asyncio.sleep(1)
            states = await asyncio.gather(*(run.state() for run in runs))
            if any(s.phase is not Phase.WAITING_USER for s in states):
                continue
            ledger = await ledger_of(agent.tarry.client, alice)
            if not ledger.open and ledger.spent.tokens == sum(s.usage.total_tokens for s in states):
                break
    answered = [s for s in states if s.last_assistant_text == "ok"]
    capped = [s for s in states if s.warning is ErrorCode.SPEND_CAP_REACHED]
    assert len(answered) + len(capped) == RUNS
    assert capped  # the cap held some back
    assert ledger.spent.tokens <= FIFTY_CAP + SAMPLING_MAX
    assert ledger.spent.tokens == 50 * len(answered)


API_CONFIG = """
[api]
admins = ["erin"]

[api.users]
{alice} = "alice-token-0123456789"
erin = "erin-token-0123456789a"

[limits.default]
max_tokens_per_day = 1000
"""


async def test_a_run_started_through_the_api_waits_at_its_caller_s_cap_until_an_admin_raises_it(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run names no `max_tokens`: its call may take 4,096 tokens, past alice's 1,000."""
    config = tmp_path / "tarry.toml"
    alice = person("alice")
    config.write_text(API_CONFIG.format(alice=alice))
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    agent.model.add(say("hello", usage=used(300, 50)))
    app = create_app(agent.tarry, load_settings())
    async with ApiServer(app, "127.0.0.1", 0) as server:
        async with api_client(server.url, "alice-token-0123456789") as alice_http:
            run_id = (await alice_http.post("/v1/runs", json={"prompt": "hi"})).json()["id"]
            capped = await agent.tarry.get(run_id).wait_for(WAITING, TIMEOUT)
            refused = await alice_http.post(f"/v1/limits/{alice}/raise", json={"max_tokens": 5000})
        async with api_client(server.url, "erin-token-0123456789a") as erin_http:
            raised = await erin_http.post(f"/v1/limits/{alice}/raise", json={"max_tokens": 5000})
    answered = await until_waiting_for(agent.tarry.get(run_id), WaitingFor.INPUT)

    assert capped.waiting_for is WaitingFor.BUDGET
    assert error_of(refused) == (403, ErrorCode.NOT_ALLOWED)
    assert raised.status_code == 200
    assert raised.json()["raised"]["max_tokens"] == 5000
    assert answered.last_assistant_text == "hello"
    assert (await ledger_of(agent.tarry.client, alice)).spent.tokens == 350


async def test_a_reservation_never_settled_lapses_and_a_late_settlement_still_counts(
    agent: Agent,
) -> None:
    client, now = agent.tarry.client, datetime.now(UTC)
    dave = person("dave")
    caps = DailyCaps(owner=dave, max_tokens=1000)
    lost = Reservation(
        run_id="run-terminated", call=1, caps=caps, amount=Spend(tokens=900),
        expires=now + timedelta(seconds=2),
    )  # fmt: skip
    start = ledger_start(dave, "UTC", agent.tarry.task_queue, now)
    await client.execute_update_with_start_workflow(
        RESERVE_UPDATE, lost, start_workflow_operation=start, result_type=ReserveAnswer
    )
    ledger = client.get_workflow_handle(ledger_id(dave, now.date()))

    async with asyncio.timeout(TIMEOUT):
        while (await ledger.query("state", result_type=LedgerState)).open:
            await asyncio.sleep(0.2)
    late = Settlement(ledger=ledger.id, run_id="run-terminated", call=1, used=Spend(tokens=40))
    await ledger.execute_update(SETTLE_UPDATE, late, result_type=ReserveAnswer)
    await ledger.execute_update(SETTLE_UPDATE, late, result_type=ReserveAnswer)  # a repeat

    assert (await ledger.query("state", result_type=LedgerState)).spent.tokens == 40
