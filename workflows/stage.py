"""What a stage is: one step around the run's model and tool calls.

A turn of a run is a pipeline (`workflows.stages` lists its stages, in order):

- at the turn boundary, before the replies that came are delivered, a stage may hold the
  run there (`holds`): it stops at a stop point and waits, as a run over its budget does;
- around the model call (`around_model`), a stage may change what the call needs, answer
  on its own (a cache), refuse (an `ErrorInfo` fails the run), or make the run wait
  before or after the call, and do work beside it (pages written while the model answers);
- before an answer's tool calls run (`before_tools`), a stage sees them all at once and
  may ask a person about some (approval rules): the run then waits at a stop point while
  the others run;
- around each tool call (`around_tool`), a stage may refuse it, answer it itself, wait
  (for a decision), change its arguments, or change its result.

Shaped like the wrap hooks of LangChain's agent middleware and pydantic-ai's
capabilities (a stage calls the next one, or does not), but for workflow code: a stage
is a plain object with no state of its own. What it must remember lives in the run's
memory (`RunMemory`), so it is handed over and replayed with the rest, and every command
it gives is in history in the order the stages run. Hazard: that order is part of every
recorded history. A stage added to the pipeline must give no command (activity, timer,
patch marker, search attribute) in runs recorded before it, or ask for a patch first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tarry.contracts import (
    DecisionRecord,
    ErrorInfo,
    LlmResponse,
    ToolCall,
    ToolDefinition,
    ToolResult,
)

if TYPE_CHECKING:
    from workflows.memory import RunMemory, WorkflowInput
    from workflows.phases import Phases
    from workflows.stream import RunStream

ModelOutcome = LlmResponse | ErrorInfo | None
"""The model's answer; the error that ends the run (or makes it wait for a person, with
`RunMemory.model_failure` set); None when a stop cut the call short."""


@dataclass(frozen=True)
class RunScope:
    """What every stage sees of the run: its memory and input, its event stream, and
    its phase changes, for a call that waits for a person (`phases.wait()` moves the run
    to a stop point; `phases.follow()` back to `Running` once nothing is undecided)."""

    memory: RunMemory
    input: WorkflowInput
    stream: RunStream
    phases: Phases


@dataclass(frozen=True)
class ToolStep:
    """One tool call on its way to its result."""

    run: RunScope
    call: ToolCall
    tool: ToolDefinition
    arguments: str
    """The arguments the call runs with: the model's, or a person's edit of them."""
    decision: DecisionRecord | None = None
    """The decision the call runs by: a person's, a rule's; None: nobody decided."""


AskModel = Callable[[], Awaitable[ModelOutcome]]
RunTool = Callable[[ToolStep], Awaitable[ToolResult]]


class Stage:
    """A step around the run's calls: a subclass overrides the hooks it needs, and each
    hook it leaves passes the call on unchanged."""

    def holds(self, run: RunScope) -> bool:
        """At a turn boundary, before replies are delivered: whether the run stops here
        and waits rather than ask the model (it waits until what it waits for ends:
        `workflows.waits`)."""
        return False

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        """The turn's model call: `ask()` is the rest of the pipeline and the call."""
        return await ask()

    def before_tools(
        self, run: RunScope, calls: Sequence[ToolCall], tools: dict[str, ToolDefinition]
    ) -> bool:
        """Before an answer's calls run, all of them at once: True when it made some
        wait for a person (the run then moves to a stop point)."""
        return False

    async def around_tool(self, step: ToolStep, run_tool: RunTool) -> ToolResult:
        """One tool call: `run_tool(step)` is the rest of the pipeline and the call."""
        return await run_tool(step)
