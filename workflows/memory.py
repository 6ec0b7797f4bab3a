"""All the state of one agent run, in one model.

The workflow keeps nothing outside `RunMemory`: queries read it, handlers record
intent in it, the main loop advances it. Because it is one serialisable model it can
also be handed to the next run of a continue-as-new chain unchanged.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, ModelWrapValidatorHandler, ValidationError, model_validator
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ApplicationError

from tarry.contracts import (
    AgentSpec,
    AuditRecord,
    Budget,
    ChatMessage,
    ContextRef,
    DecisionRecord,
    ErrorCode,
    ErrorInfo,
    Fork,
    ForkOrigin,
    LlmResponse,
    NotifyEvent,
    PendingApproval,
    Phase,
    ReplyPolicy,
    RunInput,
    RunResult,
    RunState,
    ToolCall,
    ToolDefinition,
    TranscriptPageIndexRef,
    TranscriptPageRef,
    Usage,
    UserInput,
    WaitingFor,
    input_problem,
    reply_problem,
)
from tarry.contracts._omit import when_none

REPLY_IDS_KEPT = 100
"""How many of the latest replies' ids a run keeps to know a retry (`RunMemory.seen_ids`):
a client retries within minutes, not a hundred replies later, and the memory handed over
at each continue-as-new stays the same size however many replies came before."""
_REPLY_IDS_PATCH = "reply-ids-window"
"""A run recorded before the window keeps every id; the next run of its chain drops the
oldest with its first reply."""
_UNIQUE_CALL_IDS_PATCH = "unique-call-ids"
"""A run recorded before keeps a tool call id its model repeated."""
DECIDED_CALLS_KEPT = 100
"""How many of the latest decided calls' ids a run keeps (`Approvals.decided`): a late
decision on one whose tool message has moved into a page is still told it was decided."""


class QueuedInput(BaseModel):
    """A reply waiting for the next turn boundary; `seq` orders and names it."""

    seq: int
    input: UserInput


class EventLog(BaseModel):
    """The run's event stream and the workflow's cursors into it."""

    state: WorkflowStreamState | None = None
    """The stream's state, handed on through continue-as-new (None on a fresh run, and
    while the run's `RunStream` holds it)."""
    turn_events: int = 0
    """The stream offset where the current turn's events begin."""
    previous_turn_events: int = 0
    """Where the turn before it began: a hand-over drops the events before this."""
    turn_of_events: int = 0
    """The turn `turn_events` belongs to (a retried call of a turn keeps its turn's start)."""
    published: int = 0
    """How many transcript messages have been published to the event stream."""


class Guards(BaseModel):
    """What the guards count, to stop a run that goes round in circles."""

    turns_since_input: int = 0
    """LLM calls since the last reply: `RunInput.max_turns` bounds it."""
    failures: dict[str, int] = {}
    """How often each failing call (tool name + canonical arguments) failed."""
    streak_tool: str | None = None
    streak: int = 0
    """How many calls in a row went to `streak_tool`."""
    output_repairs: int = 0
    """Answers shown their errors against `RunInput.output_schema` and asked again."""


class Approvals(BaseModel):
    """The gated calls of the current answer and the decisions on them."""

    pending: list[PendingApproval] = []
    """The gated calls of the current answer; they stay until their tool messages exist."""
    decisions: dict[str, DecisionRecord] = {}
    """Decisions on pending calls, by call id: the first one for a call wins."""
    schemas: dict[str, dict[str, Any]] = {}
    """The argument schemas of the gated tools, to check edited arguments against."""
    decided: list[str] = []
    """The ids of the latest `DECIDED_CALLS_KEPT` calls decided and run, oldest first. Their
    tool messages keep the decisions, but the run cannot read a page: these ids are what
    it knows of a decided call once its message has left memory."""

    def undecided(self) -> list[PendingApproval]:
        return [p for p in self.pending if p.call_id not in self.decisions]

    def settle(self, call_id: str) -> DecisionRecord | None:
        """The decision on a call whose tool message is written now, for that message to
        keep; the call's id joins `decided` (dropping the oldest past the window)."""
        decision = self.decisions.pop(call_id, None)
        if decision is not None:
            self.decided = [*self.decided, call_id][-DECIDED_CALLS_KEPT:]
        return decision


class Budgets(BaseModel):
    """The run's budget as it stands, and whether the run waits for it to be raised."""

    limits: Budget | None = None
    """`RunInput.budget`, with the limits `raise_budget` replaced."""
    paused: bool = False
    """The run stopped at a turn boundary over budget; set and cleared by the main loop."""
    raised_by: str | None = None
    """Who last raised the limits (`BudgetRaise.by`)."""


