"""All the state of one agent run, in one model.

The workflow keeps nothing outside `RunMemory`: queries read it, handlers record
intent in it, the main loop advances it; its parts are grouped by who writes them
(`workflows.memory_groups`). Because it is one serialisable model it can also be handed
to the next run of a continue-as-new chain unchanged.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    ModelWrapValidatorHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ApplicationError

from tarry.contracts import (
    AuditRecord,
    AuthNeed,
    Catalogue,
    ChatMessage,
    ErrorCode,
    ErrorInfo,
    Fork,
    ForkOrigin,
    LlmResponse,
    PendingApproval,
    Phase,
    PinnedMessage,
    ReplyPolicy,
    RunInput,
    RunResult,
    RunState,
    ToolCall,
    UserInput,
    WaitingFor,
    input_problem,
    reply_problem,
)
from tarry.contracts._omit import when_empty, when_none
from tarry.contracts.a2a_configs import PushConfig
from tarry.contracts.compatibility import UNIQUE_CALL_IDS
from tarry.contracts.ledger import DailyCaps
from tarry.contracts.slots import RunCap
from workflows.memory_groups import (
    Approvals,
    Budgets,
    Conversation,
    Delegations,
    EventLog,
    Guards,
    Inbox,
    Requests,
    RunCatalogue,
    SlotMark,
    SpendMark,
)

_GROUPS: dict[str, type[BaseModel]] = {
    "requests": Requests,
    "inbox": Inbox,
    "approvals": Approvals,
    "conversation": Conversation,
    "catalogue": RunCatalogue,
    "guards": Guards,
    "events": EventLog,
}
_RENAMED = {
    "stream": "state",
    "gated_schemas": "schemas",
    "pause_requested": "pause",
    "stop_requested": "stop",
    "retry_requested": "retry",
}
"""The flat fields of earlier memories that were renamed as they moved into a group."""
_GROUP_OF = {
    old: (group, new)
    for group, model in _GROUPS.items()
    for new in model.model_fields
    for old in [new, *(o for o, n in _RENAMED.items() if n == new)]
}
"""Each flat field of earlier memories, by the group and field it moved to."""
_WRITTEN_FLAT = (
    "phase", "transcript", "pages", "page_index", "window_start", "context_from", "inbox",
    "seen_ids", "received", "answered", "turn", "segment_turns", "tools", "model_queue",
    "profiles", "payload_limit", "notify_events", "context", "usage", "last_assistant_text",
    "output", "error", "warning", "pause_requested", "paused_by", "stop_reason", "stopped_by",
    "stop_requested", "stops", "guards", "approvals", "events", "budget", "model_failure",
    "retry_requested", "model", "forked_from", "agents", "reply_policy", "remembered", "audit",
    "wait", "started", "guardrails", "spend", "context_budgets", "pins", "search_index",
    "indexed", "slot", "auth_needed", "push_configs",
)  # fmt: skip
"""The memory's fields as the build before the groups wrote them, in its order: the shape
every hand-over is written in, for a worker of that build to read (see `_flat`); and
`wait`, `started`, `spend`, `pins`, `indexed`, `slot`, `auth_needed`, `push_configs` and
the catalogue's `guardrails`, `context_budgets` and `search_index`, added since, which that
build leaves aside as it does any field it does not know."""
_WRITTEN_AT = {"inbox": ("inbox", "queued")} | {
    name: _GROUP_OF[name] for name in _WRITTEN_FLAT if name in _GROUP_OF
}
"""Where each flat field is found in the groups; the others are the memory's own."""


class WaitMark(BaseModel):
    """A wait for a person under way: when it began, for its span (`workflows.traces`)."""

    waiting_for: str
    since: datetime
    turn: int


