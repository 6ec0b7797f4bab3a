"""The dev server stopped (SIGTERM, or SIGKILL: a crash) and started again on the same
SQLite file and ports: every run it held finishes with its exact transcript, and the
workers (a process of its own, and one inside the test's process) reconnect by
themselves. Each kind of worker has a task queue of its own, so a run on a queue
finishes only if that worker came back."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Worker

from tarry.cli.processes import DevServer, WorkerProcess
from tarry.client import RunHandle, Tarry
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.contracts import ChatMessage, Phase, RunInput, RunState
from tests.deadline import TIMEOUT, deadline
from tests.faults import (
    API_KEY,
    CRASH_TIMEOUTS,
    FunctionModel,
    Reply,
    answers_since_user,
    assert_transcript,
    assistant,
    call_id,
    calling,
    check_replay,
    connect,
    eventually,
    fault_worker,
    last_user_text,
    tool_call,
    tool_ok,
    user,
    written,
)
from workers.plugin import TarryPlugin

SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGKILL, id="SIGKILL")]


def answer(messages: list[dict[str, Any]]) -> Reply:
    """`go NAME`: write NAME.txt, then say `ready NAME` (held, for runs to restart in);
    `finish`: finish with `done NAME`."""
    name = messages[0]["content"].removeprefix("go ")
    if last_user_text(messages) == "finish":
        return Reply(calls=[("finish", {"result": f"done {name}"})])
    if answers_since_user(messages) == 0:
        return Reply(calls=[("write_file", {"path": f"{name}.txt", "content": name})])
    return Reply(f"ready {name}", tag=f"{name}:ready", hold=name.startswith("held"))


def expected(name: str) -> list[ChatMessage]:
    t = [user(f"go {name}")]
    write = tool_call(call_id(t), "write_file", {"path": f"{name}.txt", "content": name})
    t += [calling(write), tool_ok(write, written(f"{name}.txt", name)), assistant(f"ready {name}")]
    t += [user("finish")]
    finish = tool_call(call_id(t), "finish", {"result": f"done {name}"})
    return [*t, calling(finish), tool_ok(finish, f"done {name}")]


@dataclass
class Stack:
    server: DevServer
    client: Client
    model: FunctionModel
    process_worker: WorkerProcess
    process_queue: str
    inprocess_queue: str

    async def start(self, queue: str, name: str) -> RunHandle:
        tarry = Tarry(self.client, queue)
        return await tarry.start(
            RunInput(prompt=f"go {name}", timeouts=CRASH_TIMEOUTS), run_id=name
        )


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """A dev server of the test's own; a worker process on one queue, an in-process worker
    on another; and the model."""
    async with DevServer(tmp_path / "server") as server, FunctionModel(answer) as model:
        client = await connect(server.address)
        process_queue, inprocess_queue = (f"restart-{uuid.uuid4().hex[:8]}" for _ in range(2))
        process_worker = fault_worker(
            address=server.address,
            task_queue=process_queue,
            model_url=model.base_url,
            workspace_root=tmp_path / "workspaces",
            log=tmp_path / "worker.log",
        )
        profile = ModelProfile(base_url=model.base_url, model="m", api_key=SecretStr(API_KEY))
        settings = TarrySettings.model_construct(
            tarry_workspace_root=tmp_path / "workspaces", tarry_storage_dir=tmp_path / "payloads"
        )
        plugin = TarryPlugin(settings, profiles={"default": profile})
        try:
            await process_worker.start()
            async with Worker(client, task_queue=inprocess_queue, plugins=[plugin]):
                yield Stack(server, client, model, process_worker, process_queue, inprocess_queue)
        finally:
            await process_worker.stop()
            await plugin.aclose()


async def finish(run: RunHandle) -> RunState:
    """Sends `finish` (retried with the same id until the restarted server answers)."""
    return await eventually(lambda: run.send("finish", id=f"{run.id}-finish"), what=run.id)


async def waiting(run: RunHandle) -> RunState:
    return await eventually(
        lambda: run.wait_for({Phase.WAITING_USER}, timeout=deadline(5)), what=run.id
    )


async def assert_finished_exactly(stack: Stack, runs: list[RunHandle]) -> None:
    for run in runs:
        state = await finish(run)
        assert state.phase is Phase.COMPLETED, run.id
        result = await eventually(run.result)
        assert result.output == f"done {run.id}"
        assert_transcript(await eventually(run.transcript), expected(run.id))
    assert stack.process_worker.alive, "the worker process did not survive the restart"
    assert stack.process_worker.starts == 1
    await check_replay(stack.client, [run.id for run in runs])


@pytest.mark.parametrize("sig", SIGNALS)
async def test_runs_waiting_for_a_reply_survive_a_server_restart(stack: Stack, sig: int) -> None:
    runs = [
        await stack.start(queue, f"{kind}-{uuid.uuid4().hex[:6]}")
        for kind, queue in (("proc", stack.process_queue), ("inproc", stack.inprocess_queue))
    ]
    for run in runs:
        await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    await stack.server.restart(sig)

    await assert_finished_exactly(stack, runs)


@pytest.mark.parametrize("sig", SIGNALS)
async def test_runs_in_a_model_call_survive_a_server_restart(stack: Stack, sig: int) -> None:
    runs = [
        await stack.start(queue, f"held-{kind}-{uuid.uuid4().hex[:6]}")
        for kind, queue in (("proc", stack.process_queue), ("inproc", stack.inprocess_queue))
    ]
    for run in runs:
        await stack.model.reached(f"{run.id}:ready")

    await stack.server.restart(sig)
    for run in runs:
        stack.model.release(f"{run.id}:ready")

    for run in runs:
        state = await waiting(run)
        assert state.last_assistant_text == f"ready {run.id}"
    await assert_finished_exactly(stack, runs)


async def test_replies_sent_at_once_to_twenty_runs_after_a_stack_restart_each_enter_once(
    stack: Stack,
) -> None:
    runs = [
        await stack.start(stack.process_queue, f"many-{i}-{uuid.uuid4().hex[:6]}")
        for i in range(20)
    ]
    for run in runs:
        await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    # The whole stack, as `tarry dev` restarts: the server and a fresh worker.
    await stack.process_worker.stop()
    await stack.server.restart(signal.SIGTERM)
    await stack.process_worker.start()
    await waiting(runs[0])

    # No retries here: the client itself must deliver each reply, once.
    states = await asyncio.gather(*(run.send("finish") for run in runs))

    assert [state.phase for state in states] == [Phase.COMPLETED] * len(runs)
    for run in runs:
        assert_transcript(await run.transcript(), expected(run.id))
    await check_replay(stack.client, [run.id for run in runs])
