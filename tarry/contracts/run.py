"""A run's input, state and result: what starts it, what it reports, how it ends."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tarry.contracts._closed import NOT_A_BOOLEAN, Closed
from tarry.contracts._omit import when_empty, when_none, when_queue
from tarry.contracts.a2a import RemoteAnswerer, RemoteCallInfo
from tarry.contracts.approval_rules import ApprovalRule
from tarry.contracts.audit import Acting, AuditRecord, Door
from tarry.contracts.guardrails import Guardrail
from tarry.contracts.memories import MemoryAccess, scope_problem
from tarry.contracts.messages import ChatMessage, PendingApproval, Usage
from tarry.contracts.names import (
    ApprovalDefault,
    ErrorCode,
    ErrorInfo,
    Mode,
    Phase,
    ReplyPolicy,
    Share,
    WaitingFor,
    principal_problem,
)

__all__ = [
    "AgentArguments",
    "AgentReport",
    "AgentSpec",
    "Budget",
    "BudgetRaise",
    "Fork",
    "ForkOrigin",
    "Retrying",
    "RunInput",
    "RunResult",
    "RunState",
    "Sampling",
    "Timeouts",
    "principal_problem",
]


def _off(access: MemoryAccess) -> bool:
    return access is MemoryAccess.OFF


def _by_a_person(answerer: RemoteAnswerer) -> bool:
    return answerer is RemoteAnswerer.PERSON


def _scope(scope: str | None) -> str | None:
    if scope is not None and (problem := scope_problem(scope)):
        raise ValueError(f"memory_scope: {problem}")
    return scope


class Sampling(BaseModel):
    """How the model samples its answer: a profile's settings, and a run's overrides of
    them (`RunInput.sampling`). Unset fields are the provider's defaults (or the
    profile's, for a run) and are not serialised, so a run's input carries only what it
    overrides."""

    temperature: Annotated[float | None, NOT_A_BOOLEAN] = Field(
        default=None, ge=0, le=2, exclude_if=when_none
    )
    top_p: Annotated[float | None, NOT_A_BOOLEAN] = Field(
        default=None, gt=0, le=1, exclude_if=when_none
    )
    max_tokens: Annotated[int | None, NOT_A_BOOLEAN] = Field(
        default=None, ge=1, exclude_if=when_none
    )
    """The longest answer, in tokens; past it the answer is cut (`LLM_TRUNCATED`)."""
    stop: list[str] | None = Field(default=None, exclude_if=when_none)
    """Texts that end the answer where the model writes them."""
    extra_body: dict[str, Any] | None = Field(default=None, exclude_if=when_none)
    """Merged into the request body as it is: a provider's own options (e.g. OpenAI's
    `reasoning_effort`, Anthropic's `thinking`)."""
    tool_choice: str | None = Field(default=None, min_length=1, exclude_if=when_none)
    """Whether the model must call a tool: `auto` (it decides; the default), `required`
    (some tool), `none` (no tool), or one tool's name (that tool). Each provider is
    sent its own shape of it; a small model that rarely calls tools on its own can be
    made to."""

    # A run's overrides: a misspelled one must not pass unnoticed (a profile's neither).
    model_config = ConfigDict(extra="forbid")

    def overridden_by(self, run: Sampling | None) -> Sampling:
        """These settings (a profile's) with a run's set fields on top; `extra_body`
        merges key by key, the run's keys winning."""
        mine = self.model_dump(include=set(Sampling.model_fields), exclude_none=True)
        theirs = run.model_dump(exclude_none=True) if run else {}
        extra = (self.extra_body or {}) | ((run.extra_body if run else None) or {})
        return Sampling.model_validate(mine | theirs | {"extra_body": extra or None})


# --- Workflow input, result and messages -----------------------------------


REMOTE_POLL = timedelta(minutes=5)


def _every_five_minutes(poll: timedelta) -> bool:
    """Left out at its default: a run's input from before it is written as it was."""
    return poll == REMOTE_POLL


class Timeouts(Closed):
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
    remote_poll: timedelta = Field(default=REMOTE_POLL, exclude_if=_every_five_minutes)
    """How often a remote A2A agent's task is asked how it stands, should its push
    notifications not come (`workflows.remote_agents`)."""


