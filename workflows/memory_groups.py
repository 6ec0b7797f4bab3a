"""The parts `RunMemory` is made of, each grouped by who writes it.

The handlers record intent: what they ask of the main loop (`Requests`), the replies
they queue (`Inbox`) and the decisions on gated calls (`Approvals`). The main loop
writes the rest: the `Conversation`, the guards' counts (`Guards`), the event stream's
cursors (`EventLog`), and, once at the run's start, what it learnt of its worker
(`RunCatalogue`). Budgets and sub-agents have their own (`Budgets`, `Delegations`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStreamState

from tarry.contracts import (
    AgentSpec,
    Budget,
    ChatMessage,
    ContextRef,
    DecisionRecord,
    ErrorInfo,
    NotifyEvent,
    PendingApproval,
    ReplyPolicy,
    ToolDefinition,
    TranscriptPageIndexRef,
    TranscriptPageRef,
    Usage,
    UserInput,
    WaitingFor,
)
from tarry.contracts._omit import when_empty, when_none
from tarry.contracts.a2a import RemoteCallInfo, RemoteState, RemoteTask
from tarry.contracts.compatibility import REPLY_IDS_WINDOW
from tarry.contracts.guardrails import Guardrail
from tarry.contracts.ledger import Spend

REPLY_IDS_KEPT = 100
"""How many of the latest replies' ids a run keeps to know a retry (`Inbox.seen_ids`):
a client retries within minutes, not a hundred replies later, and the memory handed over
at each continue-as-new stays the same size however many replies came before."""
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
    output_blocks: int = Field(default=0, exclude_if=when_empty)
    """Answers in a row an output guardrail withheld (`workflows.guardrails`)."""
    input_checked: int = Field(default=0, exclude_if=when_empty)
    """The transcript index up to which input guardrails checked people's messages
    (`workflows.guardrails`); left out while 0, so memory from before it encodes as it did."""
    asks: int = Field(default=0, exclude_if=when_empty)
    """Texts guardrails have asked people about: the `N` of the next one's id
    (`guardrail-N`, `workflows.guardrail_asks`); left out while 0."""


class Approvals(BaseModel):
    """The gated calls of the current answer, which the main loop writes, and the
    decisions on them, which the handlers record."""

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
    remembered: dict[str, DecisionRecord] = {}
    """Decisions people asked the run to remember (`Decision.remember`), by what a later
    call must share to be decided the same way (`workflows.approval_rules.remembered_key`)."""

    def undecided(self) -> list[PendingApproval]:
        return [p for p in self.pending if p.call_id not in self.decisions]

    def blanket(self) -> list[PendingApproval]:
        """What a decision naming no call decides: every undecided tool call, or, with
        none, the texts guardrails ask about. "Approve all" is about calls: a flagged
        text is allowed by a decision that has nothing else to mean."""
        undecided = self.undecided()
        calls = [p for p in undecided if p.guardrail is None]
        return calls or undecided

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


class SpendMark(BaseModel):
    """The run's account with its owner's spend ledger (`workflows.spend`): only a run
    whose input carries daily caps has one."""

    calls: int = 0
    """Reservations asked so far: the next call's key is the run's id and this plus one."""
    last_tokens: int = 0
    """What the last settled call read and wrote: the next call's input is at least that."""
    capped: ErrorInfo | None = None
    """`SPEND_CAP_REACHED`, naming whose cap, while the run waits for room."""
    room: bool = False
    """The ledger said there may be room (`SPEND_ROOM_SIGNAL`): ask again."""
    unsettled: Spend | None = Field(default=None, exclude_if=when_none)
    """What embedding the run's messages used since the last settlement (the index
    activity's answers, `workflows.search_index`): the next call's settlement adds it.
    Left out while none, so a run without embeddings hands over as it did."""


class SlotMark(BaseModel):
    """The run's place among its owner's slots (`workflows.slots`): only a run whose
    input carries a `max_concurrent_runs` cap has one."""

    held: bool = False
    """It holds a slot: released when the run ends."""
    queued: ErrorInfo | None = None
    """`TOO_MANY_RUNS`, saying how many runs are open, while the run waits for a slot."""
    free: bool = False
    """The slots said one is its now (`SLOT_FREE_SIGNAL`): ask again."""


