"""Tool calls: the run's tools, resolved once; the calls the run answers itself; a
call's activity, at the end of the stages around it (`workflows.stages`); and what the
run counts of their results.

The run's catalogue (`RunCatalogue.tools`) says which tools exist, which are quick and
which must not run twice; nothing here asks a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tarry.contracts import (
    FINISH_TOOL,
    MCP_TOOL_ACTIVITY,
    OWNER_ATTRIBUTE,
    TOOL_CATALOGUE_ACTIVITY,
    Catalogue,
    CatalogueRequest,
    ChatMessage,
    DecisionRecord,
    ErrorCode,
    ErrorInfo,
    FinishArguments,
    McpInvocation,
    MemoryInvocation,
    ToolCall,
    ToolDefinition,
    ToolInvocation,
    ToolResult,
)
from tarry.core.ownership import RunAccess
from workflows import (
    agents,
    approval_rules,
    auth_waits,
    notifications,
    remote_agents,
    search_index,
)
from workflows.details import tool_summary
from workflows.memory import RunMemory, WorkflowInput, call_fingerprint
from workflows.model_calls import error_of
from workflows.stage import AskModel, ModelOutcome, RunScope, Stage, ToolStep

REPEAT_HINT = "You are repeating the same tool call; try a different approach."
REPEAT_HINT_AFTER = 5

_TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# A tool that must not run twice gets one attempt: a retry after its worker died could
# repeat a side effect (a mail sent, a payment made) that the first attempt completed.
_TOOL_ONCE = RetryPolicy(maximum_attempts=1)


async def resolve(memory: RunMemory, input: WorkflowInput) -> ErrorInfo | None:
    """Resolves the run's tools from the worker's registry, once per run (a run handed
    over has them already); the error instead when the run names a tool the worker does
    not have (`TOOL_NOT_FOUND`), which refuses the run. A run whose client's check answered
    the catalogue (`WorkflowInput.catalogue`) keeps that one: no activity."""
    if input.catalogue is not None:
        learn(memory, input.catalogue)
        # Moved into memory: a hand-over or a resumption of this run need not carry it.
        input.catalogue = None
        return None
    try:
        catalogue = await workflow.execute_activity(
            TOOL_CATALOGUE_ACTIVITY,
            CatalogueRequest.of(input),
            result_type=Catalogue,
            start_to_close_timeout=input.timeouts.tool,
            summary="the run's tools",
        )
    except ActivityError as e:
        return error_of(e, default=ErrorCode.TOOL_NOT_FOUND)
    learn(memory, catalogue)
    return None


def learn(memory: RunMemory, catalogue: Catalogue) -> None:
    """Keeps what the run needs of the worker's `catalogue`."""
    memory.catalogue.tools, memory.catalogue.model_queue = catalogue.tools, catalogue.model_queue
    memory.catalogue.profiles = catalogue.profiles
    memory.catalogue.payload_limit = catalogue.payload_limit
    memory.catalogue.guardrails = catalogue.guardrails
    memory.catalogue.context_budgets = catalogue.context_budgets
    memory.agents.specs = catalogue.agents
    notifications.learn(memory, catalogue)
    search_index.learn(memory, catalogue)
    # A conversation stored before the catalogue lacks the tools: the next call starts
    # a new one, sending the conversation and the tools whole once.
    memory.conversation.context = None


def answered(call: ToolCall, tools: dict[str, ToolDefinition]) -> ToolResult | None:
    """The result of a call the run answers itself, before any stage sees it: one naming
    a tool the run does not have, and `finish`; None for a call that runs."""
    name = call.function.name
    if name not in tools:
        offered = ", ".join(tools)
        return ToolResult.failure(
            ErrorCode.TOOL_NOT_FOUND, f"no tool {name!r} in this run; available: {offered}"
        )
    if name != FINISH_TOOL:
        return None
    try:
        args = FinishArguments.model_validate_json(call.function.arguments)
    except ValidationError as e:
        return ToolResult.failure(ErrorCode.TOOL_INVALID_ARGUMENTS, str(e))
    return ToolResult.success(args.result)


