"""Tool calls: gating them behind a person's decision, the durable wait for it, running
them, and what the model reads of a call that did not run.

The run's catalogue (`RunCatalogue.tools`) says which tools exist, which calls wait for a
decision and which must not run twice; nothing here asks a worker.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tarry.contracts import (
    FINISH_TOOL,
    MCP_TOOL_ACTIVITY,
    TOOL_CATALOGUE_ACTIVITY,
    ApprovalDefault,
    Catalogue,
    CatalogueRequest,
    ChatMessage,
    DecisionRecord,
    ErrorCode,
    ErrorInfo,
    FinishArguments,
    McpInvocation,
    PendingApproval,
    Phase,
    ToolCall,
    ToolDefinition,
    ToolInvocation,
    ToolResult,
    approvers_of,
)
from workflows import agents, audit, notifications, rules
from workflows.details import tool_summary
from workflows.memory import RunMemory, WorkflowInput, call_fingerprint
from workflows.model_calls import error_of

REPEAT_HINT = "You are repeating the same tool call; try a different approach."
REPEAT_HINT_AFTER = 5

_TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# A tool that must not run twice gets one attempt: a retry after its worker died could
# repeat a side effect (a mail sent, a payment made) that the first attempt completed.
_TOOL_ONCE = RetryPolicy(maximum_attempts=1)


async def resolve(memory: RunMemory, input: WorkflowInput) -> ErrorInfo | None:
    """Resolves the run's tools from the worker's registry, once per run (a run handed
    over has them already); the error instead when the run names a tool the worker does
    not have (`TOOL_NOT_FOUND`), which refuses the run."""
    request = CatalogueRequest.of(input)
    try:
        catalogue = await workflow.execute_activity(
            TOOL_CATALOGUE_ACTIVITY,
            request,
            result_type=Catalogue,
            start_to_close_timeout=input.timeouts.tool,
            summary="the run's tools",
        )
    except ActivityError as e:
        return error_of(e, default=ErrorCode.TOOL_NOT_FOUND)
    memory.catalogue.tools, memory.catalogue.model_queue = catalogue.tools, catalogue.model_queue
    memory.catalogue.profiles = catalogue.profiles
    memory.catalogue.payload_limit = catalogue.payload_limit
    memory.agents.specs = catalogue.agents
    notifications.learn(memory, catalogue)
    # A conversation stored before the catalogue lacks the tools: the next call starts
    # a new one, sending the conversation and the tools whole once.
    memory.conversation.context = None
    return None


def gate(
    memory: RunMemory, input: WorkflowInput, calls: Sequence[ToolCall], tools: list[ToolDefinition]
) -> bool:
    """Judges the calls by the run's approval rules and what it remembers (`rules.judge`):
    records the decisions made without asking, makes the calls that need a person's
    pending; True when there are any."""
    catalogue = {t.name: t for t in tools}
    asking: list[tuple[ToolCall, int | None]] = []
    for c in calls:
        if (tool := catalogue.get(c.function.name)) is None:
            continue  # not the run's: refused when it would run
        verdict = rules.judge(memory, input.approval_rules, c, tool)
        if isinstance(verdict, rules.Asking):
            asking.append((c, verdict.rule))
        elif verdict is not None:
            memory.approvals.decisions[c.id] = verdict
            audit.made(memory, c.function.name, c.id, verdict)
    if not asking:
        return False
    deadline = workflow.now() + input.approval_timeout if input.approval_timeout else None
    asked = [catalogue[c.function.name] for c, _ in asking]
    memory.approvals.schemas = {t.name: t.parameters for t in asked}
    memory.approvals.pending = [
        PendingApproval(
            call_id=c.id,
            tool=c.function.name,
            arguments=c.function.arguments,
            deadline=deadline,
            approvers=approvers_of(input.approvers, c.function.name),
            rule=rule,
        )
        for c, rule in asking
    ]
    return True


async def run_call(
    memory: RunMemory,
    input: WorkflowInput,
    call: ToolCall,
    tools: list[ToolDefinition],
    resume: Callable[[], None],
) -> ToolResult:
    """One call's result: run by its activity (once decided, when it is pending), or
    handled by the workflow itself (`finish`), or refused. `resume` moves the run back to
    `Running` once the last pending call has its decision and no sub-agent waits."""
    name = call.function.name
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        offered = ", ".join(t.name for t in tools)
        return ToolResult.failure(
            ErrorCode.TOOL_NOT_FOUND, f"no tool {name!r} in this run; available: {offered}"
        )
    if name == FINISH_TOOL:
        try:
            args = FinishArguments.model_validate_json(call.function.arguments)
        except ValidationError as e:
            return ToolResult.failure(ErrorCode.TOOL_INVALID_ARGUMENTS, str(e))
        return ToolResult.success(args.result)
    arguments = call.function.arguments
    gated = any(p.call_id == call.id for p in memory.approvals.pending)
    decision = memory.approvals.decisions.get(call.id)  # one made without asking (`gate`)
    if gated:
        decision = await _decision_on(memory, input, call, resume)
    if decision is not None:
        if not decision.approved:
            return _rejection(decision)
        if decision.arguments is not None:
            arguments = json.dumps(decision.arguments)
    if (agent := agents.agent_of(memory, name)) is not None:
        return await agents.delegate(memory, input, agent, arguments, resume)
    # A sub-agent works in its lead's workspace: what it writes, the lead can read.
    workspace = memory.agents.parent or workflow.info().workflow_id
    invocation = ToolInvocation(
        run_id=workspace, call_id=call.id, arguments=arguments, decision=decision
    )
    activity, summary = name, tool_summary(name, arguments)
    if tool.server is not None:  # an MCP server's tool: history names the server and tool
        activity = MCP_TOOL_ACTIVITY
        remote = tool.remote_name or name
        invocation = McpInvocation(**invocation.model_dump(), server=tool.server, tool=remote)
        summary = tool_summary(f"{tool.server}: {remote}", arguments)
    summary = rules.summary_of(summary, decision)
    # A quick tool's call nobody decided on is a local activity: no activity task to
    # schedule and hand back, the server round trip that would dwarf a call answering in
    # microseconds. A worker that dies before its workflow task completes leaves no
    # marker, so the next one runs the call again, which a quick tool (read-only,
    # idempotent) allows.
    local = tool.local and decision is None
    execute = workflow.execute_local_activity if local else workflow.execute_activity
    try:
        result: ToolResult = await execute(
            activity,
            invocation,
            result_type=ToolResult,
            start_to_close_timeout=input.timeouts.tool,
            retry_policy=_TOOL_RETRY if tool.idempotent else _TOOL_ONCE,
            summary=summary,
        )
    except ActivityError as e:
        if tool.server is not None and (known := _known_failure(e)) is not None:
            return ToolResult(ok=False, error=known)
        if not tool.idempotent:
            return ToolResult.failure(
                ErrorCode.TOOL_OUTCOME_UNKNOWN,
                f"the call was cut short ({e.cause or e}); it may or may not have taken "
                "effect, and it was not run again: check before calling it again",
            )
        return ToolResult(ok=False, error=error_of(e, default=ErrorCode.TOOL_FAILED))
    return result


def _known_failure(e: ActivityError) -> ErrorInfo | None:
    """The coded error of an attempt that failed knowing its call never ran (an MCP
    server that could not be reached): not `TOOL_OUTCOME_UNKNOWN`, even for a tool
    that must not run twice."""
    cause = e.cause
    if not isinstance(cause, ApplicationError) or not cause.non_retryable:
        return None
    if cause.type is None or cause.type not in ErrorCode.__members__:
        return None
    return ErrorInfo(code=ErrorCode(cause.type), message=cause.message)


async def _decision_on(
    memory: RunMemory, input: WorkflowInput, call: ToolCall, resume: Callable[[], None]
) -> DecisionRecord:
    """Waits for a person's decision on a gated call: a durable wait that may last
    weeks, ended by a decision, a stop, or the deadline's default."""
    m, decisions = memory, memory.approvals.decisions
    with contextlib.suppress(TimeoutError):  # the deadline passed: its default applies
        await workflow.wait_condition(
            lambda: call.id in decisions or m.requests.stop,
            timeout=input.approval_timeout,
            timeout_summary=f"approval deadline for {call.function.name}",
        )
    if call.id not in decisions:
        by = "stop" if m.requests.stop else "deadline"
        approve = by == "deadline" and input.approval_default is ApprovalDefault.APPROVE
        user = m.requests.stopped_by if by == "stop" else None
        decisions[call.id] = DecisionRecord(approved=approve, by=by, at=workflow.now(), user=user)
        if by == "deadline":  # a stop's rejection is the stop's record
            audit.made(m, call.function.name, call.id, decisions[call.id])
    # Resumed here, between the last decision and its call's activity, as recorded
    # histories have it: moved, the phase's search attribute update would change places
    # with the activity in the commands of runs in flight.
    if m.phase is Phase.WAITING_USER and not m.undecided() and not m.requests.stop:
        resume()
    return decisions[call.id]


