"""Recorded histories must replay on today's workflow code.

A change to `workflows/` that would break runs in flight fails here. When a change
is meant to alter behaviour, guard it with `workflow.patched` so these still replay, and
retire it by the rule in docs/guides/upgrading.md (its histories go with the old branch);
record new histories with `scripts/test --record-histories -k <test>`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.conftest import HISTORIES
from workflows.agent_run import AgentRunWorkflow

RECORDED = sorted(HISTORIES.glob("*.json"))


def test_histories_are_committed() -> None:
    assert len(RECORDED) >= 5


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
async def test_recorded_history_replays(path: Path) -> None:
    text = await asyncio.to_thread(path.read_text)
    history = WorkflowHistory.from_json(_workflow_id(path.stem, text), text)
    replayer = Replayer(workflows=[AgentRunWorkflow], data_converter=pydantic_data_converter)

    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)

    assert result.replay_failure is None


def _workflow_id(stem: str, text: str) -> str:
    """The file's stem, but for a run that delegated to sub-agents: their ids start with
    the parent's (`PARENT:NAME-N`), and its replay must start the same children."""
    history = WorkflowHistory.from_json(stem, text)
    for event in history.events:
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            child = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            return child.rpartition(":")[0]
    return stem
