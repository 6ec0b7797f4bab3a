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

This module is the handlers and the loop. A turn's model and tool calls go through the
stages around them (`stages`: budgets, pages, approval rules and gate, ...), what the run
waits for is `waits`, its phase changes `phases`, the hand-over `hand_over`, and the rules
of decisions and structured output `approvals` and `output`.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import (
        AUDIT_QUERY,
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
        reply_problem,
    )
    from tarry.contracts.compatibility import (  # patch ids, and when each goes
        CATALOGUE_AT_START,
    )
    from workflows import (
        agents,
        approvals,
        audit,
        budgets,
        hand_over,
        handlers,
        output,
        pages,
        search_index,
        slots,
        stages,
        tool_calls,
        traces,
        waits,
    )
    from workflows.details import current_details, title_from
    from workflows.memory import RunMemory, WorkflowInput
    from workflows.phases import Phases
    from workflows.stage import RunScope
    from workflows.stream import RunStream
    from workflows.waits import model


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, input: WorkflowInput) -> None:
        self._input = input
        self._refused_hand_over: int | None = None
        """The turn at which a hand-over too large to store was refused: not tried again
        before the next turn."""
        if input.memory is not None:  # handed over by the previous run of the chain, or resumed
            self._m = audit.carried_on(input.memory)
        else:
            self._m = RunMemory.of(input)
            audit.started(self._m, input)
        traces.began(self._m)
        self._stream = RunStream(self._m.events.state)
        self._m.events.state = None  # the stream holds it; the next hand-over takes it again
        self._phases = Phases(self._m, input, self._stream)
        self._scope = RunScope(self._m, input, self._stream, self._phases)
        handlers.install(self._scope)

    @workflow.run
    async def run(self, input: WorkflowInput) -> RunResult:
        m = self._m
        self._phases.enter(m.phase)
        # Before anything else: a run naming a tool no worker has is refused at once. A
        # run handed over or resumed has its tools already.
        if m.catalogue.tools is None:
            workflow.deprecate_patch(CATALOGUE_AT_START.id)
            if refused := await tool_calls.resolve(m, self._input):
                self._phases.fail(refused)
        while not m.phase.ended:
            if m.phase is Phase.WAITING_USER:
                search_index.index_soon(m, self._phases.indexing)  # the answer it waits on
                await workflow.wait_condition(
                    lambda: waits.goes_on(m) or m.requests.stop or self._hand_over_due()
                )
                if m.requests.stop:
                    self._phases.settle(Phase.COMPLETED)
                    break
                if not waits.goes_on(m):
                    await self._hand_over()  # returns where the run keeps its history
                    continue
                self._phases.enter(Phase.RUNNING)
            await self._step()
        await slots.release(m, self._input)  # however it ended: the owner's next run starts
        search_index.index_soon(m, self._phases.indexing)
        await search_index.settled(self._phases.indexing)
        # A `send` caller is owed its answer before the run closes; an observer's poll
        # is answered now and a new one waits for the run to close.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await asyncio.gather(*self._phases.reports)  # a sub-agent's last word to its parent
        await self._phases.outbox.delivered()  # the server drops a closed run's activities
        traces.ended(m)
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
            self._receive(input)

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

    def _receive(self, input: UserInput) -> int:
        """Queues a reply in the inbox with its author (`temporal-ui` for one that came
        without), then audits it unless the inbox had it (a retry), as `pause` and `stop`
        do; its `seq`."""
        named = input if input.by else input.model_copy(update={"by": TEMPORAL_UI})
        receipt = self._m.inbox.receive(named)
        if receipt.new:
            audit.replied(self._m, input, receipt.seq)
        return receipt.seq

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
            await self._phases.next_stop(stops)
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
            await self._phases.next_stop(stops)
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
        await self._phases.next_stop(stops)
        return self.state()

    @retry.validator
    def _validate_retry(self, request: Acting | None = None) -> None:
        if problem := self._m.ended_problem() or model.retry_problem(waits.waiting_for(self._m)):
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
        if problem := self._m.ended_problem() or model.switch_problem(self._m, switch):
            raise problem

    @workflow.update
    async def started(self) -> RunState:
        """The state once the run has its tools, or `TOOL_NOT_FOUND` when it names one the
        worker lacks. Clients before the catalogue check ask it after a start; today's ask
        the worker's `catalogue_check` activity before they start a run."""
        m = self._m
        await workflow.wait_condition(lambda: m.catalogue.tools is not None or m.phase.ended)
        if m.catalogue.tools is None and m.error is not None:
            raise ApplicationError(m.error.message, type=m.error.code)
        return self.state()

    @workflow.update
    async def send(self, input: UserInput) -> RunState:
        """Deliver a reply and answer with the state at the run's next stop point."""
        seq = self._receive(input)
        with self._phases.owed():
            # A run whose wait a reply does not end (its budget, a sub-agent's person)
            # keeps the reply queued: this is its stop point.
            await workflow.wait_condition(
                lambda: self._m.inbox.answered >= seq or waits.keeps_replies(self._m)
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
        self._receive(input)
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
        if not m.requests.stop and stages.holds(self._scope):
            return self._phases.wait()
        first = m.inbox.queued[0].input.text if m.inbox.queued else None
        m.deliver_inbox()
        if first is not None:
            self._title(first)
        if m.requests.stop:
            return self._phases.abort()
        if m.requests.pause:
            m.requests.pause = False
            return self._phases.wait()
        if m.guards.turns_since_input >= self._input.max_turns:
            m.warning = ErrorCode.ENGINE_MAX_TURNS
            return self._phases.wait()
        if self._hand_over_due():
            await self._hand_over()
            if m.phase is not Phase.RUNNING:  # refused: too large to hand over
                return None
        if m.requests.stop:
            return self._phases.abort()

        if m.model_failure is not None:  # asked again: by `retry`, or with a reply
            m.model_failure, m.requests.retry, m.error = None, False, None
        answer = await stages.ask_model(self._scope)
        if answer is None:
            return self._phases.abort()
        if isinstance(answer, ErrorInfo):
            if m.model_failure is not None:  # a person decides how to go on
                m.error = answer
                self._note(
                    f"The model kept failing ({answer.code}: {answer.message}); "
                    "waiting for a person to retry, switch the model or reply."
                )
                return self._phases.wait()
            return self._phases.fail(answer)
        m.take(answer)
        self._stream.publish_messages(m)
        workflow.set_current_details(current_details(m, self._input))
        if answer.message.tool_calls:
            tools = m.catalogue.tools
            assert tools is not None, "every run resolves its tools at its start (`run`)"
            await self._run_tools(answer.message.tool_calls, tools)
        elif self._input.mode is Mode.TASK:
            if isinstance(done := output.finish(m, self._input.output_schema), ErrorInfo):
                return self._phases.fail(done)
            if done:  # else the model is asked again, shown what its answer missed
                self._phases.settle(Phase.COMPLETED)
        else:
            self._phases.wait()

    async def _run_tools(self, calls: list[ToolCall], tools: list[ToolDefinition]) -> None:
        """Runs the calls (`stages.run_tools`) and records their results in their order."""
        m, input = self._m, self._input
        results = await stages.run_tools(self._scope, calls, tools)
        finished = tool_calls.record(m, input, calls, results)
        stopped_while_pending = bool(m.approvals.pending) and m.requests.stop
        m.approvals.pending = []
        if finished is not None or stopped_while_pending:
            # A stop while calls waited for a decision rejected them: the run ends as a
            # stop while waiting does.
            m.conversation.output = finished
            self._phases.settle(Phase.COMPLETED)
        elif m.warning is ErrorCode.ENGINE_LOOP_DETECTED:
            self._phases.wait()

    # --- Helpers ------------------------------------------------------------------

    def _title(self, text: str) -> None:
        """A run started without a prompt takes its summary from `text`, its first
        message (`details.title_from`)."""
        title_from(text)

    def _note(self, text: str) -> None:
        """A line of the run's own in its transcript, for people reading it and for the
        model: what happened to the conversation between its turns."""
        self._m.conversation.transcript.append(ChatMessage(role="system", content=text))
        self._stream.publish_messages(self._m)

    def _hand_over_due(self) -> bool:
        """Whether the run hands over now (`hand_over.due`)."""
        return hand_over.due(
            self._m,
            self._input,
            callers=self._phases.callers,
            sending=self._phases.outbox.sending,
            refused_at=self._refused_hand_over,
        )

    async def _hand_over(self) -> None:
        """Continues as new (`hand_over`), or returns where the run keeps its history: a
        caller come while pages were written, or a memory too large to hand over, which
        waits for a person and is not tried again before the next turn."""
        m = self._m
        await search_index.settled(self._phases.indexing)  # a hand-over leaves tasks behind
        refused = await hand_over.continue_as_new(m, self._input, self._stream, self._hand_over_due)
        if refused is not None:
            self._refused_hand_over = m.conversation.turn
            m.error = refused
            self._phases.wait()
