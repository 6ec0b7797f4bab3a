"""The result limit's stage: a tool's result longer than the run's
`max_tool_result_chars` reaches the model cut to that many characters, with a note of
how much was left out, so one large page or listing cannot fill the model's context.

Only what the model reads is cut: the activity's result, in history, stays whole. A run
without a limit (every run before it) passes each result on unchanged, so its commands
and transcript are those of code before this stage.
"""

from __future__ import annotations

from tarry.contracts import ToolResult
from workflows.stage import RunTool, Stage, ToolStep


class ResultLimit(Stage):
    async def around_tool(self, step: ToolStep, run_tool: RunTool) -> ToolResult:
        result = await run_tool(step)
        limit = step.run.input.max_tool_result_chars
        if limit is None or not result.ok:
            return result
        text = result.data_text()
        if len(text) <= limit:
            return result
        note = (
            f"[{len(text) - limit} more characters cut: this run reads at most {limit}"
            " characters of a tool's result]"
        )
        return ToolResult(ok=True, data=f"{text[:limit]}\n{note}", blocks=result.blocks)


LIMIT = ResultLimit()