class Delegations(BaseModel):
    """The sub-agents a run may delegate to, and its children that run now."""

    specs: dict[str, AgentSpec] = {}
    """`Catalogue.agents`: resolved at the run's start, kept whatever the config becomes."""
    started: int = 0
    """Children started so far: the `N` of the next child's id `PARENT:NAME-N`."""
    running: list[str] = []
    """The ids of the children that run now, in the order they were started."""
    waiting: dict[str, WaitingFor] = {}
    """The running children that wait for a person, and what for (`AgentReport`)."""
    reports: dict[str, int] = {}
    """The `seq` of the latest report of each running child: an older one that arrives
    late changes nothing."""
    parent: str | None = None
    """The run that delegated to this one (`WorkflowInput.parent`)."""
    reported: int = 0
    """The `seq` of this child's latest report to its parent."""
    reported_waiting: WaitingFor | None = None
    """What this child last told its parent it waits for."""


_GROUPS: dict[str, type[BaseModel]] = {
    "events": EventLog,
    "guards": Guards,
    "approvals": Approvals,
}
_RENAMED = {"stream": "state", "gated_schemas": "schemas"}
"""The flat fields of earlier memories that were renamed as they moved into a group."""


class WaitMark(BaseModel):
    """A wait for a person under way: when it began, for its span (`workflows.traces`)."""

    waiting_for: str
    since: datetime
    turn: int