class RunMemory(BaseModel):
    """Grouped by who writes it. The handlers record intent: what they ask of the loop
    in `requests`, replies in `inbox`, decisions in `approvals`. The main loop writes the
    `conversation`, the run's status (`phase`, `error`, `warning`, `model_failure`,
    `stops`; `user_input` flags a bad reply's `warning` too), its `guards` and `events`,
    and once, at the start, the `catalogue`. The `budget` and the sub-agents (`agents`)
    have both: a raise or a child's report is recorded, the loop acts on it."""

    phase: Phase = Phase.RUNNING
    requests: Requests = Requests()
    inbox: Inbox = Inbox()
    approvals: Approvals = Approvals()
    conversation: Conversation = Conversation()
    catalogue: RunCatalogue = RunCatalogue()
    error: ErrorInfo | None = None
    warning: ErrorCode | None = None
    model_failure: ErrorInfo | None = None
    """The model call that kept failing past `Timeouts.llm_ask_after`: the run waits
    for a person (`waiting_for: "model"`) until a retry or a reply."""
    stops: int = 0
    """How many stop points the run has reached; a `decide` caller waits for the next."""
    guards: Guards = Guards()
    events: EventLog = EventLog()
    budget: Budgets = Budgets()
    agents: Delegations = Delegations()
    forked_from: ForkOrigin | None = None
    wait: WaitMark | None = Field(default=None, exclude_if=when_none)
    """The wait for a person under way, handed over with the rest so that a wait that
    outlasts a hand-over is one span; null while the run is not waiting."""
    started: datetime | None = Field(default=None, exclude_if=when_none)
    """When the run's chain began, handed over with the rest, so that its root span
    lasts from there to its end (`workflows.traces`); null in memories of older builds."""
    spend: SpendMark | None = Field(default=None, exclude_if=when_none)
    """The run's account with its owner's spend ledger; null without daily caps."""
    slot: SlotMark | None = Field(default=None, exclude_if=when_none)
    """The run's place among its owner's slots; null without a concurrent-run cap."""
    pins: list[PinnedMessage] = Field(default=[], exclude_if=when_empty)
    """The run's pinned messages, copied, in transcript order (`workflows.pins`): handed
    over with the rest, since the messages themselves may be in pages by then."""
    auth_needed: list[AuthNeed] = Field(default=[], exclude_if=when_empty)
    """The tool calls waiting for a person to connect their account (`workflows.auth_waits`),
    handed over with the rest."""
    push_configs: list[PushConfig] = Field(default=[], exclude_if=when_empty)
    """Where the run pushes its A2A task's news at each stop point (`workflows.
    notifications`), as its clients set them, handed over with the rest."""
    audit: list[AuditRecord] = []
    """The audit records of this segment of the run's chain (`workflows.audit`): each
    hand-over passes them on in its own argument and starts the next segment empty."""

    @model_validator(mode="before")
    @classmethod
    def _lift_flat_fields(cls, data: Any) -> Any:
        """Memories handed over by runs on earlier code have the groups' fields flat (some
        groups, or all), and their queue of replies as `inbox` (the compatibility ledger's
        `flat-memory-read`)."""
        if not isinstance(data, dict):
            return data
        lifted = dict(data)
        if isinstance(lifted.get("inbox"), list):
            lifted["queued"] = lifted.pop("inbox")
        moved: dict[str, dict[str, Any]] = {}
        for old in [name for name in lifted if name in _GROUP_OF]:
            group, new = _GROUP_OF[old]
            moved.setdefault(group, {})[new] = lifted.pop(old)
        for group, fields in moved.items():
            lifted[group] = {**fields, **dict(lifted.get(group) or {})}
        return lifted

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Written flat, as the build before the groups wrote it (`_WRITTEN_FLAT`): a
        hand-over, or a `tarry resume`, may be read by a worker of that build (a rolling
        deploy, a rollback), which fails a run whose memory it cannot read. The grouped
        shape goes on the wire once no such build is left (the compatibility ledger's
        `flat-memory-write`, `tarry.contracts.compatibility`, says when).
        `model_queue` is written as that build kept it: the queue of the profile
        `set_model` switched to."""
        grouped: dict[str, Any] = handler(self)
        flat: dict[str, Any] = {}
        for name in _WRITTEN_FLAT:
            group, field = _WRITTEN_AT.get(name, (None, name))
            part = grouped if group is None else grouped.get(group, {})
            if field in part:
                flat[name] = part[field]
        if "approvals" in flat:  # its `remembered` was written beside it
            flat["approvals"] = {k: v for k, v in flat["approvals"].items() if k != "remembered"}
        if "model_queue" in flat:
            flat["model_queue"] = self.catalogue.queue_of(self.requests.model)
        return flat

    @classmethod
    def of(cls, input: WorkflowInput) -> RunMemory:
        """A new run's memory: its budget and reply policy as its input sets them, its
        parent, a fork's conversation before the message it branches at, and its prompt
        queued (without one, the run begins waiting for a reply)."""
        memory = cls(
            budget=Budgets(limits=input.budget),
            requests=Requests(reply_policy=input.on_reply_while_running),
        )
        memory.agents.parent = input.parent
        if fork := input.fork:
            memory.conversation.transcript = list(fork.transcript)
            memory.forked_from = ForkOrigin(run_id=fork.run_id, at=fork.at)
        if input.prompt:
            memory.inbox.receive(UserInput(text=input.prompt, by=input.started_by))
        else:
            memory.phase = Phase.WAITING_USER
        return memory

    def take(self, answer: LlmResponse) -> None:
        """Records the model's answer: a turn taken, its message, tokens and text."""
        c = self.conversation
        c.turn += 1
        self.guards.turns_since_input += 1
        c.segment_turns += 1
        c.context = answer.context
        if answer.context is not None:
            c.window_start = c.context_from + answer.context.count - answer.sent_messages
        c.usage += answer.usage
        if answer.message.tool_calls and workflow.patched(UNIQUE_CALL_IDS.id):
            self._unique_call_ids(answer.message.tool_calls)
        c.transcript.append(answer.message)
        if answer.message.content:
            c.last_assistant_text = answer.message.content
        if answer.finish_reason == "length":
            # Cut off at the model's output limit: kept as it is, and flagged.
            self.warning = ErrorCode.LLM_TRUNCATED

    def _unique_call_ids(self, calls: list[ToolCall]) -> None:
        """Renames a call whose id the model used before (in this run, or earlier in the
        same answer) to `ID-N`: a person decides a call by its id, and a repeated one
        would name the decided call (409), never the pending one."""
        taken = set(self.approvals.decided)
        for message in self.conversation.transcript:
            taken.update(call.id for call in message.tool_calls or [])
        for call in calls:
            if call.id in taken:
                call.id = next(
                    f"{call.id}-{n}" for n in itertools.count(2) if f"{call.id}-{n}" not in taken
                )
            taken.add(call.id)

    def deliver_inbox(self) -> None:
        """The queued replies become the transcript's next user messages (at a turn
        boundary); the guards start counting again."""
        if not self.inbox.queued:
            return
        for queued in self.inbox.queued:
            message = ChatMessage(role="user", content=queued.input.text, by=queued.input.by)
            self.conversation.transcript.append(message)
        self.inbox.queued = []
        # A reply delivered at the boundary a pause asked for is what the pause waits for.
        self.requests.pause, self.requests.paused_by = False, None
        self.guards.turns_since_input = 0
        self.warning = None
        self.error = None  # a resumed run's: the reply goes on past it
        if not self.requests.stop:  # a resumed run's stop, as its error
            self.requests.stop_reason, self.requests.stopped_by = None, None
        self.guards.failures = {}

    def undecided(self) -> list[PendingApproval]:
        return self.approvals.undecided()

    def ended_problem(self) -> ApplicationError | None:
        """`RUN_ENDED` for an update an ended run cannot take; None while it goes on."""
        if not self.phase.ended:
            return None
        return ApplicationError(
            f"the run has ended ({self.phase}); `tarry resume` goes on with it",
            type=ErrorCode.RUN_ENDED,
        )

    def reply_refusal(self, input: UserInput) -> ApplicationError | None:
        """Why `send` and `reply` refuse `input` (`RUN_ENDED`, `INPUT_EMPTY`,
        `INPUT_TOO_LARGE`, `RUN_BUSY`), or None."""
        if ended := self.ended_problem():
            return ended
        if problem := reply_problem(input.text):
            code, message = problem
            return ApplicationError(message, type=code)
        return self.busy_problem(input)

    def busy_problem(self, input: UserInput) -> ApplicationError | None:
        """`RUN_BUSY` for a new reply while the agent works, when the run refuses them."""
        if self.requests.reply_policy is not ReplyPolicy.REJECT or self.phase is not Phase.RUNNING:
            return None
        if input.id is not None and input.id in self.inbox.seen_ids:
            return None  # a retry of a reply the run took: answered as the first one was
        return ApplicationError(
            "the agent is working and this run refuses replies meanwhile"
            " (on_reply_while_running: reject); send it again once the run waits",
            type=ErrorCode.RUN_BUSY,
        )

    def interrupting(self) -> bool:
        """A reply waits that cuts the model call in flight short (`ReplyPolicy.INTERRUPT`)."""
        return self.requests.reply_policy is ReplyPolicy.INTERRUPT and bool(self.inbox.queued)

    def state(self, waiting_for: WaitingFor | None) -> RunState:
        """The run's state, waiting for `waiting_for` (`workflows.waits`)."""
        return RunState(
            phase=self.phase,
            turn=self.conversation.turn,
            turns_since_input=self.guards.turns_since_input,
            usage=self.conversation.usage,
            last_assistant_text=self.conversation.last_assistant_text,
            error=self.error,
            warning=self.warning,
            pending_inputs=len(self.inbox.queued),
            message_count=self.conversation.message_count,
            waiting_for=waiting_for,
            pending_approvals=self.undecided(),
            stop_reason=self.requests.stop_reason,
            stopped_by=self.requests.stopped_by,
            paused_by=self.requests.paused_by,
            budget_raised_by=self.budget.raised_by,
            budget=self.budget.limits,
            model=self.requests.model,
            forked_from=self.forked_from,
            on_reply_while_running=self.requests.reply_policy,
            parent=self.agents.parent,
            waiting_on=next(iter(self.agents.waiting), None) or self.agents.asking(),
            pinned=[p.index for p in self.pins],
            auth_needed=self.auth_needed,
            question=(asking := self.agents.asking()) and self.agents.remote[asking].question,
            remote_calls=self.agents.remote_calls(),
        )

    def result(self) -> RunResult:
        c = self.conversation
        output = c.output if c.output is not None else c.last_assistant_text
        return RunResult(
            phase=self.phase,
            output=output,
            error=self.error,
            usage=self.conversation.usage,
            turns=self.conversation.turn,
            stop_reason=self.requests.stop_reason,
            stopped_by=self.requests.stopped_by,
            audit=self.audit,
        )

    def handed_over(self, stream: WorkflowStreamState) -> RunMemory:
        """This memory for the next run of its continue-as-new chain: a new segment, with
        the event stream's state as it is now (`RunStream` held it meanwhile)."""
        return self.model_copy(
            update={
                "conversation": self.conversation.model_copy(update={"segment_turns": 0}),
                "events": self.events.model_copy(update={"state": stream}),
                # The hand-over passes this segment's records in its own argument.
                "audit": [],
            }
        )

    def resumed(self) -> RunMemory:
        """This ended run's memory for a run that goes on from it (`tarry resume`):
        waiting for the user, with the error that ended it, or who stopped it and why,
        shown until the next reply. A model error or a stop need not end a conversation
        for good."""
        if not self.phase.ended:
            raise ApplicationError(
                f"the run is {self.phase}: reply to it instead", type=ErrorCode.RUN_NOT_ENDED
            )
        return self.model_copy(
            update={
                "phase": Phase.WAITING_USER,
                "warning": self.error.code if self.error else None,
                "requests": self.requests.model_copy(
                    update={
                        "stop": False,
                        "pause": False,
                        "paused_by": None,
                    }
                ),
                "conversation": self.conversation.model_copy(update={"segment_turns": 0}),
                "started": None,  # a new trace: the resumed run's chain begins anew
                # What it decided stays decided.
                "approvals": Approvals(
                    decided=self.approvals.decided, remembered=self.approvals.remembered
                ),
                # Its children ended with it (terminated as their parent closed).
                "agents": self.agents.model_copy(
                    update={"running": [], "waiting": {}, "reports": {}}
                ),
                # A new run's event stream starts at offset 0 with the messages published.
                "events": EventLog(published=self.conversation.message_count),
                # The ended run's result holds its records.
                "audit": [],
                # It released its slot as it ended: the resumed run asks for one again.
                "slot": None,
            }
        )


