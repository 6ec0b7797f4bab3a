"""The run's stages, in order, and the pipelines they make of a turn (`workflows.stage`).

A new stage is a module with a `Stage` and one line in `STAGES`: the run's loop
(`agent_run`) only calls the pipelines below. The order is each hook's order, the first
stage outermost: what a later stage does happens inside what an earlier one allows.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from tarry.contracts import ToolCall, ToolDefinition, ToolResult
from workflows import (
    approval_gate,
    approval_rules,
    budgets,
    guardrails,
    model_calls,
    pages,
    previews,
    result_limit,
    search_index,
    slots,
    spend,
    tool_calls,
)
from workflows.stage import AskModel, ModelOutcome, RunScope, RunTool, Stage, ToolStep

STAGES: tuple[Stage, ...] = (
    search_index.INDEXING,
    budgets.HOLD,
    slots.SLOTS,
    spend.SPEND,
    tool_calls.REPEAT,
    pages.PAGING,
    approval_rules.RULES,
    approval_gate.GATE,
    result_limit.LIMIT,
    guardrails.GUARDRAILS,
)


def holds(run: RunScope) -> bool:
    """At a turn boundary: whether a stage holds the run there (the first that does)."""
    return any(stage.holds(run) for stage in STAGES)


async def ask_model(run: RunScope) -> ModelOutcome:
    """The turn's model call, through every stage's `around_model`."""

    async def call() -> ModelOutcome:
        return await model_calls.ask(run)

    ask: AskModel = call
    for stage in reversed(STAGES):
        ask = functools.partial(stage.around_model, run, ask)
    return await ask()


async def run_tools(
    run: RunScope, calls: Sequence[ToolCall], tools: list[ToolDefinition]
) -> list[ToolResult]:
    """An answer's calls, judged all at once by every stage's `before_tools` (the run
    moves to a stop point when some wait for a person, once their previews are made:
    `workflows.previews`), then run concurrently, each through every stage's
    `around_tool`; the results in the order of the calls."""
    catalogue = {t.name: t for t in tools}
    asking = False
    for stage in STAGES:
        asking = stage.before_tools(run, calls, catalogue) or asking
    if asking:
        await previews.record(run, catalogue)
        run.phases.wait()
    return list(await asyncio.gather(*(_run_call(run, call, catalogue) for call in calls)))


async def _run_call(run: RunScope, call: ToolCall, tools: dict[str, ToolDefinition]) -> ToolResult:
    """One call's result: refused or answered by the run itself (`tool_calls.answered`),
    or through every stage's `around_tool` to its activity (`tool_calls.execute`)."""
    if (answer := tool_calls.answered(call, tools)) is not None:
        return answer
    step = ToolStep(run, call, tools[call.function.name], call.function.arguments)
    execute: RunTool = tool_calls.execute
    for stage in reversed(STAGES):
        execute = functools.partial(stage.around_tool, run_tool=execute)
    return await execute(step)
