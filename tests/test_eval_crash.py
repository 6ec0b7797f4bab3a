"""An eval whose worker is killed (SIGKILL) mid-eval: a new worker process takes over, the
eval ends with the report it would have had, and history shows each point asked and
scored once (`workflows/eval_run.py`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from tarry.client.evals import start_eval, wait_report
from tarry.contracts import EvalInput
from tarry.testing.scripted_model import ScriptedModel
from tests.deadline import TIMEOUT, deadline
from tests.eval_dataset import DISAGREED, agree_on_three
from tests.eval_dataset import points as labelled_points
from tests.faults import CRASH_TIMEOUTS, CrashRig, replay
from workflows.eval_run import EvalRunWorkflow


async def test_an_eval_resumes_after_its_worker_is_killed_and_scores_each_point_once(
    temporal: Client, tmp_path: Path
) -> None:
    async with ScriptedModel() as model:
        # Every answer is slow: the worker dies with points in flight.
        agree_on_three(model, delay=deadline(3))
        rig = CrashRig(temporal, model.base_url, tmp_path / "workspaces", tmp_path / "logs")
        try:
            first = await rig.worker()
            input = EvalInput(
                dataset="decisions",
                points=labelled_points(),
                model="default",
                concurrency=2,
                timeouts=CRASH_TIMEOUTS,
            )
            handle = await start_eval(rig.client, rig.task_queue, "ana", input)
            await model.wait_for_requests(1, timeout=deadline(30))

            await first.kill()
            await rig.worker()
            async with asyncio.timeout(TIMEOUT):
                report = await wait_report(handle)
        finally:
            await rig.close()

    assert (report.scored, report.overall.agreed) == (4, 3)
    assert [d.id for d in report.disagreements] == [DISAGREED]
    history = await handle.fetch_history()
    scheduled: dict[int, str] = {}
    completed: Counter[str] = Counter()
    retried: list[str] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_id
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempt = e.activity_task_started_event_attributes
            if attempt.attempt > 1:
                retried.append(scheduled[attempt.scheduled_event_id])
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = e.activity_task_completed_event_attributes
            completed[scheduled[done.scheduled_event_id]] += 1
    points_asked = [f"point-{n}" for n in range(4)]
    assert sorted(scheduled.values()) == points_asked  # each asked once...
    assert completed == Counter(points_asked)  # ...and scored once
    assert retried  # the calls the killed worker had in flight were asked again
    replayer = Replayer(workflows=[EvalRunWorkflow], data_converter=temporal.data_converter)
    await replay(replayer, history)