REMOTE_CALLS_KEPT = 50
"""The ended remote calls a run keeps to list in its tree (`RunState.remote_calls`)."""


class RemoteCall(BaseModel):
    """A call of a remote A2A agent, under way or ended (`workflows.remote_agents`)."""

    agent: str
    task_id: str | None = None
    context_id: str | None = None
    state: RemoteState | None = Field(default=None, exclude_if=when_none)
    """How its task last stood, as the lead heard; null until the remote took it."""
    question: str | None = None
    """Its question while the remote task waits for an answer (`input-required`)."""
    asked_at: int = 0
    """The inbox's `seq` when it asked: the first reply after it is the answer."""
    news: RemoteTask | None = None
    """The latest push (`A2A_PUSH_SIGNAL`) not yet acted on."""

    def ended(self) -> bool:
        return self.state is not None and self.state.ended


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
    remote: dict[str, RemoteCall] = Field(default={}, exclude_if=when_empty)
    """The run's calls of remote A2A agents, under way or ended, by id (`LEAD:NAME-N`):
    its tree's remote sub-agents (`RunState.remote_calls`). Left out while none, so a run
    without them hands over as it did."""

    def asking(self) -> str | None:
        """The first remote call whose question waits for a person's answer."""
        return next((id for id, call in self.remote.items() if call.question is not None), None)

    def forget_ended(self) -> None:
        """Keeps the latest `REMOTE_CALLS_KEPT` ended remote calls, and every call under
        way: a run that delegates all its life hands over a memory of bounded size."""
        ended = [id for id, call in self.remote.items() if call.ended()]
        for id in ended[: max(0, len(ended) - REMOTE_CALLS_KEPT)]:
            del self.remote[id]

    def remote_calls(self) -> list[RemoteCallInfo]:
        """The run's remote calls as its state lists them, oldest first."""
        return [
            RemoteCallInfo(call=id, agent=call.agent, task_id=call.task_id, state=call.state)
            for id, call in self.remote.items()
        ]


class Requests(BaseModel):
    """What the handlers ask of the run, for the main loop to act on at its next turn
    boundary: a handler sets it, the loop does it and clears what it has done."""

    pause: bool = False
    """Stop at the next turn boundary (`pause`)."""
    paused_by: str | None = None
    """Who asked for the pause; kept until the next reply is delivered."""
    stop: bool = False
    """End the run at the loop's next chance (`stop`)."""
    stop_reason: str | None = None
    stopped_by: str | None = None
    retry: bool = False
    """Ask the failing model again (`retry`, for a run `waiting_for: "model"`)."""
    model: str | None = None
    """The profile `set_model` switched the run to; null: the run's own (`RunInput.model`)."""
    reply_policy: ReplyPolicy = ReplyPolicy.QUEUE
    """What a reply does while the agent works: `RunInput.on_reply_while_running` at the
    start, then whatever `set_reply_policy` made it. Memories from before it: `queue`,
    which is what their runs did."""


class Receipt(NamedTuple):
    """What the inbox did with a reply it received."""

    seq: int
    """The `seq` it was (or had been) queued as."""
    new: bool
    """False for a retry of a reply it has (by its id): not queued again."""