def hint_if_repeating(memory: RunMemory) -> None:
    """The same tool called `REPEAT_HINT_AFTER` times in a row earns the model one hint
    before its next call."""
    if memory.guards.streak >= REPEAT_HINT_AFTER:
        memory.guards.streak = 0
        memory.conversation.transcript.append(ChatMessage(role="user", content=REPEAT_HINT))


def record(
    memory: RunMemory, input: WorkflowInput, calls: Sequence[ToolCall], results: list[ToolResult]
) -> str | None:
    """Adds the calls' tool messages in the order of the calls and counts them for the
    guards; returns the run's output when one of them was a successful `finish`."""
    m, guards = memory, memory.guards
    finished: str | None = None
    for call, result in zip(calls, results, strict=True):
        m.conversation.transcript.append(
            ChatMessage(
                role="tool",
                tool_call_id=call.id,
                content=result.to_content(),
                decision=m.approvals.settle(call.id),
                blocks=result.blocks,
            )
        )
        name = call.function.name
        guards.streak = guards.streak + 1 if name == guards.streak_tool else 1
        guards.streak_tool = name
        if name == FINISH_TOOL and result.ok:
            finished = str(result.data)
        elif not result.ok:
            key = call_fingerprint(call)
            guards.failures[key] = guards.failures.get(key, 0) + 1
            if guards.failures[key] >= input.max_repeated_failures:
                m.warning = ErrorCode.ENGINE_LOOP_DETECTED
    return finished


def _rejection(decision: DecisionRecord) -> ToolResult:
    """The tool result the model sees for a call that did not run."""
    if decision.by == "deadline":
        return ToolResult.failure(
            ErrorCode.TOOL_APPROVAL_EXPIRED, "nobody decided on this call before its deadline"
        )
    if decision.by == "stop":
        return ToolResult.failure(ErrorCode.TOOL_REJECTED, "the run was stopped before a decision")
    # A rule's reason, or the reason of the person whose decision was remembered.
    return ToolResult.failure(ErrorCode.TOOL_REJECTED, decision.reason or "rejected by the user")
