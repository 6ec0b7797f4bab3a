"""The durable contracts of an agent run.

Everything here crosses a process boundary and lands in Temporal history: the
workflow's input and result, its signals, updates and queries, and the inputs
and outputs of its activities. A run in flight must still decode these after an
upgrade, so every field added later needs a default, and names never change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Self

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from temporalio.common import SearchAttributeKey

from tarry.rules import ApprovalRule

__all__ = [
    "AGENT_TOOL_PREFIX",
    "CATALOGUE_CHECK_ACTIVITY",
    "CATALOGUE_CHECK_WORKFLOW",
    "COST_ATTRIBUTE",
    "DEFAULT_TASK_QUEUE",
    "FINISH_TOOL",
    "INTERRUPTED_NOTE",
    "LLM_ACTIVITY",
    "MAX_INPUT_BYTES",
    "MAX_RUN_ID_LENGTH",
    "MCP_TOOL_ACTIVITY",
    "MODEL_ATTRIBUTE",
    "NOTIFY_ACTIVITY",
    "PAGE_ACTIVITY",
    "PHASE_ATTRIBUTE",
    "RUN_ID_PATTERN",
    "SEARCH_ATTRIBUTES",
    "SUMMARY_MEMO",
    "TEMPORAL_UI",
    "TOOL_CATALOGUE_ACTIVITY",
    "TRANSCRIPT_PAGE_BYTES",
    "TURNS_ATTRIBUTE",
    "WAITING_FOR_ATTRIBUTE",
    "WORKFLOW_TYPE",
    "AgentArguments",
    "AgentReport",
    "AgentSpec",
    "ApprovalDefault",
    "ApprovalRule",
    "Budget",
    "BudgetRaise",
    "Catalogue",
    "CatalogueRequest",
    "ChatMessage",
    "ContextRef",
    "Decision",
    "DecisionRecord",
    "ErrorCode",
    "ErrorInfo",
    "FinishArguments",
    "FunctionCall",
    "LlmRequest",
    "LlmResponse",
    "McpInvocation",
    "Mode",
    "Notification",
    "NotifyEvent",
    "PauseRequest",
    "PendingApproval",
    "Phase",
    "ReplyPolicy",
    "Retrying",
    "RunInput",
    "RunResult",
    "RunState",
    "Sampling",
    "StopRequest",
    "StoredPage",
    "Timeouts",
    "ToolCall",
    "ToolDefinition",
    "ToolInvocation",
    "ToolResult",
    "TranscriptAnswer",
    "TranscriptPage",
    "TranscriptPageRef",
    "TranscriptQuery",
    "Usage",
    "UserInput",
    "WaitingFor",
    "approvers_of",
    "may_decide",
    "reply_problem",
    "run_id_problem",
]

WORKFLOW_TYPE = "AgentRun"
DEFAULT_TASK_QUEUE = "tarry"
LLM_ACTIVITY = "call_llm"
TOOL_CATALOGUE_ACTIVITY = "tool_catalogue"
CATALOGUE_CHECK_WORKFLOW = "CatalogueCheck"
"""A short workflow, not a run, that asks a worker whether it would refuse a run's tools,
agents or model profile (the `catalogue_check` activity): the client asks it before it
starts a run, so a refused start leaves nothing behind in `tarry list`."""
CATALOGUE_CHECK_ACTIVITY = "catalogue_check"
PAGE_ACTIVITY = "store_transcript_page"
"""The activity that moves a run's older messages into a page in the payload store."""
MCP_TOOL_ACTIVITY = "mcp_tool"
"""The activity that calls a tool of an MCP server; its summary names the server and tool."""
NOTIFY_ACTIVITY = "notify"
"""The activity that tells the receivers of the worker's `[[notify]]` entries of a run's
stop point (`Notification`)."""
FINISH_TOOL = "finish"
AGENT_TOOL_PREFIX = "agent__"
"""A run offers each agent of `RunInput.agents` as the tool `agent__NAME`."""
INTERRUPTED_NOTE = "[interrupted by the user]"
"""How the model reads an answer of its own that a `stop` cut short."""
MAX_INPUT_BYTES = 4 * 1024 * 1024
"""The largest reply, in UTF-8 bytes, that the client sends and `send` accepts. Replies
over the storage threshold leave history for the payload store, so this bounds what one
message adds to every model call, not to history."""

SUMMARY_MEMO = "summary"
"""The memo key of a run's summary, the first line of its prompt (or a sub-agent's task)."""

# Search attributes, upserted on every phase change, so operators can list runs by phase.
PHASE_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryPhase")
TURNS_ATTRIBUTE = SearchAttributeKey.for_int("TarryTurns")
MODEL_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryModel")
WAITING_FOR_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryWaitingFor")
COST_ATTRIBUTE = SearchAttributeKey.for_float("TarryCostUsd")
"""The run's estimated cost so far, from its profiles' prices: `TarryCostUsd > 5`."""
SEARCH_ATTRIBUTES = (
    PHASE_ATTRIBUTE,
    TURNS_ATTRIBUTE,
    MODEL_ATTRIBUTE,
    WAITING_FOR_ATTRIBUTE,
    COST_ATTRIBUTE,
)


class Phase(StrEnum):
    """Where a run stands: working, waiting for a person, or ended for good."""

    RUNNING = "Running"
    WAITING_USER = "WaitingUser"
    COMPLETED = "Completed"
    FAILED = "Failed"

    @property
    def ended(self) -> bool:
        return self in (Phase.COMPLETED, Phase.FAILED)


class WaitingFor(StrEnum):
    """What a `WaitingUser` run waits for."""

    INPUT = "input"
    APPROVAL = "approval"
    BUDGET = "budget"
    """The run spent its budget: `raise_budget` lets it go on."""
    MODEL = "model"
    """The model kept failing past `Timeouts.llm_ask_after`: `retry`, a reply (retried
    with it added) or `set_model` and `retry` let it go on; `error` says what failed."""
    AGENT = "agent"
    """A sub-agent this run delegated to waits for a person (`waiting_on` names it):
    answering that run lets this one go on."""