class Inbox(BaseModel):
    """The replies the handlers queue, and how far the main loop has answered them."""

    queued: list[QueuedInput] = []
    """The replies waiting for the next turn boundary, where the loop delivers them."""
    seen_ids: dict[str, int] = {}
    """The ids of the latest `REPLY_IDS_KEPT` replies that came with one, with the `seq`
    they were queued as, oldest first: a retry of one of them is not queued again."""
    received: int = 0
    """The `seq` of the newest reply received."""
    answered: int = 0
    """Every reply up to this `seq` has been delivered and followed by a stop point (the
    loop's count, kept here beside what it counts)."""

    def receive(self, input: UserInput) -> Receipt:
        """Queues a reply once."""
        if input.id is not None and input.id in self.seen_ids:
            return Receipt(self.seen_ids[input.id], new=False)
        self.received += 1
        if input.id is not None:
            self.seen_ids[input.id] = self.received
            self._forget_old_ids()
        self.queued.append(QueuedInput(seq=self.received, input=input))
        return Receipt(self.received, new=True)

    def first_after(self, seq: int) -> QueuedInput | None:
        """The first reply queued after `seq`: the answer to a remote agent's question
        asked at `seq` (`RemoteCall.asked_at`)."""
        return next((q for q in self.queued if q.seq > seq), None)

    def _forget_old_ids(self) -> None:
        """Keeps the ids of the latest `REPLY_IDS_KEPT` replies (a memory handed over by a
        run before the window may hold more: it shrinks with its next reply)."""
        if len(self.seen_ids) <= REPLY_IDS_KEPT or not workflow.patched(REPLY_IDS_WINDOW.id):
            return
        self.seen_ids = dict(list(self.seen_ids.items())[-REPLY_IDS_KEPT:])


class Conversation(BaseModel):
    """The conversation as the main loop writes it: its messages, the model's stored
    context, its turns and what they cost. One handler writes here too, by a named
    exception: `set_model`'s note."""

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
    context: ContextRef | None = None
    """The stored conversation the last LLM call extended (see `ContextRef`)."""
    turn: int = 0
    segment_turns: int = 0
    """LLM calls in this run of the continue-as-new chain."""
    usage: Usage = Usage()
    last_assistant_text: str | None = None
    output: str | None = None
    indexed: int = Field(default=0, exclude_if=lambda v: not v)
    """How many of the first messages the run has handed to the search index
    (`workflows.search_index`); 0 on a worker without one."""

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


class RunCatalogue(BaseModel):
    """What the run learnt of its worker at its start (`Catalogue`), written once by the
    main loop (`tool_calls.resolve`) and handed over with the rest."""

    tools: list[ToolDefinition] | None = None
    """The run's tool catalogue. None only in runs started before the workflow owned it,
    until their first live step on today's code resolves it."""
    model_queue: str | None = None
    """The task queue of the run's own profile's model calls (`Catalogue.model_queue`);
    null: the run's own queue. A memory handed over by earlier code after a `set_model`
    holds the queue of the profile it switched to: `queue_of` answers the same for it."""
    profiles: dict[str, str | None] = {}
    """The worker's model profiles and their task queues (`Catalogue.profiles`)."""
    payload_limit: int | None = None
    """The largest payload the worker can put in history (`Catalogue.payload_limit`):
    pages and the hand-over stay under it. None in runs that resolved their tools before."""
    notify_events: list[NotifyEvent] = []
    """The stop points the worker's `[[notify]]` entries want (`Catalogue.notify_events`),
    learnt with the tools: the run notifies of these (`workflows.notifications`)."""
    guardrails: list[Guardrail] = Field(default=[], exclude_if=when_empty)
    """The worker's guardrails (`Catalogue.guardrails`), learnt with the tools: the run
    applies them before its own (`workflows.guardrails`)."""
    context_budgets: dict[str, int] = Field(default={}, exclude_if=when_empty)
    """Each profile's context budget (`Catalogue.context_budgets`), learnt with the tools:
    the run's pins stay within its profile's (`workflows.pins`)."""
    search_index: bool = Field(default=False, exclude_if=lambda v: not v)
    """Whether the worker has a search index (`Catalogue.search_index`), learnt with the
    tools: the run indexes its messages (`workflows.search_index`)."""

    def queue_of(self, profile: str | None) -> str | None:
        """The task queue of the model calls of `profile` (`Requests.model`, which
        `set_model` records; None: the run's own). The loop asks it for each call, so
        `set_model` only records the profile. A run that resolved its tools before
        profiles were listed keeps its queue whatever the profile."""
        if profile is not None and profile in self.profiles:
            return self.profiles[profile]
        return self.model_queue
