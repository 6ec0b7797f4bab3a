"""A worker's sdk-core logs (`workers.telemetry.worker_runtime`) are Python log records,
where the process's own logs go, not lines core prints on standard output: there they
landed after the demo's `Demo finished.`."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from tarry.config.settings import TarrySettings
from tests.deadline import deadline
from workers.telemetry import CORE_LOGGER, worker_runtime

BUG = "a bug in a workflow task"


@workflow.defn(sandboxed=False)
class FailsItsTask:
    """Fails every workflow task it runs, which core warns of (`Failing workflow task`)."""

    @workflow.run
    async def run(self) -> None:
        raise RuntimeError(BUG)


async def test_core_warns_through_python_logging_and_prints_nothing_on_stdout(
    temporal: Client, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.WARNING, logger=CORE_LOGGER.name)
    client = await Client.connect(
        temporal.service_client.config.target_host,
        runtime=worker_runtime(TarrySettings.model_construct(tarry_metrics_port=None)),
    )
    queue = f"core-logs-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[FailsItsTask]):
        handle = await client.start_workflow(FailsItsTask.run, id=queue, task_queue=queue)
        try:
            async with asyncio.timeout(deadline(30)):
                while not (warnings := _core_records(caplog)):
                    await asyncio.sleep(0.1)
        except TimeoutError:
            pytest.fail(f"no record of core's; on stdout: {capfd.readouterr().out!r}")
        finally:
            await handle.terminate("the test has seen core's warning")

    assert "Failing workflow task" in warnings[0].getMessage()
    assert warnings[0].levelno == logging.WARNING
    assert BUG not in capfd.readouterr().out


def _core_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == CORE_LOGGER.name]