class NotifyEvent(StrEnum):
    """A stop point a `[[notify]]` entry of the worker's config may be told of."""

    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_BUDGET = "waiting_for_budget"
    ENDED = "ended"
    """Completed or failed."""


class ApprovalDefault(StrEnum):
    """What happens to a gated call nobody decided on before its deadline."""

    REJECT = "reject"
    APPROVE = "approve"


class ReplyPolicy(StrEnum):
    """What a reply does that arrives while the agent works (the run is `Running`); a
    run that waits takes every reply at once, whatever its policy."""

    QUEUE = "queue"
    """It waits for the next turn boundary: the model or tool call in flight ends first."""
    INTERRUPT = "interrupt"
    """The model call in flight is cancelled, the words it had written are kept marked
    `interrupted`, and the model is asked again at once with the reply. A running tool
    call ends first: its effects may be half done otherwise."""
    REJECT = "reject"
    """It is refused with `RUN_BUSY` and enters nothing: send it again once the run waits."""


class Mode(StrEnum):
    """What an answer without tool calls means: wait for the user, or the task is done."""

    CHAT = "chat"
    """An answer without tool calls waits for the user."""
    TASK = "task"
    """An answer without tool calls completes the run."""


class ErrorCode(StrEnum):
    """Structured codes carried by errors, warnings and failed tool results."""

    LLM_AUTH_FAILED = "LLM_AUTH_FAILED"
    """The provider refused the key (401/403): not retried; the run fails naming the profile,
    and `tarry resume` goes on once the key is fixed."""
    LLM_RATE_LIMITED = "LLM_RATE_LIMITED"
    """The provider said 429: retried, waiting `Retry-After` when it gives one."""
    LLM_TIMEOUT = "LLM_TIMEOUT"
    """A model call took longer than its profile's `request_timeout`: retried."""
    LLM_HTTP_ERROR = "LLM_HTTP_ERROR"
    """A connection error, 408, 409 or 5xx (retried for `timeouts.llm_retry_window`), or
    another 4xx (not retried)."""
    LLM_BAD_RESPONSE = "LLM_BAD_RESPONSE"
    """A 2xx answer that is not JSON or has no message: asked again up to
    `bad_response_attempts` times, then the run fails."""
    LLM_UNKNOWN_PROFILE = "LLM_UNKNOWN_PROFILE"
    """The run names a model profile no worker has; the message lists the profiles there are."""
    LLM_TRUNCATED = "LLM_TRUNCATED"
    """A warning: the answer hit the model's length limit and is kept as it is."""
    LLM_CONTEXT_MISSING = "LLM_CONTEXT_MISSING"
    """The worker cannot read the stored conversation: that call sends the whole conversation
    once."""
    TOOL_INVALID_ARGUMENTS = "TOOL_INVALID_ARGUMENTS"
    """A tool call's arguments are not JSON or do not fit its schema: the model reads it and
    may try again."""
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    """A tool the run does not have; at start, a name in `tools` or `require_approval` no
    worker has, or one in `agents` no worker's config file has, which refuses the run."""
    TOOL_FAILED = "TOOL_FAILED"
    """The tool raised: the model reads the error."""
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    """The tool ran past `timeouts.tool` on every attempt."""
    TOOL_FORBIDDEN = "TOOL_FORBIDDEN"
    """A path that leaves the run's workspace."""
    TOOL_REJECTED = "TOOL_REJECTED"
    """A person (or a stop) rejected a gated call: the model reads the reason."""
    TOOL_APPROVAL_EXPIRED = "TOOL_APPROVAL_EXPIRED"
    """Nobody decided on a gated call before its deadline, and its default is to reject."""
    TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
    """A non-idempotent tool's single attempt was cut short: it may or may not have taken
    effect."""
    AGENT_FAILED = "AGENT_FAILED"
    """A sub-agent's run (`agent__NAME`) failed or was stopped: its tool result, which the
    delegating run's model reads; the message says why."""
    FORK_POINT_INVALID = "FORK_POINT_INVALID"
    """A fork `at` a message that is not one of the run's user messages: the error lists
    the positions of those."""
    RETRY_NOT_WAITING = "RETRY_NOT_WAITING"
    """A `retry` of a run that is not waiting for its model: reply to it instead."""
    APPROVAL_NOTHING_PENDING = "APPROVAL_NOTHING_PENDING"
    """A decision on a run with no gated call waiting."""
    APPROVAL_UNKNOWN_CALL = "APPROVAL_UNKNOWN_CALL"
    """A decision naming a call the run is not waiting on."""
    APPROVAL_ALREADY_DECIDED = "APPROVAL_ALREADY_DECIDED"
    """A second decision on a call: the first one stands."""
    APPROVAL_INVALID_ARGUMENTS = "APPROVAL_INVALID_ARGUMENTS"
    """Edited arguments that do not fit the tool's schema."""
    APPROVAL_NOT_ALLOWED = "APPROVAL_NOT_ALLOWED"
    """A decision by someone who is not one of the call's approvers (`RunInput.approvers`):
    nothing is decided."""
    ENGINE_ABORTED = "ENGINE_ABORTED"
    """`stop` while the run was working: the run fails, its transcript kept."""
    ENGINE_MAX_TURNS = "ENGINE_MAX_TURNS"
    """A warning: `max_turns` model calls since the last reply; the run waits for the user."""
    ENGINE_LOOP_DETECTED = "ENGINE_LOOP_DETECTED"
    """A warning: the same failing call `max_repeated_failures` times; the run waits for the
    user."""
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """A warning: the run has spent its budget and waits (`waiting_for: budget`) until it is
    raised."""
    BUDGET_INVALID = "BUDGET_INVALID"
    """`raise_budget` with no limit, or one not above what the run has spent: nothing changes."""
    OUTPUT_INVALID = "OUTPUT_INVALID"
    """A task run's final answer does not fit `output_schema`, again after one repair: the run
    fails."""
    INPUT_EMPTY = "INPUT_EMPTY"
    """An empty reply: refused before it enters history."""
    INPUT_TOO_LARGE = "INPUT_TOO_LARGE"
    """A reply over 4 MiB (or a request body over the API's limit): refused whole."""
    INPUT_INVALID = "INPUT_INVALID"
    """Input of the wrong shape: text that is not valid UTF-8, a field the API does not take."""
    RUN_ENDED = "RUN_ENDED"
    """The run has ended: reply refused (`tarry resume` goes on with it)."""
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    """No run has that id."""
    RUN_BUSY = "RUN_BUSY"
    """A reply while the agent works, to a run whose `on_reply_while_running` is `reject`:
    nothing entered the run; send it again once the run waits."""
    RUN_NOT_SERVED = "RUN_NOT_SERVED"
    """No worker polls the run's task queue, so it cannot answer: start `tarry worker` or
    `tarry dev`."""
    RUN_NOT_ENDED = "RUN_NOT_ENDED"
    """`resume` of a run that is still going: reply to it instead."""
    RUN_EXISTS = "RUN_EXISTS"
    """A start under the id of a run that exists, open or ended: nothing is started."""
    RUN_ID_INVALID = "RUN_ID_INVALID"
    """An id outside the rule: 1 to 200 letters, digits, `-`, `_`, `.`, `:` or `@`, not
    starting with a dot."""
    SCHEDULE_NOT_FOUND = "SCHEDULE_NOT_FOUND"
    """No schedule has that name: `tarry schedule list` shows the schedules there are."""
    SCHEDULE_EXISTS = "SCHEDULE_EXISTS"
    """A schedule of that name exists already: nothing is created."""
    SCHEDULE_INVALID = "SCHEDULE_INVALID"
    """A schedule Temporal cannot keep: a name outside the run id rule (or too long for its
    runs' ids), neither or both of `cron` and `every`, a cron expression, interval or time
    zone it cannot read."""
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    """An `Idempotency-Key` sent again with a different body: nothing is started."""
    TEMPORAL_UNAVAILABLE = "TEMPORAL_UNAVAILABLE"
    """Temporal did not answer in time, or refused the call (a busy or restarting server):
    nothing was changed that a retry could repeat; try again."""
    UNAUTHORIZED = "UNAUTHORIZED"
    """An API request without a valid token."""
    PAYLOAD_NOT_STORED = "PAYLOAD_NOT_STORED"
    """The payload store refused a payload (over its limit, or unusable)."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """What a run would carry on is over the payload store's limit (or Temporal's 2 MB
    without a store), after its older messages went into pages: the run waits for a person
    instead of failing every workflow task. A reply goes on with it; a stop ends it."""
    RUN_TASK_FAILING = "RUN_TASK_FAILING"
    """The run's workflow task fails at every attempt (a worker that cannot decode its
    payloads, a bug): it cannot answer or move until a worker can complete its task. The
    message gives Temporal's reason."""
    PAYLOAD_MISSING = "PAYLOAD_MISSING"
    """The payload store lacks a stored page of a run's transcript (a client without the
    workers' storage directory or bucket), or holds it damaged."""
    ACTION_LINK_INVALID = "ACTION_LINK_INVALID"
    """An action link whose token was not signed with this API's action key (altered,
    or made for another deployment), or an API with no action key: nothing is decided."""
    ACTION_LINK_EXPIRED = "ACTION_LINK_EXPIRED"
    """An action link used after its call's approval deadline (or the link's lifetime,
    `TARRY_ACTION_LINK_TTL`): nothing is decided."""
    NOTIFY_FAILED = "NOTIFY_FAILED"
    """A notification's receiver could not be reached or answered 5xx, 408 or 429:
    retried with backoff for a day; another 4xx is not retried."""
    UPDATE_FAILED = "UPDATE_FAILED"
    """An update failed in a way Tarry has no code for; its message is Temporal's."""


