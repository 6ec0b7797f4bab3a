"""Sub-agents: a call of `agent__NAME` runs as a child `AgentRun`, whose result is the
call's tool result.

The child is a full run with the agent's settings (`AgentSpec`, resolved with the
parent's catalogue at its start) and the call's `task` as its prompt. Its id is
`PARENT:NAME-N`, N counting the parent's children: a run id has no `/` (it names the
run's workspace directory), and a count kept in the parent's memory gives the same id
when the parent replays.

The tree behaves as one run to a person:
- The child tells its parent at each phase change whether it waits for a person
  (`AgentReport`); while one does, the parent waits too (`waiting_for: "agent"`, with
  `waiting_on` the child's id), and answering the child lets both go on.
- One budget: the child may spend what the parent has left (`remaining`), its usage
  counts against the parent's once it ends, and raising the parent's budget raises
  what its running children may spend the same way.
- A stop of the parent stops its children (a `stop` signal, so each ends as a stopped
  run does); a parent that ends for any other reason terminates them (the parent close
  policy).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from tarry.contracts import (
    AGENT_TOOL_PREFIX,
    MAX_RUN_ID_LENGTH,
    SUMMARY_MEMO,
    WORKFLOW_TYPE,
    AgentArguments,
    AgentReport,
    AgentSpec,
    Budget,
    BudgetRaise,
    Door,
    ErrorCode,
    Phase,
    RunResult,
    StopRequest,
    ToolResult,
    WaitingFor,
)
from tarry.contracts.compatibility import SUB_AGENT_OWNER
from tarry.core.ownership import carried
from tarry.core.text import shorten
from workflows import waits
from workflows.memory import RunMemory, WorkflowInput

STATUS_SIGNAL = "agent_status"
"""The signal a child reports its waiting to its parent with (`AgentReport`)."""
BUDGET_SIGNAL = "parent_budget"
"""The signal a parent gives a running child its new limits with (`BudgetRaise`)."""


def agent_of(memory: RunMemory, tool: str) -> str | None:
    """The sub-agent a call of `tool` delegates to, or None for any other tool."""
    name = tool.removeprefix(AGENT_TOOL_PREFIX)
    return name if tool.startswith(AGENT_TOOL_PREFIX) and name in memory.agents.specs else None


def child_id(parent: str, name: str, n: int) -> str:
    """`PARENT:NAME-N`, the parent's id shortened so the whole stays a run id."""
    suffix = f":{name}-{n}"
    return parent[: MAX_RUN_ID_LENGTH - len(suffix)] + suffix


def remaining(memory: RunMemory) -> Budget | None:
    """What the run has left of its budget, for a child to spend; None: no limit. A
    child that starts with nothing left gets the least a budget can be, and pauses
    before its first model call until the parent's budget is raised."""
    limits, spent = memory.budget.limits, memory.conversation.usage
    if limits is None:
        return None
    tokens, cost = limits.max_total_tokens, limits.max_cost_usd
    return Budget(
        max_total_tokens=None if tokens is None else max(1, tokens - spent.total_tokens),
        max_cost_usd=None if cost is None else max(1e-9, cost - spent.cost_usd),
    )


async def delegate(
    memory: RunMemory,
    input: WorkflowInput,
    name: str,
    arguments: str,
    follow: Callable[[], None],
) -> ToolResult:
    """Runs the task `arguments` names as a child run of agent `name` and answers with
    its result. `follow` moves the parent between `Running` and waiting as its children
    wait for a person and go on."""
    m, spec = memory, memory.agents.specs[name]
    try:
        task = AgentArguments.model_validate_json(arguments).task
    except ValidationError as e:
        return ToolResult.failure(ErrorCode.TOOL_INVALID_ARGUMENTS, str(e))
    m.agents.started += 1
    parent = workflow.info().workflow_id
    run_id = child_id(parent, name, m.agents.started)
    # Running before it starts: its first report may come in the activation that
    # resolves its start, and must not be dropped as a stranger's.
    m.agents.running.append(run_id)
    owned = workflow.patched(SUB_AGENT_OWNER.id)
    access = carried(workflow.info().typed_search_attributes) if owned else None
    try:
        handle = await workflow.start_child_workflow(
            WORKFLOW_TYPE,
            _child_input(spec, input, task, parent, remaining(m)),
            id=run_id,
            result_type=RunResult,
            parent_close_policy=ParentClosePolicy.TERMINATE,
            memo={SUMMARY_MEMO: shorten(task)},
            static_summary=shorten(f"{name} for {parent}: {task}", 200),
            static_details=_details(name, parent, task),
            search_attributes=access,
        )
        result: RunResult | Exception = await _follow_child(m, handle, run_id, follow)
    except (ChildWorkflowError, WorkflowAlreadyStartedError) as e:
        result = e  # terminated, timed out, or an id taken: not a run's own ending
    # Not in a `finally`: a run evicted from the cache closes this coroutine, and the
    # phase change would then run outside the workflow.
    m.agents.running.remove(run_id)
    m.agents.waiting.pop(run_id, None)
    m.agents.reports.pop(run_id, None)
    follow()
    if isinstance(result, Exception):
        return ToolResult.failure(
            ErrorCode.AGENT_FAILED, f"agent {name} ({run_id}): {result.__cause__ or result}"
        )
    m.conversation.usage += result.usage  # the tree's one budget
    if result.phase is not Phase.COMPLETED:
        error = result.error
        why = f"{error.code}: {error.message}" if error else str(result.phase)
        return ToolResult.failure(
            ErrorCode.AGENT_FAILED, f"agent {name} ({run_id}) failed: {why}", {"run_id": run_id}
        )
    if result.stop_reason is not None or result.stopped_by is not None:
        by = f" by {result.stopped_by}" if result.stopped_by else ""
        return ToolResult.failure(
            ErrorCode.AGENT_FAILED, f"agent {name} ({run_id}) was stopped{by}", {"run_id": run_id}
        )
    output = result.output
    if spec.output_schema is not None and output is not None:
        return ToolResult.success(json.loads(output))
    return ToolResult.success(output)


