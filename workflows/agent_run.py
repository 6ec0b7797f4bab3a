"""`AgentRun`: one agent conversation as a durable state machine.

Running → (LLM call → tool calls)* → WaitingUser → ... → Completed or Failed.

Signal and update handlers only record intent in `RunMemory` (`decide` and `set_model` say why they
do more); the main loop alone moves the run, at turn boundaries. That keeps every decision in one
place, and the order of replies, pauses and stops the order the loop saw.

A run of any length keeps a short history: at a safe point it continues as new,
handing its `RunMemory` to the next run of the chain under the same workflow id. And a
bounded memory: the messages before the model's window go to pages of the payload
store first (`pages`), so the memory holds a window and references, not the whole
conversation.

This module is the handlers, the loop and phase changes; the hand-over is `hand_over`, a
turn's model call `model_calls`, its tool calls `tool_calls`, the rules of approvals,
budgets and structured output are `approvals`, `budgets` and `output`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import (
        AUDIT_QUERY,
        SUMMARY_MEMO,
        TEMPORAL_UI,
        WORKFLOW_TYPE,
        Acting,
        AgentReport,
        AuditRecord,
        BudgetRaise,
        ChatMessage,
        Decision,
        ErrorCode,
        ErrorInfo,
        ForkOrigin,
        Mode,
        PauseRequest,
        Phase,
        RunInput,
        RunResult,
        RunState,
        StopRequest,
        ToolCall,
        ToolDefinition,
        TranscriptAnswer,
        TranscriptQuery,
        UserInput,
        WaitingFor,
        reply_problem,
    )
    from tarry.contracts.compatibility import (  # patch ids, and when each goes
        CATALOGUE_AT_START,
        COST_ATTRIBUTE,
        TITLE_FROM_FIRST_MESSAGE,
    )
    from tarry.core.text import NO_SUMMARY, summary_of
    from workflows import (
        agents,
        approvals,
        audit,
        budgets,
        hand_over,
        model_calls,
        notifications,
        output,
        pages,
        tool_calls,
        traces,
    )
    from workflows.details import count_phase, current_details, search_attributes
    from workflows.memory import RunMemory, WorkflowInput
    from workflows.stream import RunStream


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, input: WorkflowInput) -> None:
        self._input = input
        self._refused_hand_over: int | None = None
        """The turn at which a hand-over too large to store was refused: not tried again
        before the next turn."""
        self._callers = 0
        self._reports: list[asyncio.Task[None]] = []
        """A sub-agent's reports to its parent in flight (`agents.report`)."""
        if input.memory is not None:  # handed over by the previous run of the chain, or resumed
            self._m = audit.carried_on(input.memory)
        else:
            self._m = RunMemory.of(input)
            self._m.agents.parent = input.parent
            if fork := input.fork:  # the conversation before the message it branches at
                self._m.conversation.transcript = list(fork.transcript)
                self._m.forked_from = ForkOrigin(run_id=fork.run_id, at=fork.at)
            audit.started(self._m, input)
            if input.prompt:
                self._m.inbox.receive(UserInput(text=input.prompt, by=input.started_by))
            else:
                self._m.phase = Phase.WAITING_USER
        self._stream = RunStream(self._m.events.state)
        self._m.events.state = None  # the stream holds it; the next hand-over takes it again
        self._outbox = notifications.Outbox()

    @workflow.run
    async def run(self, input: WorkflowInput) -> RunResult:
        m = self._m
        self._enter(m.phase)
        # Before anything else: a run naming a tool no worker has is refused at once. A
        # run handed over or resumed has its tools already.
        if m.catalogue.tools is None:
            workflow.deprecate_patch(CATALOGUE_AT_START.id)
            if refused := await tool_calls.resolve(m, self._input):
                self._fail(refused)
        while not m.phase.ended:
            if m.phase is Phase.WAITING_USER:
                await workflow.wait_condition(
                    lambda: self._goes_on() or m.requests.stop or self._hand_over_due()
                )
                if m.requests.stop:
                    self._settle(Phase.COMPLETED)
                    break
                if not self._goes_on():
                    await self._hand_over()  # returns where the run keeps its history
                    continue
                self._enter(Phase.RUNNING)
            await self._step()
        # A `send` caller is owed its answer before the run closes; an observer's poll
        # is answered now and a new one waits for the run to close.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await asyncio.gather(*self._reports)  # a sub-agent's last word to its parent
        await self._outbox.delivered()  # the server drops a closed run's activities
        return m.result()

    # --- Handlers: they record intent; the main loop acts on it -----------------

    # Every door of Tarry names who acts (`by`); what arrives without a name was sent
    # straight from the Temporal UI or CLI, by an operator: recorded as `TEMPORAL_UI`.

    @workflow.signal
    def user_input(self, input: UserInput) -> None:
        # A signal cannot be refused: under `reject` one sent past the client (the
        # Temporal UI, `temporal workflow signal`) is queued, an operator's own door.
        if self._m.phase.ended:
            workflow.logger.warning("reply to an ended run ignored")
        elif problem := reply_problem(input.text):
            # Only a caller that bypasses the client gets here: the client refuses first.
            self._m.warning, _ = problem
        else:
            audit.receive(self._m, input)

    @workflow.signal
    def pause(self, request: PauseRequest | None = None) -> None:
        # A run that already waits has nothing to pause; a stale request must not
        # swallow the answer to the next reply.
        if self._m.phase is Phase.RUNNING:
            self._m.requests.pause = True
            self._m.requests.paused_by = (request.by if request else None) or TEMPORAL_UI
            audit.paused(self._m, request)

    @workflow.signal
    def stop(self, request: StopRequest | None = None) -> None:
        self._m.requests.stop = True
        self._m.requests.stop_reason = request.reason if request else None
        self._m.requests.stopped_by = (request.by if request else None) or TEMPORAL_UI
        audit.stopped(self._m, request)

    @workflow.signal
    def approve(self, decision: Decision) -> None:
        if problem := approvals.decision_problem(self._m, decision):
            # A signal cannot answer; a bad decision changes nothing and is logged.
            workflow.logger.warning("approve signal ignored: %s", problem.message)
            return
        approvals.record(self._m, decision, "signal", workflow.now())

    @workflow.signal
    def agent_status(self, report: AgentReport) -> None:
        """A sub-agent's run says what it waits for now (`agents.delegate` follows it)."""
        agents.take_report(self._m, report)

    @workflow.signal
    def parent_budget(self, raised: BudgetRaise) -> None:
        """The parent's budget was raised: this sub-agent may spend what it has left."""
        if budgets.raise_problem(self._m, raised) is None:
            budgets.record(self._m, raised)

    @workflow.signal
    def wake(self) -> None:
        """Changes nothing: a workflow task in which a parked run learns that its build is
        no longer current, and hands over (`builds.moves_to_new_build`)."""

    @workflow.update
    async def decide(self, decision: Decision) -> RunState:
        """Decide on pending tool calls and answer with the state at the next stop point.

        An exception to "handlers only record intent": with other calls of the answer
        still undecided, the run stays at this stop point and no loop step tells this
        decision's observers, so the handler publishes it. The loop's wait for a decision
        (`tool_calls`) also ends on a signal's or a deadline's: publishing there would
        show observers stop points they never had."""
        stops = self._m.stops
        approvals.record(self._m, decision, "update", workflow.now())
        if not self._m.undecided():
            await self._next_stop(stops)
        else:
            self._stream.publish_stop(self._m)  # for observers of this `decide`, as for any answer
        return self.state()

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        if problem := approvals.decision_problem(self._m, decision):
            raise problem

    @workflow.update
    async def raise_budget(self, raised: BudgetRaise) -> RunState:
        """Replaces the budget limits `raised` names; answers with the state at the next
        stop point when that lets a run paused on its budget go on, else at once."""
        stops = self._m.stops
        if budgets.record(self._m, raised):
            await self._next_stop(stops)
        return self.state()

    @raise_budget.validator
    def _validate_raise_budget(self, raised: BudgetRaise) -> None:
        if problem := budgets.raise_problem(self._m, raised):
            raise problem

    @workflow.update
    async def retry(self, request: Acting | None = None) -> RunState:
        """Asks the model again, for a run that waits because it kept failing
        (`waiting_for: "model"`); answers with the state at the next stop point."""
        stops = self._m.stops
        self._m.requests.retry = True
        audit.retried(self._m, request)
        await self._next_stop(stops)
        return self.state()

    @retry.validator
    def _validate_retry(self, request: Acting | None = None) -> None:
        if problem := self._m.ended_problem() or self._m.model_problem():
            raise problem

    @workflow.update
    def set_model(self, switch: audit.ModelArg) -> RunState:
        """Switches the run's model calls from now on to the worker's profile `name`; a
        run waiting for a failing model then goes on with `retry` or a reply.

        An exception to "handlers only record intent": it writes its note into the
        transcript at once, so the switch stands in the conversation where it was asked
        for, even while the run waits and its loop takes no step. Left to the loop, it
        would come only after the reply that wakes the run (or never, for a run stopped
        while it waits): runs in flight would send their models other conversations."""
        name = audit.switched(self._m, switch)
        self._m.requests.model = name
        self._note(f"The model profile is now {name!r}.")
        return self.state()

    @set_model.validator
    def _validate_set_model(self, switch: audit.ModelArg) -> None:
        name = audit.profile_of(switch)
        if problem := self._m.ended_problem():
            raise problem
        if not name.strip():
            raise ApplicationError("name a model profile", type=ErrorCode.INPUT_INVALID)
        # A typo would otherwise fail the run's next model call instead of this request.
        if (profiles := self._m.catalogue.profiles) and name not in profiles:
            raise ApplicationError(
                f"no model profile {name!r} on this worker; configured: {', '.join(profiles)}",
                type=ErrorCode.LLM_UNKNOWN_PROFILE,
            )

    @workflow.update
    async def started(self) -> RunState:
        """The state once the run has its tools, or `TOOL_NOT_FOUND` when it names one the
        worker lacks. Clients before `CatalogueCheck` ask it after a start; today's ask
        the worker before they start a run (`workflows.catalogue_check`)."""
        m = self._m
        await workflow.wait_condition(lambda: m.catalogue.tools is not None or m.phase.ended)
        if m.catalogue.tools is None and m.error is not None:
            raise ApplicationError(m.error.message, type=m.error.code)
        return self.state()

    @workflow.update
    async def send(self, input: UserInput) -> RunState:
        """Deliver a reply and answer with the state at the run's next stop point."""
        seq = audit.receive(self._m, input)
        with self._caller():
            # A run paused on its budget, or waiting for a sub-agent's person, keeps the
            # reply queued: this is its stop point.
            await workflow.wait_condition(
                lambda: (
                    self._m.inbox.answered >= seq
                    or self._m.waiting_for() in (WaitingFor.BUDGET, WaitingFor.AGENT)
                )
            )
        return self.state()

    @send.validator
    def _validate_send(self, input: UserInput) -> None:
        # Rejected updates never enter history: nothing is lost and nothing is stored.
        if problem := self._m.reply_refusal(input):
            raise problem

    @workflow.update
    def reply(self, input: UserInput) -> RunState:
        """Queue a reply and answer at once: the `user_input` signal, but one the run can
        refuse (`RUN_BUSY` under `reject`, `RUN_ENDED`, a bad text) before it enters."""
        audit.receive(self._m, input)
        return self.state()

    @reply.validator
    def _validate_reply(self, input: UserInput) -> None:
        self._validate_send(input)

    @workflow.update
    def set_reply_policy(self, change: audit.PolicyArg) -> RunState:
        """What a reply does from now on that arrives while the agent works."""
        self._m.requests.reply_policy = audit.policy_changed(self._m, change)
        return self.state()

    @set_reply_policy.validator
    def _validate_set_reply_policy(self, change: audit.PolicyArg) -> None:
        if problem := self._m.ended_problem():
            raise problem

    @workflow.query
    def state(self) -> RunState:
        return self._stream.state_of(self._m)

    @workflow.query
    def transcript(self, query: TranscriptQuery | None = None) -> TranscriptAnswer:
        return pages.answer(self._m, query or TranscriptQuery())

    @workflow.query(name=AUDIT_QUERY)  # this segment's (`workflows.audit`)
    def audit_trail(self) -> list[AuditRecord]:
        return self._m.audit

    @workflow.query
    def run_input(self) -> RunInput:
        """The input the run was started with (`RunHandle.fork` starts its fork with it)."""
        return self._input.run_input()

    @workflow.query
    def resumption(self) -> WorkflowInput:
        """The input of a run that goes on where this ended one stopped (`tarry resume`)."""
        return self._input.model_copy(update={"memory": self._m.resumed(), "audit": []})

    # --- The loop ---------------------------------------------------------------

    async def _step(self) -> None:
        """One turn boundary and, unless something stops the run there, one turn."""
        m = self._m
        if not m.requests.stop and budgets.holds(m):
            return self._settle(Phase.WAITING_USER)
        first = m.inbox.queued[0].input.text if m.inbox.queued else None
        m.deliver_inbox()
        if first is not None:
            self._title(first)
        if m.requests.stop:
            return self._abort()
        if m.requests.pause:
            m.requests.pause = False
            return self._settle(Phase.WAITING_USER)
        if m.guards.turns_since_input >= self._input.max_turns:
            m.warning = ErrorCode.ENGINE_MAX_TURNS
            return self._settle(Phase.WAITING_USER)
        if self._hand_over_due():
            await self._hand_over()
            if m.phase is not Phase.RUNNING:  # refused: too large to hand over
                return None
        tool_calls.hint_if_repeating(m)
        if m.requests.stop:
            return self._abort()

        if m.model_failure is not None:  # asked again: by `retry`, or with a reply
            m.model_failure, m.requests.retry, m.error = None, False, None
        due = pages.due(m, self._input)
        ask = model_calls.ask(m, self._input, self._stream)
        if not due:
            answer = await ask
        else:  # written while the model answers: the hand-over after it carries the window
            answer, _ = await asyncio.gather(ask, pages.write(m, due))
        if answer is None:
            return self._abort()
        if isinstance(answer, ErrorInfo):
            if m.model_failure is not None:  # a person decides how to go on
                m.error = answer
                self._note(
                    f"The model kept failing ({answer.code}: {answer.message}); "
                    "waiting for a person to retry, switch the model or reply."
                )
                return self._settle(Phase.WAITING_USER)
            return self._fail(answer)
        m.take(answer)
        self._stream.publish_messages(m)
        workflow.set_current_details(current_details(m, self._input))
        if answer.message.tool_calls:
            tools = m.catalogue.tools
            assert tools is not None, "every run resolves its tools at its start (`run`)"
            await self._run_tools(answer.message.tool_calls, tools)
        elif self._input.mode is Mode.TASK:
            if isinstance(done := output.finish(m, self._input.output_schema), ErrorInfo):
                return self._fail(done)
            if done:  # else the model is asked again, shown what its answer missed
                self._settle(Phase.COMPLETED)
        else:
            self._settle(Phase.WAITING_USER)

    async def _run_tools(self, calls: list[ToolCall], tools: list[ToolDefinition]) -> None:
        """Runs every call concurrently, gated ones once decided; records the results
        in the order of the calls."""
        m, input = self._m, self._input
        if tool_calls.gate(m, input, calls, tools):
            self._settle(Phase.WAITING_USER)
        results = await asyncio.gather(
            *(tool_calls.run_call(m, input, call, tools, self._follow) for call in calls)
        )
        finished = tool_calls.record(m, input, calls, results)
        stopped_while_pending = bool(m.approvals.pending) and m.requests.stop
        m.approvals.pending = []
        if finished is not None or stopped_while_pending:
            # A stop while calls waited for a decision rejected them: the run ends as a
            # stop while waiting does.
            m.conversation.output = finished
            self._settle(Phase.COMPLETED)
        elif m.warning is ErrorCode.ENGINE_LOOP_DETECTED:
            self._settle(Phase.WAITING_USER)

    # --- State changes ------------------------------------------------------------

    def _abort(self) -> None:
        reason = f": {self._m.requests.stop_reason}" if self._m.requests.stop_reason else ""
        self._fail(ErrorInfo(code=ErrorCode.ENGINE_ABORTED, message=f"stopped by the user{reason}"))

    def _fail(self, error: ErrorInfo) -> None:
        self._m.error = error
        self._settle(Phase.FAILED)

    def _enter(self, phase: Phase) -> None:
        """Every phase change is visible: search attributes to list runs by, details to
        read, a metric to count by, a span for a wait that ended, and for a sub-agent, a
        report to its parent."""
        m = self._m
        m.phase = phase
        cost = workflow.patched(COST_ATTRIBUTE.id)
        workflow.upsert_search_attributes(search_attributes(m, self._input, cost=cost))
        workflow.set_current_details(current_details(m, self._input))
        count_phase(m)
        traces.entered(m)
        agents.report(m, self._reports)

    def _follow(self) -> None:
        """While tool calls run: waits for a person as long as a gated call is undecided
        or a sub-agent waits for one, and goes back to `Running` once neither does."""
        m = self._m
        if m.phase is Phase.RUNNING and m.agents.waiting:
            self._settle(Phase.WAITING_USER)
        elif (
            m.phase is Phase.WAITING_USER
            and not m.undecided()
            and not m.agents.waiting
            and not m.requests.stop
        ):
            self._enter(Phase.RUNNING)

    def _settle(self, phase: Phase) -> None:
        """Moves to a stop point: every reply delivered so far now has its answer."""
        m = self._m
        delivered = m.inbox.queued[0].seq - 1 if m.inbox.queued else m.inbox.received
        m.inbox.answered = m.inbox.received if phase.ended else delivered
        m.stops += 1
        m.requests.pause = False  # any stop point is the pause a caller asked for
        self._enter(phase)
        self._stream.publish_stop(self._m)
        self._outbox.stop_point(m)

    def _title(self, text: str) -> None:
        """A run started without a prompt (by get-or-create, or `tarry start` with none)
        takes its summary, which the run lists read from its memo, from the first message
        delivered to it: else it stays `NO_SUMMARY` for good."""
        if workflow.memo_value(SUMMARY_MEMO, None, type_hint=str) != NO_SUMMARY:
            return
        if workflow.patched(TITLE_FROM_FIRST_MESSAGE.id):
            workflow.upsert_memo({SUMMARY_MEMO: summary_of(text)})

    def _note(self, text: str) -> None:
        """A line of the run's own in its transcript, for people reading it and for the
        model: what happened to the conversation between its turns."""
        self._m.conversation.transcript.append(ChatMessage(role="system", content=text))
        self._stream.publish_messages(self._m)

    def _goes_on(self) -> bool:
        """Whether a waiting run has a reason to go on: a reply, raised limits, a retry."""
        return budgets.goes_on(self._m) or self._m.requests.retry

    def _hand_over_due(self) -> bool:
        """Whether the run hands over now (`hand_over.due`)."""
        return hand_over.due(
            self._m,
            self._input,
            callers=self._callers,
            sending=self._outbox.sending,
            refused_at=self._refused_hand_over,
        )

    async def _next_stop(self, stops: int) -> None:
        """Waits, as a caller the run owes an answer, for the stop point after `stops`."""
        with self._caller():
            await workflow.wait_condition(lambda: self._m.stops > stops)

    @contextlib.contextmanager
    def _caller(self) -> Iterator[None]:
        """Counts a caller (`send`, `decide`, `raise_budget`) owed the next stop point: the
        run does not hand over while one waits (`hand_over`)."""
        self._callers += 1
        try:
            yield
        finally:
            self._callers -= 1

    async def _hand_over(self) -> None:
        """Continues as new (`hand_over`), or returns where the run keeps its history: a
        caller come while pages were written, or a memory too large to hand over, which
        waits for a person and is not tried again before the next turn."""
        m = self._m
        refused = await hand_over.continue_as_new(m, self._input, self._stream, self._hand_over_due)
        if refused is not None:
            self._refused_hand_over = m.conversation.turn
            m.error = refused
            self._settle(Phase.WAITING_USER)