class ErrorInfo(BaseModel):
    code: ErrorCode
    message: str
    details: dict[str, Any] | None = None


def _empty(value: object) -> bool:
    return not value


def _none(value: object) -> bool:
    return value is None


def _queue(value: object) -> bool:
    return value is ReplyPolicy.QUEUE


# --- Messages, in the OpenAI chat format -----------------------------------


class FunctionCall(BaseModel):
    name: str
    arguments: str
    """The model's raw argument text; it is meant to be JSON but may not be."""


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class DecisionRecord(BaseModel):
    """How a gated tool call was decided: kept with its tool message, never sent to the model."""

    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    """The edited arguments the tool ran with, when a person edited them."""
    by: Literal["signal", "update", "deadline", "stop", "rule"]
    """How it was decided: this name was taken before people were named, and names never
    change, so the person is `user`. `rule`: by one of the run's approval rules, or as a
    person decided an earlier call and asked to be remembered (`user` says which)."""
    at: datetime
    source: str | None = Field(default=None, exclude_if=_none)
    """The door the decision came through, as `Decision.source` named it (`mcp`, `link`)."""
    user: str | None = Field(default=None, exclude_if=_none)
    """Who decided (`Decision.by`), or who stopped the run for a call a stop rejected;
    `rule N` (the run's Nth approval rule, from 1) or `remembered` (an earlier decision
    made with `remember`); null for a deadline's default and for decisions recorded
    before people were named."""
    remember: Literal["run"] | None = Field(default=None, exclude_if=_none)
    """A person's decision that stands for the like calls after it (`Decision.remember`)."""