async def execute(step: ToolStep) -> ToolResult:
    """The call's result from its activity (or, for a sub-agent's tool, its run), with the
    arguments and decision the stages left it."""
    memory, input = step.run.memory, step.run.input
    call, tool, arguments, decision = step.call, step.tool, step.arguments, step.decision
    name = call.function.name
    if (agent := agents.agent_of(memory, name)) is not None:
        if remote_agents.is_remote(memory, agent):
            return await remote_agents.delegate(step.run, agent, arguments, call.id)
        return await agents.delegate(memory, input, agent, arguments, step.run.phases.follow)
    # A sub-agent works in its lead's workspace: what it writes, the lead can read.
    workspace = memory.agents.parent or workflow.info().workflow_id
    invocation = ToolInvocation(
        run_id=workspace, call_id=call.id, arguments=arguments, decision=decision
    )
    activity, summary = name, tool_summary(name, arguments)
    if name in input.memory_access.tools():  # a memory tool: whose memories, and from where
        if (scope := memory_scope(input)) is None:
            return ToolResult.failure(
                ErrorCode.TOOL_FAILED,
                "this run has no owner, so no memories of its own: start it with a memory_scope",
            )
        invocation = MemoryInvocation(
            **invocation.model_dump(),
            run=workflow.info().workflow_id,
            scope=scope,
            turn=memory.conversation.turn,
        )
    elif tool.server is not None:  # an MCP server's tool: history names the server and tool
        activity = MCP_TOOL_ACTIVITY
        remote = tool.remote_name or name
        owner = _owner()
        invocation = McpInvocation(
            **invocation.model_dump(), server=tool.server, tool=remote, owner=owner
        )
        summary = tool_summary(f"{tool.server}: {remote}", arguments)
    elif tool.acts_as is not None:  # a worker's tool that calls an API as a person
        invocation = invocation.model_copy(update={"owner": _owner()})
    if tool.acts_as is not None:  # whose grant it takes, the person's name, never a token
        summary = f"{summary} (as {_acting_for(tool.acts_as, invocation.owner, decision)})"
    summary = approval_rules.summary_of(summary, decision)
    # A quick tool's call nobody decided on is a local activity: no activity task to
    # schedule and hand back, the server round trip that would dwarf a call answering in
    # microseconds. A worker that dies before its workflow task completes leaves no
    # marker, so the next one runs the call again, which a quick tool (read-only,
    # idempotent) allows.
    local = tool.local and decision is None
    run_activity = workflow.execute_local_activity if local else workflow.execute_activity
    try:
        result: ToolResult = await run_activity(
            activity,
            invocation,
            result_type=ToolResult,
            start_to_close_timeout=input.timeouts.tool,
            retry_policy=_TOOL_RETRY if tool.idempotent else _TOOL_ONCE,
            summary=summary,
        )
    except ActivityError as e:
        if (grant := auth_waits.needed(e)) is not None:
            if await auth_waits.connected(step.run, call.id, *grant):
                return await execute(step)  # connected: the call runs with the new grant
            return ToolResult.failure(
                ErrorCode.TOOL_REJECTED, "the run was stopped while the call waited to connect"
            )
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


def memory_scope(input: WorkflowInput) -> str | None:
    """Whose memories the run's memory tools touch: its `memory_scope`, or its owner."""
    return input.memory_scope or workflow.info().typed_search_attributes.get(OWNER_ATTRIBUTE)


def _owner() -> str | None:
    """The run's owner, whose grant its calls carry unless an approver's is asked for."""
    return RunAccess.of(workflow.info().typed_search_attributes).owner


def _acting_for(acts_as: str, owner: str | None, decision: DecisionRecord | None) -> str:
    """The person whose grant a call takes, as `activities.grants.person_of` picks."""
    if acts_as == "approver" and decision is not None and decision.user is not None:
        return decision.user
    return owner or "nobody"


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


class RepeatHint(Stage):
    """The same tool called `REPEAT_HINT_AFTER` times in a row earns the model one hint
    before its next call."""

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        guards = run.memory.guards
        if guards.streak >= REPEAT_HINT_AFTER:
            guards.streak = 0
            hint = ChatMessage(role="user", content=REPEAT_HINT)
            run.memory.conversation.transcript.append(hint)
        return await ask()


REPEAT = RepeatHint()


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
                guardrails=result.guardrails,
                acting_for=result.acting_for,
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