class Budget(Closed):
    """What a run may spend, in all: at a turn boundary where it has spent either, it
    waits (`waiting_for: "budget"`) until `raise_budget` raises it."""

    # `true` is no number (it would be 1), and `1e309` no limit (infinity).
    max_total_tokens: Annotated[int | None, NOT_A_BOOLEAN] = Field(default=None, gt=0)
    max_cost_usd: Annotated[float | None, NOT_A_BOOLEAN] = Field(
        default=None, gt=0, allow_inf_nan=False
    )
    """Estimated from the profiles' prices: a profile without prices costs nothing."""


class BudgetRaise(Budget):
    """The payload of `raise_budget`: the limits that replace the ones it names, and who
    raised them. Payloads recorded before people were named decode as one without `by`."""

    by: str | None = Field(default=None, exclude_if=when_none)
    """Who raised it; null (the Temporal UI, an older client) is recorded as `temporal-ui`."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door it came through (`tarry.contracts.audit`); null: `temporal-ui`."""

    def limits(self) -> dict[str, Any]:
        """The limits it names, to replace the run's own with."""
        return self.model_dump(include=set(Budget.model_fields), exclude_none=True)


class RunInput(Closed):
    """How to start a run. Only `prompt` is needed; `{"prompt": "..."}` is a valid input.
    A field it does not know is refused (`Closed`), naming the nearest one it does."""

    prompt: str = ""
    """The first user message; empty starts the run in `WaitingUser`."""
    system: str | None = None
    model: str = "default"
    """The name of a model profile configured on the workers, never a key or URL."""
    tools: list[str] | None = None
    """The tools this run may use; null allows every tool the workers register."""
    mode: Mode = Mode.CHAT
    max_turns: Annotated[int, NOT_A_BOOLEAN] = Field(default=20, ge=1)
    """LLM calls allowed since the last user input before the run asks the user."""
    max_repeated_failures: Annotated[int, NOT_A_BOOLEAN] = Field(default=3, ge=1)
    """How often the same failing tool call may repeat before the run asks the user."""
    bad_response_attempts: Annotated[int, NOT_A_BOOLEAN] = Field(default=3, ge=1)
    """Calls in a row answered with garbage (`LLM_BAD_RESPONSE`) before the run fails."""
    max_tool_result_chars: Annotated[int | None, NOT_A_BOOLEAN] = Field(
        default=None, ge=1, exclude_if=when_none
    )
    """The most characters of a tool's result the model reads: a longer one reaches it
    cut, with a note of how much was left out (history keeps the whole result). Null:
    no limit."""
    timeouts: Timeouts = Timeouts()
    require_approval: list[str] = Field(default=[])
    """Tools whose calls wait for a person's decision; `["*"]` is every tool but `finish`."""
    approval_timeout: timedelta | None = None
    """How long a gated call waits for a decision; null waits forever."""
    approval_default: ApprovalDefault = ApprovalDefault.REJECT
    continue_as_new_after_turns: Annotated[int, NOT_A_BOOLEAN] = Field(default=50, ge=1)
    """LLM calls per run of the continue-as-new chain: the run hands its state to a fresh
    run (same workflow id) at the first safe point after this many, or sooner when
    Temporal suggests it, so a run of any length keeps a short history."""
    sampling: Sampling | None = Field(default=None, exclude_if=when_none)
    """Overrides of the model profile's sampling settings for this run; null: the
    profile's. Left out while null, so inputs from before it encode as they did."""
    budget: Budget | None = Field(default=None, exclude_if=when_none)
    """Tokens and cost the run may spend before it waits for a person to raise them."""
    on_reply_while_running: ReplyPolicy = Field(default=ReplyPolicy.QUEUE, exclude_if=when_queue)
    """What a reply does that arrives while the agent works: queued (the default),
    interrupts the model call, or refused (`RUN_BUSY`). `set_reply_policy` changes it.
    Left out while `queue`, so inputs from before it encode as they did."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=when_none)
    """Task mode: the JSON Schema the final answer must fit. The model is asked for it
    (OpenAI `response_format: json_schema`), shown its errors once if it misses, and the
    run fails `OUTPUT_INVALID` if it misses again."""
    started_by: str | None = Field(default=None, exclude_if=when_none)
    """Who started the run, and so sent `prompt`: set by the client that starts it, from
    its caller (a value sent to the API is replaced by the caller's)."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door the run was started through, set with `started_by` (the audit trail's
    `start` record); null: `temporal-ui`."""
    approvers: dict[str, list[str]] = Field(default={}, exclude_if=when_empty)
    """Who may decide a gated call: a tool's name (or `*`, for the tools not named) to the
    users and groups (`[api.groups]`) who may; a tool in neither: anyone. A decision by
    anyone else is refused (`APPROVAL_NOT_ALLOWED`). Left out while empty, so inputs from
    before it encode as they did."""
    share: dict[str, Share] = Field(default={}, exclude_if=when_empty)
    """Who besides its owner (who started it) may use the run: a user's name, or
    `group:NAME` for a group's members, to `read` or `write` (`tarry.core.ownership`). Set when
    the run starts; its sub-agents, forks' sources and resumptions keep it. Left out while
    empty, so inputs from before it encode as they did."""
    approval_rules: list[ApprovalRule] = Field(default=[], exclude_if=when_empty)
    """Standing decisions on tool calls, the first that matches a call deciding it:
    approve without asking, reject with a reason, or ask a person (even for a tool outside
    `require_approval`); a call none matches is gated as `require_approval` says. See
    `tarry.contracts.approval_rules`. Left out while empty, so inputs from before it encode
    as they did."""
    guardrails: list[Guardrail] = Field(default=[], exclude_if=when_empty)
    """Checks on what the run reads, in order: a person's messages before the model
    sees them, tools' results before the model reads them; each redacts or blocks what
    it finds. See `tarry.contracts.guardrails`. Left out while empty, so inputs from
    before it encode as they did."""

    agents: list[str] = Field(default=[], exclude_if=when_empty)
    """The sub-agents (`[agents.NAME]` of the workers' config file) this run may delegate
    to, each offered as the tool `agent__NAME`; a name no worker has refuses the run at
    its start. Left out while empty, so inputs from before it encode as they did."""
    sensitive: bool = Field(default=False, exclude_if=lambda v: not v)
    """The run handles what must not be kept beyond it: its model calls neither read nor
    write the response cache (`ModelProfile.cache`), as under a `pii` guardrail. Left out
    while false, so inputs from before it encode as they did."""
    memory_access: MemoryAccess = Field(default=MemoryAccess.OFF, exclude_if=_off)
    """The memory tools the run offers (`tarry.contracts.memories`): none, `recall`
    (`read`), or `recall`, `remember` and `forget` (`read-write`). Their calls are tool
    calls like any other: approval gates, rules and approvers apply. Left out while off,
    so inputs from before it encode as they did."""
    memory_scope: str | None = Field(default=None, exclude_if=when_none)
    """Whose memories the run reads and writes: a user, `group:NAME` or `agent:NAME`;
    null: its owner's. The API lets a caller name only their own scope and their groups'
    (admins any)."""

    @field_validator("output_schema")
    @classmethod
    def _a_json_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return _json_schema(schema)

    @field_validator("memory_scope")
    @classmethod
    def _a_scope(cls, scope: str | None) -> str | None:
        return _scope(scope)

    @field_validator("share")
    @classmethod
    def _names(cls, share: dict[str, Share]) -> dict[str, Share]:
        for name in share:
            if problem := principal_problem(name):
                raise ValueError(f"share: {problem}")
        return share

    @field_validator("approvers")
    @classmethod
    def _approver_names(cls, approvers: dict[str, list[str]]) -> dict[str, list[str]]:
        """Approvers may read the run, so they are its readers' names too (`share`'s rule)."""
        for names in approvers.values():
            for name in names:
                if problem := principal_problem(name):
                    raise ValueError(f"approvers: {problem}")
        return approvers


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
    guardrails: list[Guardrail] = Field(default=[], exclude_if=when_empty)
    """The child run's own guardrails, after those of the run that delegates to it
    (`RunInput.guardrails`, which cover its whole tree). Left out while empty."""
    memory_access: MemoryAccess = Field(default=MemoryAccess.OFF, exclude_if=_off)
    """The child run's memory tools (`RunInput.memory_access`). Left out while off."""
    memory_scope: str | None = Field(default=None, exclude_if=when_none)
    """The child run's memory scope, `agent:NAME` for memories of the agent's own, shared
    by everyone whose runs delegate to it; null: the lead's."""
    a2a: str | None = Field(default=None, exclude_if=when_none, pattern=r"^https?://")
    """A remote A2A agent's card URL: the agent is that remote agent, each call a task of
    its (`workflows.remote_agents`), and the settings of a child run do not apply. Its
    credentials are the worker's (`[agents.NAME] a2a_headers`), never in a run's history."""
    a2a_answers: RemoteAnswerer = Field(default=RemoteAnswerer.PERSON, exclude_if=_by_a_person)
    """Who answers the remote agent's questions (`input-required`): `person`, the lead
    waits for a reply; `model`, the lead's model answers. Left out while `person`."""

    @field_validator("output_schema")
    @classmethod
    def _a_json_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return _json_schema(schema)

    @field_validator("memory_scope")
    @classmethod
    def _a_scope(cls, scope: str | None) -> str | None:
        return _scope(scope)


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