class ChatMessage(BaseModel):
    """One message of the transcript, as `chat.completions` takes it."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    decision: DecisionRecord | None = None
    """Transcript metadata on a gated call's tool message; not part of what the model sees."""
    interrupted: bool = False
    """An answer a `stop`, or a reply under `ReplyPolicy.INTERRUPT`, cut short: the words
    the model had written by then."""
    by: str | None = Field(default=None, exclude_if=_none)
    """Transcript metadata on a reply: who sent it (`UserInput.by`); not sent to the model."""
    blocks: list[dict[str, Any]] | None = Field(default=None, exclude_if=_none)
    """Transcript metadata on an MCP tool's message: its content blocks (images, audio,
    resources) exactly as the server gave them; the model reads their summary."""

    def for_model(self) -> dict[str, Any]:
        """The message as the provider takes it: no nulls, no Tarry metadata; an
        interrupted answer says so in its text, the one place a model reads it."""
        message = self.model_dump(
            mode="json", exclude_none=True, exclude={"decision", "interrupted", "blocks", "by"}
        )
        if self.interrupted:
            message["content"] = f"{self.content or ''} {INTERRUPTED_NOTE}".lstrip()
        return message


class Usage(BaseModel):
    prompt_tokens: int = 0
    """All input tokens, as OpenAI counts them: those read from and written to a prompt
    cache included. Billed at full price: `prompt_tokens - cache_read_tokens -
    cache_write_tokens`."""
    completion_tokens: int = 0
    total_tokens: int = 0
    # Left out while 0, so usage recorded before prompt caching and prices encodes as it did.
    cache_read_tokens: int = Field(default=0, exclude_if=_empty)
    """Input tokens read from the provider's prompt cache (billed at about a tenth)."""
    cache_write_tokens: int = Field(default=0, exclude_if=_empty)
    """Input tokens written to the provider's prompt cache (billed at about 1.25 times)."""
    cost_usd: float = Field(default=0.0, exclude_if=_empty)
    """Estimated from the profile's prices (`ModelProfile.prices`) by the worker; 0, and
    left out of payloads, where the profile has none."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )


class Sampling(BaseModel):
    """How the model samples its answer: a profile's settings, and a run's overrides of
    them (`RunInput.sampling`). Unset fields are the provider's defaults (or the
    profile's, for a run) and are not serialised, so a run's input carries only what it
    overrides."""

    temperature: float | None = Field(default=None, ge=0, le=2, exclude_if=_none)
    top_p: float | None = Field(default=None, gt=0, le=1, exclude_if=_none)
    max_tokens: int | None = Field(default=None, ge=1, exclude_if=_none)
    """The longest answer, in tokens; past it the answer is cut (`LLM_TRUNCATED`)."""
    stop: list[str] | None = Field(default=None, exclude_if=_none)
    """Texts that end the answer where the model writes them."""
    extra_body: dict[str, Any] | None = Field(default=None, exclude_if=_none)
    """Merged into the request body as it is: a provider's own options (e.g. OpenAI's
    `reasoning_effort`, Anthropic's `thinking`)."""
    tool_choice: str | None = Field(default=None, min_length=1, exclude_if=_none)
    """Whether the model must call a tool: `auto` (it decides; the default), `required`
    (some tool), `none` (no tool), or one tool's name (that tool). Each provider is
    sent its own shape of it; a small model that rarely calls tools on its own can be
    made to."""

    def overridden_by(self, run: Sampling | None) -> Sampling:
        """These settings (a profile's) with a run's set fields on top; `extra_body`
        merges key by key, the run's keys winning."""
        mine = self.model_dump(include=set(Sampling.model_fields), exclude_none=True)
        theirs = run.model_dump(exclude_none=True) if run else {}
        extra = (self.extra_body or {}) | ((run.extra_body if run else None) or {})
        return Sampling.model_validate(mine | theirs | {"extra_body": extra or None})


# --- Workflow input, result and messages -----------------------------------


class Timeouts(BaseModel):
    """How long each step may take. JSON takes seconds (`30`) or ISO 8601 (`"PT30S"`)."""

    llm_attempt: timedelta = timedelta(minutes=5)
    """One HTTP call to the model, including waiting for the whole answer."""
    llm_heartbeat: timedelta = timedelta(seconds=10)
    """How soon a call whose worker died is noticed and retried elsewhere."""
    llm_retry_window: timedelta = timedelta(hours=2)
    """How long transient faults (5xx, 429, timeouts, refused connections) are retried."""
    llm_ask_after: timedelta = timedelta(minutes=5)
    """How long a model call failing the same transient way is retried before the run
    asks a person (`waiting_for: "model"`). At `llm_retry_window` or more the run never
    asks: it fails once the window has passed, as runs did before."""
    tool: timedelta = timedelta(minutes=2)
    """One attempt of one tool call."""


class Budget(BaseModel):
    """What a run may spend, in all: at a turn boundary where it has spent either, it
    waits (`waiting_for: "budget"`) until `raise_budget` raises it."""

    max_total_tokens: int | None = Field(default=None, gt=0)
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Estimated from the profiles' prices: a profile without prices costs nothing."""


class BudgetRaise(Budget):
    """The payload of `raise_budget`: the limits that replace the ones it names, and who
    raised them. Payloads recorded before people were named decode as one without `by`."""

    by: str | None = Field(default=None, exclude_if=_none)
    """Who raised it; null (the Temporal UI, an older client) is recorded as `temporal-ui`."""

    def limits(self) -> dict[str, Any]:
        """The limits it names, to replace the run's own with."""
        return self.model_dump(include=set(Budget.model_fields), exclude_none=True)


