"""A worker killed (SIGKILL) mid-run: a new worker process takes over, and the run ends
exactly as it would have without the crash, every message in its transcript once.

Every test runs twice: with the workflow cache workers ship with, and with none (every
workflow task replays its run), the two paths a run's state can take through a crash.

Killed while it waits for an approval: `test_approvals.py::
test_an_approval_survives_a_killed_worker_and_runs_the_tool_once`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from tarry.cli.processes import WorkerProcess
from tarry.client import RunHandle
from tarry.config.settings import DEFAULT_WORKFLOW_CACHE
from tarry.contracts import ErrorCode, Mode, Phase
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.deadline import TIMEOUT, deadline
from tests.faults import (
    CrashRig,
    activity_attempts,
    assert_transcript,
    assistant,
    calling,
    check_replay,
    finished,
    line_count,
    local_activities,
    tool_call,
    tool_ok,
    until_the_scene_happens,
    user,
    wait_for_file_lines,
    written,
)


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as scripted:
        yield scripted


@pytest.fixture(params=[DEFAULT_WORKFLOW_CACHE, 0], ids=["cache", "no-cache"])
async def rig(
    temporal: Client, model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[CrashRig]:
    crash_rig = CrashRig(
        temporal,
        model.base_url,
        tmp_path / "workspaces",
        tmp_path / "logs",
        workflow_cache=request.param,
    )
    yield crash_rig
    await crash_rig.close()


async def test_a_model_call_cut_off_by_a_killed_worker_is_asked_again_by_a_new_one(
    rig: CrashRig, model: ScriptedModel
) -> None:
    # The first answer never comes: its worker dies while waiting. The same answer again
    # for the retry, so the run reads as if nothing had happened.
    model.add(say("Hello!", delay=60), say("Hello!"))
    first = await rig.worker()
    run = await rig.start("hi", mode=Mode.TASK)
    await model.wait_for_requests(1, timeout=deadline(10))

    await first.kill()
    await rig.worker()
    result = await finished(run)

    assert result.phase is Phase.COMPLETED
    assert result.output == "Hello!"
    assert_transcript(await run.transcript(), [user("hi"), assistant("Hello!")])
    async with asyncio.timeout(deadline(10)):
        await model.requests[0].settled.wait()
    assert model.requests[0].cancelled  # the dead worker's connection went with it
    assert model.requests[1].body["messages"] == model.requests[0].body["messages"]
    assert len(model.requests) == 2


async def test_an_idempotent_tool_cut_off_by_a_killed_worker_runs_again_on_a_new_one(
    rig: CrashRig, model: ScriptedModel
) -> None:
    model.add(call("block", {"name": "b"}, id="b1"), say("Done."))
    first = await rig.worker()
    run = await rig.start("block once", mode=Mode.TASK)
    starts = rig.workspace(run) / "b.starts"
    await wait_for_file_lines(starts, 1)

    await first.kill()
    (rig.workspace(run) / "b.release").touch()
    await rig.worker()
    result = await finished(run)

    assert result.phase is Phase.COMPLETED
    b1 = tool_call("b1", "block", {"name": "b"})
    assert_transcript(
        await run.transcript(),
        [user("block once"), calling(b1), tool_ok(b1, "released b"), assistant("Done.")],
    )
    assert line_count(starts) == 2  # it ran again: that is what retry means
    block = [a for a in await activity_attempts(rig.client, run.id) if a.activity == "block"]
    assert [a.attempts for a in block] == [2]


async def test_a_quick_tool_cut_off_by_a_killed_worker_runs_again_and_is_recorded_once(
    rig: CrashRig, model: ScriptedModel
) -> None:
    model.add(call("block_quick", {"name": "q"}, id="q1"), say("Done."))
    first = await rig.worker()
    run = await rig.start("look once", mode=Mode.TASK)
    starts = rig.workspace(run) / "q.starts"
    await wait_for_file_lines(starts, 1)

    await first.kill()
    (rig.workspace(run) / "q.release").touch()
    await rig.worker()
    result = await finished(run)

    assert result.phase is Phase.COMPLETED
    q1 = tool_call("q1", "block_quick", {"name": "q"})
    assert_transcript(
        await run.transcript(),
        [user("look once"), calling(q1), tool_ok(q1, "released q"), assistant("Done.")],
    )
    assert line_count(starts) == 2  # the dead worker's call left no marker: run again
    # A local activity: one marker in history, no activity task.
    assert await local_activities(rig.client, run.id) == ["block_quick"]
    assert "block_quick" not in [a.activity for a in await activity_attempts(rig.client, run.id)]


async def test_a_non_idempotent_tool_cut_off_by_a_killed_worker_is_not_run_again(
    rig: CrashRig, model: ScriptedModel
) -> None:
    model.add(call("block_once", {"name": "b"}, id="b1"), say("It may or may not have run."))
    first = await rig.worker()
    run = await rig.start("block once", mode=Mode.TASK)
    starts = rig.workspace(run) / "b.starts"
    await wait_for_file_lines(starts, 1)

    await first.kill()
    # Released, so that a wrong retry would run to completion and show.
    (rig.workspace(run) / "b.release").touch()
    await rig.worker()
    result = await finished(run)

    assert result.phase is Phase.COMPLETED
    transcript = await run.transcript()
    tool_message = transcript[2]
    error = json.loads(tool_message.content or "{}")["error"]
    assert error["code"] == ErrorCode.TOOL_OUTCOME_UNKNOWN
    b1 = tool_call("b1", "block_once", {"name": "b"})
    assert_transcript(
        transcript,
        [
            user("block once"),
            calling(b1),
            tool_message,
            assistant("It may or may not have run."),
        ],
    )
    assert tool_message.tool_call_id == "b1"
    assert model.requests[1].body["messages"][-1]["content"] == tool_message.content  # seen
    assert line_count(starts) == 1
    block = [a for a in await activity_attempts(rig.client, run.id) if a.activity == "block_once"]
    assert [a.attempts for a in block] == [1]


async def test_a_run_waiting_for_a_reply_outlives_its_worker(
    rig: CrashRig, model: ScriptedModel
) -> None:
    plan = {"path": "plan.md", "content": "ship it"}
    model.add(
        say("What shall I write?"),
        call("write_file", plan, id="w1"),
        call("finish", {"result": "plan.md written"}, id="f1"),
    )
    first = await rig.worker()
    run = await rig.start("hi")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    await first.kill()
    await rig.worker()
    state = await run.send("write the plan", id="m1")
    result = await finished(run)

    assert state.phase is Phase.COMPLETED
    assert result.output == "plan.md written"
    w1 = tool_call("w1", "write_file", plan)
    f1 = tool_call("f1", "finish", {"result": "plan.md written"})
    assert_transcript(
        await run.transcript(),
        [
            user("hi"),
            assistant("What shall I write?"),
            user("write the plan"),
            calling(w1),
            tool_ok(w1, written("plan.md", "ship it")),
            calling(f1),
            tool_ok(f1, "plan.md written"),
        ],
    )
    assert (rig.workspace(run) / "plan.md").read_text() == "ship it"


async def holding_the_sticky_queue(rig: CrashRig, run_id: str) -> WorkerProcess:
    """The rig's worker that completed the run's last workflow task, which holds the run
    in its cache and its sticky queue: a worker's identity is the SDK's `pid@host`."""
    history = await rig.client.get_workflow_handle(run_id).fetch_history()
    last = [e for e in history.events if e.HasField("workflow_task_completed_event_attributes")][-1]
    pid = int(last.workflow_task_completed_event_attributes.identity.partition("@")[0])
    return next(w for w in rig.workers if w.process is not None and w.process.pid == pid)


async def test_a_reply_after_a_query_while_the_worker_was_dead_leaves_a_replayable_history(
    rig: CrashRig, model: ScriptedModel
) -> None:
    # The dead worker's sticky queue must outlast the tool's retry (3 s) for the
    # scenario to occur; the shipped 2 s mostly avoid it, which is no guarantee.
    rig.sticky_timeout = 10
    await rig.worker()
    run = await until_the_scene_happens(
        partial(_reply_after_a_query_while_the_worker_was_dead, rig, model),
        "a workflow task waiting for a dead worker's sticky queue",
    )
    # With a cache, the history replays only thanks to `workers.legacy_query`.
    await check_replay(rig.client, [run.id])


async def _reply_after_a_query_while_the_worker_was_dead(
    rig: CrashRig, model: ScriptedModel
) -> RunHandle | None:
    """A run whose sticky worker is killed while its tool runs, asked for its state, then
    sent a reply, with every message once in its transcript: the run, if the scenario
    happened (below); None otherwise."""
    prompt = f"block once ({len(rig.runs) + 1})"  # each try's run has its own answers
    model.add_conversation(
        prompt, call("block", {"name": "b"}, id="b1"), say("Done."), say("Hello to you.")
    )
    # Both workers are up before the run starts: the server offers a dead worker's
    # sticky queue until 10 s after it last saw the worker poll, and a worker started
    # after the kill could take that long under load, leaving the scenario below no
    # sticky queue to wait for.
    await rig.worker()
    run = await rig.start(prompt)
    await wait_for_file_lines(rig.workspace(run) / "b.starts", 1)

    await (await holding_the_sticky_queue(rig, run.id)).kill()
    # A client asks for the state (as `wait_for` does): the query waits for the dead
    # worker, then goes to the other once the server gives up on the dead one (10 s),
    # carrying the run's whole history (a "legacy query") ...
    query = asyncio.create_task(run.state())
    # ... by when the tool call (retried, if it ran on the dead worker) has completed,
    # its workflow task still queued for the dead worker.
    (rig.workspace(run) / "b.release").touch()
    await query
    state = await run.send("hello", id="m1")

    # The reply lands after the model's answer to the tool result, or (when the query
    # left the run no time) at the boundary before it; either way every message once.
    b1 = tool_call("b1", "block", {"name": "b"})
    start = [user(prompt), calling(b1), tool_ok(b1, "released b")]
    transcript = await run.transcript()
    if transcript[3].role == "assistant":
        expected = [*start, assistant("Done."), user("hello"), assistant("Hello to you.")]
    else:
        expected = [*start, user("hello"), assistant("Done.")]
    assert_transcript(transcript, expected)
    assert state.last_assistant_text == expected[-1].content
    # The scenario: the task that followed the tool call waited for the dead worker's
    # sticky queue until it timed out (a worker without a cache has none). On a busy
    # machine the tool's retry can end after the server stopped offering that queue;
    # the task then went to the other worker at once, and the try tested nothing.
    history = await rig.client.get_workflow_handle(run.id).fetch_history()
    sticky_timeouts = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        and e.workflow_task_timed_out_event_attributes.timeout_type
        == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
    ]
    return run if bool(sticky_timeouts) == (rig.workflow_cache > 0) else None