class RunMemory(BaseModel):
    phase: Phase = Phase.RUNNING
    transcript: list[ChatMessage] = []
    """The messages the run keeps in memory: all of them, but for those moved into
    `pages` (the first `paged`). Index it through `message` and `messages_from`."""
    pages: list[TranscriptPageRef] = []
    """The older messages, in pages of the payload store (see `workflows/pages.py`): the
    newest pages' references, those before them in `page_index`."""
    page_index: TranscriptPageIndexRef | None = None
    """The newest index of the oldest pages' references, each index naming the one
    before: what a run carries of its pages stays bounded however long it runs."""
    window_start: int = 0
    """The index of the first message the latest model call was sent: the context
    budget's window, which the run keeps in memory."""
    context_from: int = 0
    """The index of `context`'s first message: 0, unless the stored conversation was
    begun again from the messages in memory (a worker could not read it)."""
    inbox: list[QueuedInput] = []
    seen_ids: dict[str, int] = {}
    """The ids of the latest `REPLY_IDS_KEPT` replies that came with one, with the `seq`
    they were queued as, oldest first: a retry of one of them is not queued again."""
    received: int = 0
    """The `seq` of the newest reply received."""
    answered: int = 0
    """Every reply up to this `seq` has been delivered and followed by a stop point."""
    turn: int = 0
    segment_turns: int = 0
    """LLM calls in this run of the continue-as-new chain."""
    tools: list[ToolDefinition] | None = None
    """The run's tool catalogue, resolved once at its start and handed over with the
    rest. None only in runs started before the workflow owned it, until their first live
    step on today's code resolves it."""
    model_queue: str | None = None
    """The task queue of the run's model calls (`Catalogue.model_queue`); null: its own."""
    profiles: dict[str, str | None] = {}
    """The worker's model profiles and their task queues (`Catalogue.profiles`)."""
    payload_limit: int | None = None
    """The largest payload the worker can put in history (`Catalogue.payload_limit`):
    pages and the hand-over stay under it. None in runs that resolved their tools before."""
    notify_events: list[NotifyEvent] = []
    """The stop points the worker's `[[notify]]` entries want (`Catalogue.notify_events`),
    learnt with the tools: the run notifies of these (`workflows.notifications`)."""
    context: ContextRef | None = None
    """The stored conversation the last LLM call extended (see `ContextRef`)."""
    usage: Usage = Usage()
    last_assistant_text: str | None = None
    output: str | None = None
    error: ErrorInfo | None = None
    warning: ErrorCode | None = None
    pause_requested: bool = False
    paused_by: str | None = None
    """Who asked for the pause; kept until the next reply is delivered."""
    stop_reason: str | None = None
    stopped_by: str | None = None
    stop_requested: bool = False
    stops: int = 0
    """How many stop points the run has reached; a `decide` caller waits for the next."""
    guards: Guards = Guards()
    approvals: Approvals = Approvals()
    events: EventLog = EventLog()
    budget: Budgets = Budgets()
    model_failure: ErrorInfo | None = None
    """The model call that kept failing past `Timeouts.llm_ask_after`: the run waits
    for a person (`waiting_for: "model"`) until a retry or a reply."""
    retry_requested: bool = False
    model: str | None = None
    """The profile `set_model` switched the run to; null: the run's own (`RunInput.model`)."""
    forked_from: ForkOrigin | None = None
    agents: Delegations = Delegations()
    wait: WaitMark | None = Field(default=None, exclude_if=when_none)
    """The wait for a person under way, handed over with the rest so that a wait that
    outlasts a hand-over is one span; null while the run is not waiting."""
    reply_policy: ReplyPolicy = ReplyPolicy.QUEUE
    """What a reply does while the agent works: `RunInput.on_reply_while_running` at the
    start, then whatever `set_reply_policy` made it. Memories from before it: `queue`,
    which is what their runs did."""
    remembered: dict[str, DecisionRecord] = {}
    """Decisions people asked the run to remember (`Decision.remember`), by what a later
    call must share to be decided the same way (`workflows.rules.remembered_key`)."""
    audit: list[AuditRecord] = []
    """The audit records of this segment of the run's chain (`workflows.audit`): each
    hand-over passes them on in its own argument and starts the next segment empty."""

    @model_validator(mode="before")
    @classmethod
    def _lift_flat_fields(cls, data: Any) -> Any:
        """Memories handed over by runs on earlier code have the groups' fields flat."""
        if not isinstance(data, dict):
            return data
        lifted = dict(data)
        for group, model in _GROUPS.items():
            if group in lifted:
                continue
            names = {old: _RENAMED.get(old, old) for old in data}
            fields = model.model_fields
            moved = {new: lifted.pop(old) for old, new in names.items() if new in fields}
            if moved:
                lifted[group] = moved
        return lifted

    def receive(self, input: UserInput) -> int:
        """Queues a reply once; returns the `seq` it was (or had been) queued as."""
        if input.id is not None and input.id in self.seen_ids:
            return self.seen_ids[input.id]
        self.received += 1
        if input.id is not None:
            self.seen_ids[input.id] = self.received
            self._forget_old_ids()
        self.inbox.append(QueuedInput(seq=self.received, input=input))
        return self.received

    def _forget_old_ids(self) -> None:
        """Keeps the ids of the latest `REPLY_IDS_KEPT` replies (a memory handed over by a
        run before the window may hold more: it shrinks with its next reply)."""
        if len(self.seen_ids) <= REPLY_IDS_KEPT or not workflow.patched(_REPLY_IDS_PATCH):
            return
        self.seen_ids = dict(list(self.seen_ids.items())[-REPLY_IDS_KEPT:])

    def take(self, answer: LlmResponse) -> None:
        """Records the model's answer: a turn taken, its message, tokens and text."""
        self.turn += 1
        self.guards.turns_since_input += 1
        self.segment_turns += 1
        self.context = answer.context
        if answer.context is not None:
            self.window_start = self.context_from + answer.context.count - answer.sent_messages
        self.usage += answer.usage
        if answer.message.tool_calls and workflow.patched(_UNIQUE_CALL_IDS_PATCH):
            self._unique_call_ids(answer.message.tool_calls)
        self.transcript.append(answer.message)
        if answer.message.content:
            self.last_assistant_text = answer.message.content
        if answer.finish_reason == "length":
            # Cut off at the model's output limit: kept as it is, and flagged.
            self.warning = ErrorCode.LLM_TRUNCATED

    def _unique_call_ids(self, calls: list[ToolCall]) -> None:
        """Renames a call whose id the model used before (in this run, or earlier in the
        same answer) to `ID-N`: a person decides a call by its id, and a repeated one
        would name the decided call (409), never the pending one."""
        taken = set(self.approvals.decided)
        for message in self.transcript:
            taken.update(call.id for call in message.tool_calls or [])
        for call in calls:
            if call.id in taken:
                call.id = next(
                    f"{call.id}-{n}" for n in itertools.count(2) if f"{call.id}-{n}" not in taken
                )
            taken.add(call.id)

    @property
    def paged(self) -> int:
        """How many of the first messages are in `pages`, not in `transcript`."""
        return self.pages[-1].end if self.pages else 0

    @property
    def message_count(self) -> int:
        return self.paged + len(self.transcript)

    def messages_from(self, index: int) -> list[ChatMessage]:
        """The messages from transcript index `index` (not before `paged`) on."""
        return self.transcript[max(0, index - self.paged) :]

    def message(self, index: int) -> ChatMessage:
        """The message at transcript index `index`, one the run keeps in memory."""
        return self.transcript[index - self.paged]

    def deliver_inbox(self) -> None:
        """The queued replies become the transcript's next user messages (at a turn
        boundary); the guards start counting again."""
        if not self.inbox:
            return
        for queued in self.inbox:
            message = ChatMessage(role="user", content=queued.input.text, by=queued.input.by)
            self.transcript.append(message)
        self.inbox = []
        # A reply delivered at the boundary a pause asked for is what the pause waits for.
        self.pause_requested, self.paused_by = False, None
        self.guards.turns_since_input = 0
        self.warning = None
        self.error = None  # a resumed run's: the reply goes on past it
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

    def model_problem(self) -> ApplicationError | None:
        """Why `retry` has nothing to do (`RETRY_NOT_WAITING`), or None."""
        if self.waiting_for() is WaitingFor.MODEL:
            return None
        return ApplicationError(
            "the run is not waiting for its model: reply to it instead",
            type=ErrorCode.RETRY_NOT_WAITING,
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
        if self.reply_policy is not ReplyPolicy.REJECT or self.phase is not Phase.RUNNING:
            return None
        if input.id is not None and input.id in self.seen_ids:
            return None  # a retry of a reply the run took: answered as the first one was
        return ApplicationError(
            "the agent is working and this run refuses replies meanwhile"
            " (on_reply_while_running: reject); send it again once the run waits",
            type=ErrorCode.RUN_BUSY,
        )

    def interrupting(self) -> bool:
        """A reply waits that cuts the model call in flight short (`ReplyPolicy.INTERRUPT`)."""
        return self.reply_policy is ReplyPolicy.INTERRUPT and bool(self.inbox)

    def waiting_for(self) -> WaitingFor | None:
        if self.phase is not Phase.WAITING_USER:
            return None
        if self.undecided():
            return WaitingFor.APPROVAL
        if self.agents.waiting:
            return WaitingFor.AGENT
        if self.model_failure is not None:
            return WaitingFor.MODEL
        return WaitingFor.BUDGET if self.budget.paused else WaitingFor.INPUT

    def state(self) -> RunState:
        return RunState(
            phase=self.phase,
            turn=self.turn,
            turns_since_input=self.guards.turns_since_input,
            usage=self.usage,
            last_assistant_text=self.last_assistant_text,
            error=self.error,
            warning=self.warning,
            pending_inputs=len(self.inbox),
            message_count=self.message_count,
            waiting_for=self.waiting_for(),
            pending_approvals=self.undecided(),
            stop_reason=self.stop_reason,
            stopped_by=self.stopped_by,
            paused_by=self.paused_by,
            budget_raised_by=self.budget.raised_by,
            budget=self.budget.limits,
            model=self.model,
            forked_from=self.forked_from,
            on_reply_while_running=self.reply_policy,
            parent=self.agents.parent,
            waiting_on=next(iter(self.agents.waiting), None),
        )

    def result(self) -> RunResult:
        output = self.output if self.output is not None else self.last_assistant_text
        return RunResult(
            phase=self.phase,
            output=output,
            error=self.error,
            usage=self.usage,
            turns=self.turn,
            stop_reason=self.stop_reason,
            stopped_by=self.stopped_by,
            audit=self.audit,
        )

    def resumed(self) -> RunMemory:
        """This ended run's memory for a run that goes on from it (`tarry resume`):
        waiting for the user, with the error that ended it shown until the next reply.
        A model error or a stop need not end a conversation for good."""
        if not self.phase.ended:
            raise ApplicationError(
                f"the run is {self.phase}: reply to it instead", type=ErrorCode.RUN_NOT_ENDED
            )
        return self.model_copy(
            update={
                "phase": Phase.WAITING_USER,
                "warning": self.error.code if self.error else None,
                "stop_requested": False,
                "stop_reason": None,
                "stopped_by": None,
                "pause_requested": False,
                "paused_by": None,
                "segment_turns": 0,
                # What it decided stays decided.
                "approvals": Approvals(decided=self.approvals.decided),
                # Its children ended with it (terminated as their parent closed).
                "agents": self.agents.model_copy(
                    update={"running": [], "waiting": {}, "reports": {}}
                ),
                # A new run's event stream starts at offset 0 with the messages published.
                "events": EventLog(published=self.message_count),
                # The ended run's result holds its records.
                "audit": [],
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
    audit: list[AuditRecord] = Field(default=[], exclude_if=lambda v: not v)
    """In a hand-over: the audit records of the segment it closes (`workflows.audit`),
    which the run keeps in its history only, not in its memory."""

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
        exclude = {"memory", "fork", "parent", "audit"}
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