class RunInput(BaseModel):
    """How to start a run. Only `prompt` is needed; `{"prompt": "..."}` is a valid input."""

    prompt: str = ""
    """The first user message; empty starts the run in `WaitingUser`."""
    system: str | None = None
    model: str = "default"
    """The name of a model profile configured on the workers, never a key or URL."""
    tools: list[str] | None = None
    """The tools this run may use; null allows every tool the workers register."""
    mode: Mode = Mode.CHAT
    max_turns: int = Field(default=20, ge=1)
    """LLM calls allowed since the last user input before the run asks the user."""
    max_repeated_failures: int = Field(default=3, ge=1)
    """How often the same failing tool call may repeat before the run asks the user."""
    bad_response_attempts: int = Field(default=3, ge=1)
    """Calls in a row answered with garbage (`LLM_BAD_RESPONSE`) before the run fails."""
    timeouts: Timeouts = Timeouts()
    require_approval: list[str] = []
    """Tools whose calls wait for a person's decision; `["*"]` is every tool but `finish`."""
    approval_timeout: timedelta | None = None
    """How long a gated call waits for a decision; null waits forever."""
    approval_default: ApprovalDefault = ApprovalDefault.REJECT
    continue_as_new_after_turns: int = Field(default=50, ge=1)
    """LLM calls per run of the continue-as-new chain: the run hands its state to a fresh
    run (same workflow id) at the first safe point after this many, or sooner when
    Temporal suggests it, so a run of any length keeps a short history."""
    sampling: Sampling | None = Field(default=None, exclude_if=_none)
    """Overrides of the model profile's sampling settings for this run; null: the
    profile's. Left out while null, so inputs from before it encode as they did."""
    budget: Budget | None = Field(default=None, exclude_if=_none)
    """Tokens and cost the run may spend before it waits for a person to raise them."""
    on_reply_while_running: ReplyPolicy = Field(default=ReplyPolicy.QUEUE, exclude_if=_queue)
    """What a reply does that arrives while the agent works: queued (the default),
    interrupts the model call, or refused (`RUN_BUSY`). `set_reply_policy` changes it.
    Left out while `queue`, so inputs from before it encode as they did."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=_none)
    """Task mode: the JSON Schema the final answer must fit. The model is asked for it
    (OpenAI `response_format: json_schema`), shown its errors once if it misses, and the
    run fails `OUTPUT_INVALID` if it misses again."""
    started_by: str | None = Field(default=None, exclude_if=_none)
    """Who started the run, and so sent `prompt`: set by the client that starts it, from
    its caller (a value sent to the API is replaced by the caller's)."""
    approvers: dict[str, list[str]] = Field(default={}, exclude_if=_empty)
    """Who may decide a gated call: a tool's name (or `*`, for the tools not named) to the
    users and groups (`[api.groups]`) who may; a tool in neither: anyone. A decision by
    anyone else is refused (`APPROVAL_NOT_ALLOWED`). Left out while empty, so inputs from
    before it encode as they did."""
    approval_rules: list[ApprovalRule] = Field(default=[], exclude_if=_empty)
    """Standing decisions on tool calls, the first that matches a call deciding it:
    approve without asking, reject with a reason, or ask a person (even for a tool outside
    `require_approval`); a call none matches is gated as `require_approval` says. See
    `tarry.rules`. Left out while empty, so inputs from before it encode as they did."""

    agents: list[str] = Field(default=[], exclude_if=_empty)
    """The sub-agents (`[agents.NAME]` of the workers' config file) this run may delegate
    to, each offered as the tool `agent__NAME`; a name no worker has refuses the run at
    its start. Left out while empty, so inputs from before it encode as they did."""

    @field_validator("output_schema")
    @classmethod
    def _a_json_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return _json_schema(schema)


def _json_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """`schema`, checked to be a JSON Schema (`output_schema` of a run or an agent)."""
    if schema is not None:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ValueError(f"output_schema is not a JSON Schema: {e.message}") from None
    return schema


class AgentSpec(BaseModel):
    """A sub-agent, as `[agents.NAME]` of the worker's config file declares it and a run
    that delegates to it resolves it at its start (`Catalogue.agents`): the settings of
    the child run each `agent__NAME` call starts, with the call's `task` as its prompt."""

    description: str = ""
    """What the delegating model reads of the tool `agent__NAME`: when to hand it a task."""
    system: str | None = None
    """The child run's system prompt."""
    tools: list[str] | None = None
    """The child run's tools; null: every tool the workers register."""
    model: str = "default"
    """The child run's model profile."""
    max_turns: int = Field(default=20, ge=1)
    require_approval: list[str] = []
    """The child's gated tools: their calls wait for a person as any run's do."""
    mode: Mode = Mode.TASK
    """`task`: the child's first answer without tool calls is its result. `chat`: such an
    answer asks the person, and the child ends with `finish`."""
    output_schema: dict[str, Any] | None = None
    """Task mode: the JSON Schema the child's result must fit; the result is then the
    delegating run's tool result as JSON."""

    @field_validator("output_schema")
    @classmethod
    def _a_json_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return _json_schema(schema)


class AgentArguments(BaseModel):
    """Hands a task to a sub-agent, which works on it as a run of its own and answers
    with its result."""

    task: str = Field(description="The task, with everything the agent needs to know.")


class AgentReport(BaseModel):
    """The payload of the `agent_status` signal: a sub-agent's run tells the run that
    delegated to it whether it now waits for a person, at each of its phase changes."""

    run_id: str
    waiting_for: WaitingFor | None = None
    """What the child waits for; null: it works (or has ended)."""
    seq: int = 0
    """Counts the child's reports: the parent keeps the latest, whatever order they arrive in."""


RUN_ID_PATTERN = r"^(?!\.)[A-Za-z0-9_.:@-]{1,200}$"
"""What a run id may be, at every door (client, CLI, API, MCP): 1 to 200 letters, digits,
`-`, `_`, `.`, `:` and `@`, not starting with a dot. An id names the run's workspace
directory and is shown in the inbox and the Temporal UI, so `/`, `..`, control and
right-to-left override characters, which would escape the one or spoof the others, are
never an id; Temporal's own limit (1,000 characters) is far above any id a person reads."""
MAX_RUN_ID_LENGTH = 200
_RUN_ID = re.compile(RUN_ID_PATTERN)


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` cannot be a run id (see `RUN_ID_PATTERN`), or None when it can."""
    if _RUN_ID.fullmatch(run_id):
        return None
    if not run_id:
        return "a run id cannot be empty"
    if len(run_id) > MAX_RUN_ID_LENGTH:
        return f"a run id has at most {MAX_RUN_ID_LENGTH} characters, not {len(run_id)}"
    if run_id.startswith("."):
        return f"a run id cannot start with a dot: {run_id!r}"
    bad = next(c for c in run_id if not re.fullmatch(r"[A-Za-z0-9_.:@-]", c))
    return f"a run id has only letters, digits and - _ . : @, not {bad!r}: {run_id!r}"


def reply_problem(text: str) -> tuple[ErrorCode, str] | None:
    """Why `text` cannot be a reply (`INPUT_EMPTY`, `INPUT_TOO_LARGE`), or None when it
    can: the one check the client, the `send` validator and the `user_input` signal make."""
    if not text.strip():
        return ErrorCode.INPUT_EMPTY, "the reply is empty"
    if (size := len(text.encode())) > MAX_INPUT_BYTES:
        return (
            ErrorCode.INPUT_TOO_LARGE,
            f"the reply has {size} bytes; the limit is {MAX_INPUT_BYTES}",
        )
    return None


TEMPORAL_UI = "temporal-ui"
"""Who a signal or update without `by` is recorded as: sent straight from the Temporal UI
(or the `temporal` CLI) by an operator, whom Temporal's own access control governs."""


def approvers_of(approvers: dict[str, list[str]], tool: str) -> list[str] | None:
    """Who may decide a call of `tool` under `RunInput.approvers`: the tool's own entry,
    else the `*` entry; None: anyone."""
    return approvers.get(tool, approvers.get("*"))


def may_decide(approvers: list[str] | None, user: str | None, groups: Iterable[str]) -> bool:
    """Whether `user`, a member of `groups`, may decide a call `approvers` may decide.
    A decision without a user is an operator's, straight from Temporal: always allowed."""
    if approvers is None or user is None:
        return True
    return user in approvers or any(group in approvers for group in groups)


class UserInput(BaseModel):
    """A reply: the payload of the `user_input` signal and the `send` update."""

    text: str
    id: str | None = None
    """A client message id; a second message with an id the run has seen is ignored."""
    by: str | None = Field(default=None, exclude_if=_none)
    """Who sent it (kept on its transcript message); null (the Temporal UI, an older
    client) is recorded as `temporal-ui`. Left out while null, so older payloads match."""

    @field_validator("text")
    @classmethod
    def _utf8(cls, text: str) -> str:
        # JSON can carry unpaired surrogates (`"\udcff"`), which no provider accepts.
        try:
            text.encode()
        except UnicodeEncodeError:
            raise ValueError(
                "the text is not valid UTF-8 (it has unpaired surrogates: "
                "often bytes read with the wrong encoding)"
            ) from None
        return text


class StopRequest(BaseModel):
    reason: str | None = None
    by: str | None = Field(default=None, exclude_if=_none)
    """Who stopped the run; null is recorded as `temporal-ui`."""


class PauseRequest(BaseModel):
    """The payload of the `pause` signal (none, from before people were named)."""

    by: str | None = Field(default=None, exclude_if=_none)
    """Who paused the run; null is recorded as `temporal-ui`."""


class Decision(BaseModel):
    """The payload of the `approve` signal and the `decide` update."""

    call_id: str | None = None
    """The call decided on; null decides every pending call."""
    approved: bool
    reason: str | None = None
    """Told to the model when the call is rejected."""
    arguments: dict[str, Any] | None = None
    """Edited arguments to run the call with, checked against the tool's schema."""
    source: str | None = Field(default=None, exclude_if=_none)
    """The door it came through when that is not a person's own client: `mcp` for
    `tarry mcp`, where an assistant may decide without asking its user; `link` for a
    notification's action link, decided as the user it was sent to. Kept with the
    decision (`DecisionRecord.source`); left out while null, so older payloads match."""
    by: str | None = Field(default=None, exclude_if=_none)
    """Who decides (`DecisionRecord.user`); null: an operator straight from Temporal,
    recorded as `temporal-ui` and never refused."""
    groups: list[str] = Field(default=[], exclude_if=_empty)
    """The groups `by` belongs to, as the door that resolved the caller found them in its
    configuration: the run checks `RunInput.approvers` against `by` and these."""
    remember: Literal["run"] | None = Field(default=None, exclude_if=_none)
    """`run`: the run decides the same way, without asking, the later calls of the same
    tool that a person would be asked about for the same reason: those its same approval
    rule asks about, or, for a call no rule asked about, those with the same arguments.
    Not with edited `arguments`, which belong to one call. Left out while null."""


class PendingApproval(BaseModel):
    call_id: str
    tool: str
    arguments: str
    """The model's argument text, as it asked."""
    deadline: datetime | None = None
    approvers: list[str] | None = Field(default=None, exclude_if=_none)
    """The users and groups who may decide it (`RunInput.approvers`); null: anyone."""
    rule: int | None = Field(default=None, exclude_if=_none)
    """The approval rule (from 1) that asks for a decision on it; null: `require_approval`."""


TRANSCRIPT_PAGE_BYTES = 128 * 1024
"""A transcript page stops before this much JSON (but holds at least one message), so a
query answer stays far below the size where payloads go to external storage and the
`temporal` CLI and the Web UI would see a reference instead of text."""


class TranscriptQuery(BaseModel):
    start: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1)
    """At most this many messages; fewer when they pass `TRANSCRIPT_PAGE_BYTES`."""


class TranscriptPage(BaseModel):
    """What the `transcript` query answers: `messages[start:next_start]` of `total`."""

    messages: list[ChatMessage]
    start: int
    total: int

    @property
    def next_start(self) -> int | None:
        """Where the next page starts; None after the last one."""
        end = self.start + len(self.messages)
        return end if end < self.total else None

    @classmethod
    def of(cls, messages: Sequence[ChatMessage], start: int, total: int, limit: int) -> Self:
        """Up to `limit` of `messages` (the transcript's from `start` on), stopping before
        the page's JSON passes `TRANSCRIPT_PAGE_BYTES` (a first message bigger than that
        comes alone)."""
        page: list[ChatMessage] = []
        size = 0
        for message in messages[:limit]:
            size += len(message.model_dump_json())
            if page and size > TRANSCRIPT_PAGE_BYTES:
                break
            page.append(message)
        return cls(messages=page, start=start, total=total)


class TranscriptPageRef(BaseModel):
    """An immutable page of a run's older messages in the payload store: the run keeps
    this reference instead of the messages (see `workflows/pages.py`)."""

    claim: dict[str, str]
    """The storage driver's claim (the file driver's: the SHA-256 digest of the page)."""
    start: int
    """The transcript index of the page's first message."""
    count: int

    @property
    def end(self) -> int:
        return self.start + self.count


class StoredPage(BaseModel):
    """The page activity's input: the messages to store, from transcript index `start`."""

    start: int
    messages: list[ChatMessage]


class TranscriptAnswer(TranscriptPage):
    """What the `transcript` query answers: the messages a run keeps in memory, or,
    from a `start` before them, the references of the stored pages from there on
    (`messages` is then empty; `next_start` is where the pages end). The client reads
    the pages from the payload store (`RunHandle.transcript_page`), so its callers see
    only messages."""

    stored: list[TranscriptPageRef] = []

    @property
    def next_start(self) -> int | None:
        if not self.stored:
            return super().next_start
        end = self.stored[-1].end
        return end if end < self.total else None


class Retrying(BaseModel):
    """A model or tool call that failed and waits for its next attempt: what Temporal
    records of the pending activity, so an outage shows while the run still reads as
    `Running` (the workflow itself does not see an activity's attempts)."""

    call: str
    """`model`, or the tool's name."""
    attempt: int
    """The attempt to come (2 after one failure)."""
    last_error: ErrorInfo | None = None
    next_attempt_at: datetime | None = None


class ForkOrigin(BaseModel):
    """Where a forked run branched off another (`RunHandle.fork`)."""

    run_id: str
    """The run it was forked from, which goes on untouched."""
    at: int = Field(ge=0)
    """The position in that run's transcript, from 0, of the user message the fork sent
    again or replaced."""


class Fork(ForkOrigin):
    """What a forked run starts from: the conversation before message `at` (its first
    message is then the `prompt`: message `at`'s text, or the text that replaced it)."""

    transcript: list[ChatMessage] = []
    """Left out of the input the run hands over: its memory holds the messages then."""


class RunState(BaseModel):
    """What the `state` query answers: small, whatever the length of the run."""

    phase: Phase
    turn: int = 0
    """LLM calls so far."""
    turns_since_input: int = 0
    usage: Usage = Usage()
    last_assistant_text: str | None = None
    error: ErrorInfo | None = None
    warning: ErrorCode | None = None
    pending_inputs: int = 0
    message_count: int = 0
    waiting_for: WaitingFor | None = None
    pending_approvals: list[PendingApproval] = []
    events: int = 0
    """The offset of the run's event stream at this state: `RunHandle.events(events)`
    follows on from exactly here, with the first `message_count` messages already made."""
    turn_events: int = 0
    """The offset where the current turn's events begin: reading from here shows the
    answer in flight from its first word (its events have a `turn` above `turn`)."""
    stop_reason: str | None = None
    """The reason given with `stop`, once a run was stopped."""
    stopped_by: str | None = Field(default=None, exclude_if=_none)
    """Who stopped the run."""
    paused_by: str | None = Field(default=None, exclude_if=_none)
    """Who asked the run to pause, until the next reply is delivered."""
    budget_raised_by: str | None = Field(default=None, exclude_if=_none)
    """Who last raised the run's budget."""
    budget: Budget | None = Field(default=None, exclude_if=_none)
    """The run's budget as it stands (raised or not); null: none."""
    model: str | None = Field(default=None, exclude_if=_none)
    """The model profile `set_model` switched the run to; null: the one it started with."""
    on_reply_while_running: ReplyPolicy = ReplyPolicy.QUEUE
    """What a reply does that arrives while the agent works (`RunInput.on_reply_while_running`,
    or what `set_reply_policy` made it since)."""
    retrying: Retrying | None = Field(default=None, exclude_if=_none)
    """A call being retried (`RunHandle.state` reads it from Temporal, not the run)."""
    forked_from: ForkOrigin | None = Field(default=None, exclude_if=_none)
    """The run and message this run branched off (`RunHandle.fork`); null: not a fork."""
    parent: str | None = Field(default=None, exclude_if=_none)
    """The run that delegated to this one (`agent__NAME`); null: a run of its own."""
    waiting_on: str | None = Field(default=None, exclude_if=_none)
    """With `waiting_for: "agent"`: the sub-agent's run that waits for a person; answer
    that run (by this id) and this one goes on."""


class RunResult(BaseModel):
    """How a run ended: the workflow's result, what `RunHandle.result` returns."""

    phase: Phase
    output: str | None = None
    """The `finish` tool's result, or the last assistant text."""
    error: ErrorInfo | None = None
    usage: Usage = Usage()
    turns: int = 0
    stop_reason: str | None = None
    """The reason given with `stop`, when a stop ended the run."""
    stopped_by: str | None = Field(default=None, exclude_if=_none)
    """Who stopped the run, when a stop ended it."""


# --- Activity contracts -----------------------------------------------------


# The arguments of the built-in `finish` tool, which the workflow itself handles.
# Its docstring and field description are what the model reads.
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
    server: str | None = Field(default=None, exclude_if=_none)
    """The MCP server (its name in the worker's config) whose tool this is; null: a
    tool of the worker's own, run by the activity named after it."""
    remote_name: str | None = Field(default=None, exclude_if=_none)
    """The tool's name on its MCP server; `name` is `SERVER__TOOL`, shortened."""
    local: bool = Field(default=False, exclude_if=_empty)
    """Quick and read-only: a call that waits for no decision runs as a local activity,
    inside the run's own workflow task, saving the server round trip of an activity task.
    History records it as a marker with the call's summary."""


class CatalogueRequest(BaseModel):
    """The input of the `tool_catalogue` activity: which tools a run may use."""

    tools: list[str] | None = None
    """By name; null: every tool the worker registers."""
    require_approval: list[str] = []
    """Tools whose calls wait for a decision; `["*"]`: every tool but `finish`."""
    profile: str | None = Field(default=None, exclude_if=_none)
    """The run's model profile, whose task queue the answer names; null (a workflow
    from before `Catalogue`): the answer is the bare list of tools."""
    agents: list[str] = Field(default=[], exclude_if=_empty)
    """The sub-agents the run may delegate to (`RunInput.agents`)."""


class Catalogue(BaseModel):
    """The `tool_catalogue` activity's answer: what a run resolves once, at its start,
    from the worker's configuration, and keeps (the workflow cannot read config)."""

    tools: list[ToolDefinition]
    model_queue: str | None = None
    """The task queue the run's model calls go to (`ModelProfile.task_queue`); null:
    the run's own."""
    notify_events: list[NotifyEvent] = Field(default=[], exclude_if=_empty)
    """The stop points some `[[notify]]` entry of the worker wants to hear of: the run
    schedules a notification only for these, so a run with none adds nothing to history."""
    profiles: dict[str, str | None] = {}
    """Every model profile of the worker, with the task queue its calls go to, so
    `set_model` can refuse a name no worker has and route the calls of the one it
    switches to; empty in answers recorded before `set_model` checked names."""
    agents: dict[str, AgentSpec] = Field(default={}, exclude_if=_empty)
    """The sub-agents of `CatalogueRequest.agents`, as the worker's config declares them:
    the run keeps them, so a later change of the config never changes a recorded run."""
    payload_limit: int | None = Field(default=None, exclude_if=_none)
    """The largest payload the worker's data converter can put in history
    (`tarry.storage.payload_limit`): the run keeps what it hands on under it. Null in
    answers recorded before it."""

    @model_validator(mode="before")
    @classmethod
    def _from_bare_list(cls, data: Any) -> Any:
        """Answers recorded before `Catalogue` are the bare list of tools."""
        return {"tools": data} if isinstance(data, list) else data


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
    tool_definitions: list[ToolDefinition] | None = Field(default=None, exclude_if=_none)
    """The tools to offer. Sent with a request that starts a stored conversation (no
    `context`), which keeps them; null with a `context`: the ones stored with it."""
    # Runs in flight from before the catalogue (see `LlmResponse.offered_tools`) name
    # their tools instead; left empty, these two are not even serialised.
    tools: list[str] | None = Field(default=None, exclude_if=_none)
    """Before the catalogue only: the tools to offer, by name; null offers every tool."""
    require_approval: list[str] = Field(default=[], exclude_if=_empty)
    """Before the catalogue only: the run's gated tools."""
    sampling: Sampling | None = Field(default=None, exclude_if=_none)
    """The run's overrides of the profile's sampling settings (`RunInput.sampling`)."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=_none)
    """The JSON Schema the answer must fit (`RunInput.output_schema`), for the provider's
    structured output."""


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
    # The tool catalogue as the model activity used to resolve it and send it back with
    # every answer. Only for runs in flight from before the workflow owned the catalogue
    # (their recorded answers carry it, and they read it until their first live step on
    # new code); answers to today's requests leave these empty and out of history.
    offered_tools: list[str] = Field(default=[], exclude_if=_empty)
    """Before the catalogue only: the tools that were offered."""
    gated_tools: dict[str, dict[str, Any]] = Field(default={}, exclude_if=_empty)
    """Before the catalogue only: the offered tools whose calls need a decision, with
    their argument schemas."""
    non_idempotent_tools: list[str] = Field(default=[], exclude_if=_empty)
    """Before the catalogue only: the offered tools that must not run twice."""


class ToolInvocation(BaseModel):
    run_id: str
    """The workflow id, or a sub-agent's lead's: it names the run's workspace."""
    call_id: str
    arguments: str
    """The model's raw argument text; the tool host parses and validates it."""


class McpInvocation(ToolInvocation):
    """The input of the `mcp_tool` activity: a call of `tool` on the worker's `server`."""

    server: str
    tool: str


class ToolResult(BaseModel):
    """What a tool call gives back; its JSON is the `content` of the tool message."""

    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    blocks: list[dict[str, Any]] | None = Field(default=None, exclude_if=_none)
    """An MCP result's content blocks as the server gave them, when any is not text:
    kept on the tool message (`ChatMessage.blocks`), summarised in `data` for the model."""

    @classmethod
    def success(cls, data: Any) -> ToolResult:
        return cls(ok=True, data=data)

    @classmethod
    def failure(
        cls, code: ErrorCode, message: str, details: dict[str, Any] | None = None
    ) -> ToolResult:
        return cls(ok=False, error=ErrorInfo(code=code, message=message, details=details))

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
    summary: str = ""
    """One short paragraph for a person: what the run said last, what it wants to run,
    how it ended."""
