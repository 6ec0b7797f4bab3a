"""The previews of gated calls: before a run waits for a decision, one `preview_calls`
activity tells what each call it waits on would do (`tarry.contracts.previews`), and the
answer is kept with the pending calls. What a person is shown is then what history holds.

A run recorded before previews gives no command here (`CALL_PREVIEWS`); a preview that
cannot be made (no worker has the activity, it failed) leaves the call without one: the
doors show its arguments, as before, and the gate waits all the same.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import ToolDefinition
from tarry.contracts.compatibility import CALL_PREVIEWS
from tarry.contracts.previews import PREVIEW_ACTIVITY, Preview, PreviewCall, PreviewRequest
from workflows.stage import RunScope

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


async def record(run: RunScope, tools: dict[str, ToolDefinition]) -> None:
    """Makes the previews of the calls now waiting for a decision, and keeps them with
    the calls (`PendingApproval.preview`)."""
    memory = run.memory
    waiting = memory.approvals.undecided()
    if not waiting or not workflow.patched(CALL_PREVIEWS.id):
        return
    # A sub-agent works in its lead's workspace (`tool_calls.execute`).
    workspace = memory.agents.parent or workflow.info().workflow_id
    calls = [
        PreviewCall(
            call_id=p.call_id, tool=p.tool, arguments=p.arguments, server=tools[p.tool].server
        )
        for p in waiting
    ]
    try:
        previews = await workflow.execute_activity(
            PREVIEW_ACTIVITY,
            PreviewRequest(workspace=workspace, calls=calls),
            result_type=dict[str, Preview],
            start_to_close_timeout=run.input.timeouts.tool,
            retry_policy=_RETRY,
            summary=f"preview: {', '.join(p.tool for p in waiting)}",
        )
    except ActivityError as e:
        workflow.logger.warning("no previews of the gated calls: %s", e.cause or e)
        return
    for pending in waiting:
        pending.preview = previews.get(pending.call_id)