class WorkflowInput(RunInput):
    """The workflow's argument: a `RunInput` as callers send it, or, within a
    continue-as-new chain, the same input with the memory the previous run handed over."""

    memory: RunMemory | None = None
    fork: Fork | None = None
    """What a forked run starts from (`RunHandle.fork`): not part of `RunInput`, so no
    caller but the client's fork names another run as its origin."""
    parent: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The run that started this one as its sub-agent (`agent__NAME`): not part of
    `RunInput`, so only a delegating run names itself a parent."""
    spend: DailyCaps | None = Field(default=None, exclude_if=lambda v: v is None)
    """The owner's daily caps, set by the door that started the run from its caller's
    limits (`tarry.core.limits`): not part of `RunInput`, so no caller names their own.
    Null: the run touches no ledger (`workflows.spend`)."""
    slots: RunCap | None = Field(default=None, exclude_if=lambda v: v is None)
    """The owner's `max_concurrent_runs`, set as `spend` is. Null: the run holds no
    slot (`workflows.slots`)."""
    models: list[str] | None = Field(default=None, exclude_if=lambda v: v is None)
    """The owner's allowed model profiles (`[limits] models` globs), set as `spend` is:
    a fallback outside them is passed over (`workflows.fallback`). Null: any."""
    audit: list[AuditRecord] = Field(default=[], exclude_if=lambda v: not v)
    """In a hand-over: the audit records of the segment it closes (`workflows.audit`),
    which the run keeps in its history only, not in its memory."""
    catalogue: Catalogue | None = Field(default=None, exclude_if=lambda v: v is None)
    """The worker's catalogue for this run, as the client's check before the start
    answered it (`checked_catalogue`): the run keeps it and asks no worker again. Not part
    of `RunInput`, so no caller names their own tools or guardrails. Null: the run
    resolves its catalogue itself (`workflows.tool_calls.resolve`)."""

    @model_validator(mode="wrap")
    @classmethod
    def _refused_at_once(
        cls, data: Any, handler: ModelWrapValidatorHandler[WorkflowInput]
    ) -> WorkflowInput:
        """An input the API would refuse (a misspelled field, a turn limit of 0), as the
        Temporal UI or `temporal workflow start` may send it, fails the run at once with
        the API's message: the SDK fails the workflow, not its task, on an
        `ApplicationError` met while decoding its argument."""
        try:
            return handler(data)
        except ValidationError as e:
            raise ApplicationError(
                input_problem(e), type=ErrorCode.INPUT_INVALID, non_retryable=True
            ) from None

    def run_input(self) -> RunInput:
        """The input as its caller sent it, without what the workflow adds."""
        exclude = {"memory", "fork", "parent", "audit", "spend", "slots", "models", "catalogue"}
        return RunInput.model_validate(self.model_dump(exclude=exclude))


def call_fingerprint(call: ToolCall) -> str:
    """Tool name plus canonical JSON of the arguments: the same call, however it is spaced."""
    return fingerprint(call.function.name, call.function.arguments)


def fingerprint(tool: str, arguments: str) -> str:
    """`call_fingerprint` of a call of `tool` with the model's argument text `arguments`."""
    try:
        canonical = json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        canonical = arguments
    return f"{tool}:{canonical}"