class AuthNeed(BaseModel):
    """A tool call that waits for a person to connect their account to an MCP server
    (`auth = "oauth"`) or an OAuth provider a worker's tool uses (`[oauth_providers.NAME]`):
    the run waits with `waiting_for: "auth"` until they do (the API's `connect` link, then
    its OAuth callback), or a stop."""

    server: str
    """The MCP server's name, or the provider's."""
    person: str | None
    """Whose grant the call needs; None: a run that names no owner."""
    call_id: str

    def connect_path(self, run_id: str) -> str:
        """The connect link's path on the HTTP API (`tarry.api.oauth`): opened by the
        person, signed in, it sends them to the server's authorization page."""
        return f"/v1/oauth/connect/{run_id}/{self.server}"


class Connected(Acting):
    """The `connected` signal: `person` connected their account to `server` (the API's
    OAuth callback sends it); the calls that waited for that grant run."""

    server: str
    person: str


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
    stopped_by: str | None = Field(default=None, exclude_if=when_none)
    """Who stopped the run."""
    paused_by: str | None = Field(default=None, exclude_if=when_none)
    """Who asked the run to pause, until the next reply is delivered."""
    budget_raised_by: str | None = Field(default=None, exclude_if=when_none)
    """Who last raised the run's budget."""
    budget: Budget | None = Field(default=None, exclude_if=when_none)
    """The run's budget as it stands (raised or not); null: none."""
    model: str | None = Field(default=None, exclude_if=when_none)
    """The model profile `set_model` switched the run to; null: the one it started with."""
    on_reply_while_running: ReplyPolicy = ReplyPolicy.QUEUE
    """What a reply does that arrives while the agent works (`RunInput.on_reply_while_running`,
    or what `set_reply_policy` made it since)."""
    retrying: Retrying | None = Field(default=None, exclude_if=when_none)
    """A call being retried (`RunHandle.state` reads it from Temporal, not the run)."""
    forked_from: ForkOrigin | None = Field(default=None, exclude_if=when_none)
    """The run and message this run branched off (`RunHandle.fork`); null: not a fork."""
    parent: str | None = Field(default=None, exclude_if=when_none)
    """The run that delegated to this one (`agent__NAME`); null: a run of its own."""
    waiting_on: str | None = Field(default=None, exclude_if=when_none)
    """With `waiting_for: "agent"`: the sub-agent's run that waits for a person; answer
    that run (by this id) and this one goes on. With `waiting_for: "remote"`: the remote
    agent's call (`LEAD:NAME-N`) whose question a reply to this run answers."""
    pinned: list[int] = Field(default=[], exclude_if=when_empty)
    """The transcript indexes of the messages pinned in the model's window, in order
    (`tarry.contracts.pins`)."""
    auth_needed: list[AuthNeed] = Field(default=[], exclude_if=when_empty)
    """With `waiting_for: "auth"`: the grants the run waits for, each a person to connect
    to a server at its `connect` link."""
    question: str | None = Field(default=None, exclude_if=when_none)
    """With `waiting_for: "remote"`: the remote agent's question (`waiting_on` names its
    call); a reply to this run answers it."""
    remote_calls: list[RemoteCallInfo] = Field(default=[], exclude_if=when_empty)
    """The run's calls of remote A2A agents, under way or ended, oldest first: its
    sub-agents that are no runs of this deployment (`children` lists those that are)."""


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
    stopped_by: str | None = Field(default=None, exclude_if=when_none)
    """Who stopped the run, when a stop ended it."""
    audit: list[AuditRecord] = Field(default=[], exclude_if=lambda v: not v)
    """The audit records of the run's last segment (those before are in the hand-overs
    that closed the segments before it): the result holds them, so an ended run's
    trail is read without a worker (`tarry.client.audit`)."""


# --- Activity contracts -----------------------------------------------------


# The arguments of the built-in `finish` tool, which the workflow itself handles.
# Its docstring and field description are what the model reads.
