"""The inputs and outputs of a run's activities: model calls, tool calls, the tool
catalogue and notifications."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from tarry.contracts._omit import when_empty, when_none
from tarry.contracts.guardrails import Guardrail, GuardrailHit
from tarry.contracts.memories import MemoryAccess
from tarry.contracts.messages import ChatMessage, DecisionRecord, PendingApproval, Usage
from tarry.contracts.names import ErrorCode, ErrorInfo, NotifyEvent, Phase, WaitingFor
from tarry.contracts.pins import PinnedMessage
from tarry.contracts.run import AgentSpec, AuthNeed, RunInput, Sampling

__all__ = [
    "FOLDED_CATALOGUE_LIMIT",
    "Catalogue",
    "CatalogueRequest",
    "CheckedCatalogue",
    "ContextRef",
    "FinishArguments",
    "LlmRequest",
    "LlmResponse",
    "McpInvocation",
    "MemoryInvocation",
    "Notification",
    "ToolDefinition",
    "ToolInvocation",
    "ToolResult",
]


class FinishArguments(BaseModel):
    """Ends the run. Call it once the task is done."""

    result: str = Field(description="The final result of the task, for the user.")


class ToolDefinition(BaseModel):
    """One tool of a run's catalogue: what the model reads of it and how the run treats
    its calls. Provider-neutral: each model activity turns it into its provider's shape,
    and tools from anywhere (the worker's `@tool` functions, MCP servers) become one."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    """The JSON schema of the call's arguments."""
    idempotent: bool = True
    """False: a call runs at most once; cut short, its outcome is `TOOL_OUTCOME_UNKNOWN`."""
    needs_approval: bool = False
    """In this run, every call waits for a person's decision."""
    server: str | None = Field(default=None, exclude_if=when_none)
    """The MCP server (its name in the worker's config) whose tool this is; null: a
    tool of the worker's own, run by the activity named after it."""
    remote_name: str | None = Field(default=None, exclude_if=when_none)
    """The tool's name on its MCP server; `name` is `SERVER__TOOL`, shortened."""
    acts_as: Literal["owner", "approver"] | None = Field(default=None, exclude_if=when_none)
    """Whose own grant a call carries (an MCP server's `auth = "oauth"`, a tool's
    `@tool(oauth=...)`): the run's owner's, or the approving person's; null: nobody's (the
    server's shared headers). Named in the call's summary."""
    local: bool = Field(default=False, exclude_if=when_empty)
    """Quick and read-only: a call that waits for no decision runs as a local activity,
    inside the run's own workflow task, saving the server round trip of an activity task.
    History records it as a marker with the call's summary."""


class CatalogueRequest(BaseModel):
    """The input of the `tool_catalogue` activity: which tools a run may use."""

    tools: list[str] | None = None
    """By name; null: every tool the worker registers."""
    require_approval: list[str] = []
    """Tools whose calls wait for a decision; `["*"]`: every tool but `finish`."""
    profile: str | None = Field(default=None, exclude_if=when_none)
    """The run's model profile, whose task queue the answer names; null (a workflow
    from before `Catalogue`): the answer is the bare list of tools."""
    agents: list[str] = Field(default=[], exclude_if=when_empty)
    """The sub-agents the run may delegate to (`RunInput.agents`)."""
    models: list[str] | None = Field(default=None, exclude_if=when_none)
    """The model profiles (globs) the person starting the run may use (`[limits]`): a
    sub-agent on another is refused, `MODEL_NOT_ALLOWED`. Null: any (a run's own
    request, which the client checked before it started)."""
    memory: MemoryAccess = Field(
        default=MemoryAccess.OFF, exclude_if=lambda v: v is MemoryAccess.OFF
    )
    """The memory tools the run offers (`RunInput.memory_access`): a worker that keeps no
    memory store refuses it (`SEARCH_UNAVAILABLE`)."""

    @classmethod
    def of(cls, input: RunInput) -> CatalogueRequest:
        """What a run of `input` asks of the workers' catalogue."""
        return cls(
            tools=input.tools,
            require_approval=input.require_approval,
            profile=input.model,
            agents=input.agents,
            memory=input.memory_access,
        )


class Catalogue(BaseModel):
    """The `tool_catalogue` activity's answer: what a run resolves once, at its start,
    from the worker's configuration, and keeps (the workflow cannot read config)."""

    tools: list[ToolDefinition]
    model_queue: str | None = None
    """The task queue the run's model calls go to (`ModelProfile.task_queue`); null:
    the run's own."""
    notify_events: list[NotifyEvent] = Field(default=[], exclude_if=when_empty)
    """The stop points some `[[notify]]` entry of the worker wants to hear of: the run
    schedules a notification only for these, so a run with none adds nothing to history."""
    profiles: dict[str, str | None] = {}
    """Every model profile of the worker, with the task queue its calls go to, so
    `set_model` can refuse a name no worker has and route the calls of the one it
    switches to; empty in answers recorded before `set_model` checked names."""
    agents: dict[str, AgentSpec] = Field(default={}, exclude_if=when_empty)
    """The sub-agents of `CatalogueRequest.agents`, as the worker's config declares them:
    the run keeps them, so a later change of the config never changes a recorded run."""
    payload_limit: int | None = Field(default=None, exclude_if=when_none)
    """The largest payload the worker's data converter can put in history
    (`tarry.temporal.storage.payload_limit`): the run keeps what it hands on under it. Null in
    answers recorded before it."""
    guardrails: list[Guardrail] = Field(default=[], exclude_if=when_empty)
    """The worker's `[[guardrail]]` entries: the run applies them before its own, and
    keeps them, so a later change of the config never changes a recorded run."""
    context_budgets: dict[str, int] = Field(default={}, exclude_if=when_empty)
    """Each model profile's context budget (`ModelProfile.context_budget`), in estimated
    tokens: a run refuses a pin that would make its pins alone more than its profile's
    (`PINS_OVER_BUDGET`). Empty in answers recorded before pins: not checked then."""
    search_index: bool = Field(default=False, exclude_if=lambda v: not v)
    """Whether the worker indexes messages for search (`TARRY_SEARCH_INDEX`): the run
    then hands it each message it writes (`workflows.search_index`)."""

    @model_validator(mode="before")
    @classmethod
    def _from_bare_list(cls, data: Any) -> Any:
        """Answers recorded before `Catalogue` are the bare list of tools."""
        return {"tools": data} if isinstance(data, list) else data


class CheckedCatalogue(BaseModel):
    """The `checked_catalogue` activity's answer to a client about to start a run: why the
    worker would refuse the run, or the catalogue the run would resolve, which the client
    starts it with (`WorkflowInput.catalogue`) so that the run does not ask again."""

    refusal: ErrorInfo | None = None
    catalogue: Catalogue | None = None
    """Null with no refusal: the run resolves its catalogue itself (one too large to
    carry in a start request, `FOLDED_CATALOGUE_LIMIT`)."""


FOLDED_CATALOGUE_LIMIT = 64 * 1024
"""The largest catalogue, in bytes of JSON, that a worker answers a client's check with:
what it answers goes into the run's start request as it is. A larger one (an MCP server
with many tools) stays with the worker, and the run resolves it in an activity."""


class ContextRef(BaseModel):
    """Names the transcript's first `count` messages, stored once outside history.

    The LLM activity's input carries only the messages added since the last call plus
    this reference, so each turn adds to history what is new in that turn, not the
    whole conversation again (which would grow history with the square of its length)."""

    claim: dict[str, str]
    """The storage driver's claim on the newest stored node of the chain."""
    count: int


class LlmRequest(BaseModel):
    profile: str
    """The model profile name; the worker resolves it to a URL, a model and a key."""
    system: str | None = None
    context: ContextRef | None = None
    """The transcript's stored prefix; null: `messages` is the whole conversation."""
    messages: list[ChatMessage]
    """The messages after `context`'s prefix."""
    turn: int
    tool_definitions: list[ToolDefinition] | None = Field(default=None, exclude_if=when_none)
    """The tools to offer. Sent with a request that starts a stored conversation (no
    `context`), which keeps them; null with a `context`: the ones stored with it."""
    # Runs in flight from before the catalogue (see `LlmResponse.offered_tools`) name
    # their tools instead; left empty, these two are not even serialised.
    tools: list[str] | None = Field(default=None, exclude_if=when_none)
    """Before the catalogue only: the tools to offer, by name; null offers every tool."""
    require_approval: list[str] = Field(default=[], exclude_if=when_empty)
    """Before the catalogue only: the run's gated tools."""
    sampling: Sampling | None = Field(default=None, exclude_if=when_none)
    """The run's overrides of the profile's sampling settings (`RunInput.sampling`)."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=when_none)
    """The JSON Schema the answer must fit (`RunInput.output_schema`), for the provider's
    structured output."""
    hold_words: bool = Field(default=False, exclude_if=lambda v: not v)
    """Observers are not sent the answer's words as the model writes them: an output
    guardrail checks the answer first (`workflows.guardrails`)."""
    fallback_of: str | None = Field(default=None, exclude_if=when_none)
    """The run's own profile, when `profile` answers in its place (its `fallback`)."""
    circuit: bool = Field(default=True, exclude_if=lambda v: v)
    """Whether the worker may refuse the call at once while the profile's circuit is open
    (`LLM_PROVIDER_DOWN`, `activities.circuits`); false once the run has no fallback left."""
    private: bool = Field(default=False, exclude_if=lambda v: not v)
    """The run is sensitive, or under a `pii` guardrail: the call neither reads nor writes
    the response cache."""
    pins: list[PinnedMessage] = Field(default=[], exclude_if=when_empty)
    """The run's pinned messages (`tarry.contracts.pins`): each one the window leaves
    out is sent before it, and all of them count against the context budget. Left out
    while empty, so a run without pins sends what it sent before."""


class LlmResponse(BaseModel):
    message: ChatMessage
    usage: Usage = Usage()
    finish_reason: str | None = None
    model: str | None = None
    """The model that answered, as the provider names it."""
    context: ContextRef | None = None
    """The stored transcript the answer was written to, for the next call to extend."""
    sent_messages: int = 0
    """How many transcript messages fit the profile's context budget and were sent."""
    cached: bool = Field(default=False, exclude_if=lambda v: not v)
    """Answered from the response cache (`ModelProfile.cache`), at no cost."""
    # The tool catalogue as the model activity used to resolve it and send it back with
    # every answer. Only for runs in flight from before the workflow owned the catalogue
    # (their recorded answers carry it, and they read it until their first live step on
    # new code); answers to today's requests leave these empty and out of history.
    offered_tools: list[str] = Field(default=[], exclude_if=when_empty)
    """Before the catalogue only: the tools that were offered."""
    gated_tools: dict[str, dict[str, Any]] = Field(default={}, exclude_if=when_empty)
    """Before the catalogue only: the offered tools whose calls need a decision, with
    their argument schemas."""
    non_idempotent_tools: list[str] = Field(default=[], exclude_if=when_empty)
    """Before the catalogue only: the offered tools that must not run twice."""


class ToolInvocation(BaseModel):
    run_id: str
    """The workflow id, or a sub-agent's lead's: it names the run's workspace."""
    call_id: str
    arguments: str
    """The model's raw argument text; the tool host parses and validates it."""
    decision: DecisionRecord | None = Field(default=None, exclude_if=when_none)
    """How a gated call was approved, for its span (`activities.traces`): a call nobody
    had to decide on has none."""
    owner: str | None = Field(default=None, exclude_if=when_none)
    """The run's owner, for a call that carries a person's grant (`ToolDefinition.acts_as`):
    whose it is with `owner` (with `approver`: the decision's `user`); null for others."""


class McpInvocation(ToolInvocation):
    """The input of the `mcp_tool` activity: a call of `tool` on the worker's `server`."""

    server: str
    tool: str


class MemoryInvocation(ToolInvocation):
    """The input of the `remember`, `recall` and `forget` activities: a memory tool's call,
    with what the run knows of it and the store does not."""

    run: str
    """The run whose call it is (a sub-agent's own id; `run_id` is its lead's workspace)."""
    scope: str
    """The run's memory scope (`RunInput.memory_scope`, or its owner): whose memories."""
    turn: int


class ToolResult(BaseModel):
    """What a tool call gives back; its JSON is the `content` of the tool message."""

    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    blocks: list[dict[str, Any]] | None = Field(default=None, exclude_if=when_none)
    """An MCP result's content blocks as the server gave them, when any is not text:
    kept on the tool message (`ChatMessage.blocks`), summarised in `data` for the model."""
    guardrails: list[GuardrailHit] = Field(default=[], exclude_if=when_empty)
    """The guardrails that redacted or blocked the result (`workflows.guardrails`),
    kept on the tool message (`ChatMessage.guardrails`); never set by a tool."""
    acting_for: str | None = Field(default=None, exclude_if=when_none)
    """The person whose own grant the call carried (`auth = "oauth"`): kept on the tool
    message (`ChatMessage.acting_for`), its span and audit; never the token."""

    @classmethod
    def success(cls, data: Any) -> ToolResult:
        return cls(ok=True, data=data)

    @classmethod
    def failure(
        cls, code: ErrorCode, message: str, details: dict[str, Any] | None = None
    ) -> ToolResult:
        return cls(ok=False, error=ErrorInfo(code=code, message=message, details=details))

    def data_text(self) -> str:
        """What the result says, as text: its data if a string, else its JSON."""
        if isinstance(self.data, str):
            return self.data
        return json.dumps(self.data, ensure_ascii=False)

    def to_content(self) -> str:
        """Tool message content: `{"ok": true, "data": ...}` or `{"ok": false, "error": {...}}`."""
        if self.ok:
            return self.model_dump_json(include={"ok", "data"})
        return self.model_dump_json(include={"ok", "error"}, exclude_none=True)


class Notification(BaseModel):
    """The `notify` activity's input: a stop point of a run, told to the receivers of the
    worker's `[[notify]]` entries that want its `event`. What is secret (receivers' URLs
    and secrets, the key that signs action links) stays in the worker's config."""

    id: str
    """The same on every retry (`Tarry-Event-Id`), so a receiver takes it once."""
    event: NotifyEvent
    run_id: str
    phase: Phase
    waiting_for: WaitingFor | None = None
    pending_approvals: list[PendingApproval] = []
    auth_needed: list[AuthNeed] = Field(default=[], exclude_if=when_empty)
    """With `waiting_for: auth`: who must connect which server (each one's `connect`
    link in the payload)."""
    summary: str = ""
    """One short paragraph for a person: what the run said last, what it wants to run,
    how it ended."""
    owner: str | None = Field(default=None, exclude_if=when_none)
    """The run's owner, readers and writers (`tarry.core.ownership`): a link goes only to a
    receiver who may use it."""
    readers: list[str] = Field(default=[], exclude_if=when_empty)
    writers: list[str] = Field(default=[], exclude_if=when_empty)