async def _follow_child(
    memory: RunMemory,
    handle: workflow.ChildWorkflowHandle[object, RunResult],
    run_id: str,
    follow: Callable[[], None],
) -> RunResult:
    """Waits for the child's result, meanwhile following what it waits for, passing on
    the parent's stop and raised budget."""
    m = memory

    def seen() -> tuple[bool, WaitingFor | None, Budget | None]:
        """What the parent passes on or follows: its stop, the child's wait, its budget."""
        return m.requests.stop, m.agents.waiting.get(run_id), m.budget.limits

    last = seen()
    while not handle.done():
        before = last
        await workflow.wait_condition(lambda b=before: handle.done() or seen() != b)  # type: ignore[misc]
        if handle.done():
            break
        last = seen()
        stopped, _, limits = last
        if stopped and not before[0]:
            # Passed on by this run (`Door.RULE`), in the name of who stopped it.
            stop = StopRequest(
                reason=m.requests.stop_reason, by=m.requests.stopped_by, door=Door.RULE
            )
            await _tell(handle, "stop", stop)
        if limits != before[2] and (left := remaining(m)) is not None:
            raised = BudgetRaise(
                **left.model_dump(exclude_none=True), by=m.budget.raised_by, door=Door.RULE
            )
            await _tell(handle, BUDGET_SIGNAL, raised)
        follow()
    return await handle


def _details(name: str, parent: str, task: str) -> str:
    """The child's static details in the Temporal UI: whose sub-agent it is, and its task."""
    return f"Sub-agent `{name}` of run `{parent}`.\n\n**Task:** {shorten(task, 1000)}"


async def _tell(
    handle: workflow.ChildWorkflowHandle[object, RunResult], signal: str, arg: object
) -> None:
    """Signals the child; one that has just ended needs it no more, and its ending must
    not fail the parent."""
    try:
        await handle.signal(signal, arg)
    except Exception as e:  # the child closed between its last event and this signal
        workflow.logger.info("signal %s to %s not delivered: %s", signal, handle.id, e)


def _child_input(
    spec: AgentSpec, parent_input: WorkflowInput, task: str, parent: str, budget: Budget | None
) -> WorkflowInput:
    """The child run's input: the agent's settings; the parent's timeouts, approvers,
    approval rules, guardrails (before the agent's own), sensitive mark, memory scope
    (unless the agent names its own) and budget left (the person's policy covers the
    tree); and the task as its prompt, sent by the parent."""
    return WorkflowInput(
        prompt=task,
        system=spec.system,
        model=spec.model,
        tools=spec.tools,
        mode=spec.mode,
        max_turns=spec.max_turns,
        require_approval=spec.require_approval,
        output_schema=spec.output_schema,
        timeouts=parent_input.timeouts,
        approval_timeout=parent_input.approval_timeout,
        approval_default=parent_input.approval_default,
        approvers=parent_input.approvers,
        approval_rules=parent_input.approval_rules,
        guardrails=[*parent_input.guardrails, *spec.guardrails],
        sensitive=parent_input.sensitive,
        memory_access=spec.memory_access,
        memory_scope=spec.memory_scope or parent_input.memory_scope,
        budget=budget,
        started_by=parent,
        door=Door.RULE,  # the run's own act: its model's call of `agent__NAME`
        parent=parent,
        spend=parent_input.spend,  # the tree's calls count on the same person's day
        models=parent_input.models,  # and its fallbacks are the person's to use
        # No `slots`: a child is part of its parent's run, which holds the slot.
    )


def report(memory: RunMemory, reports: list[asyncio.Task[None]]) -> None:
    """A child's report to its parent, when what it waits for has changed: sent in a
    task of its own (a phase change does not wait for it), numbered, so the parent
    reads the latest whatever order signals arrive in."""
    m = memory
    parent = m.agents.parent
    waiting = None if m.phase.ended else waits.recorded(m)
    if parent is None or waiting == m.agents.reported_waiting:
        return
    m.agents.reported += 1
    m.agents.reported_waiting = waiting
    status = AgentReport(
        run_id=workflow.info().workflow_id, waiting_for=waiting, seq=m.agents.reported
    )
    reports[:] = [task for task in reports if not task.done()]
    reports.append(asyncio.ensure_future(_signal_parent(parent, status)))


async def _signal_parent(parent: str, status: AgentReport) -> None:
    try:
        await workflow.get_external_workflow_handle(parent).signal(STATUS_SIGNAL, status)
    except Exception as e:  # a parent that has ended needs no report
        workflow.logger.info("report to parent %s not delivered: %s", parent, e)


def take_report(memory: RunMemory, status: AgentReport) -> None:
    """Records a running child's report; one older than the latest, or from a child
    that has ended, changes nothing."""
    agents = memory.agents
    if status.run_id not in agents.running or status.seq <= agents.reports.get(status.run_id, 0):
        return
    agents.reports[status.run_id] = status.seq
    if status.waiting_for is None:
        agents.waiting.pop(status.run_id, None)
    else:
        agents.waiting[status.run_id] = status.waiting_for
