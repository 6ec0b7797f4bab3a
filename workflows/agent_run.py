"""`AgentRun`: one agent conversation as a durable state machine.

Running → (LLM call → tool calls)* → WaitingUser → ... → Completed or Failed.

Signal and update handlers only record intent in `RunMemory`; the main loop alone
moves the run, at turn boundaries. That keeps every decision in one place and makes
the order of replies, pauses and stops exactly the order the loop saw them.

A run of any length keeps a short history: at a safe point (a turn boundary or while
it waits for the user, with no handler in flight) it continues as new, handing its
whole `RunMemory` to the next run of the chain under the same workflow id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as TimeoutFailure

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from tarry.contracts import (
        FINISH_TOOL,
        LLM_ACTIVITY,
        MAX_INPUT_BYTES,
        MODEL_ATTRIBUTE,
        PHASE_ATTRIBUTE,
        TURNS_ATTRIBUTE,
        WAITING_FOR_ATTRIBUTE,
        WORKFLOW_TYPE,
        ApprovalDefault,
        ChatMessage,
        Decision,
        DecisionRecord,
        ErrorCode,
        ErrorInfo,
        FinishArguments,
        LlmRequest,
        LlmResponse,
        Mode,
        PendingApproval,
        Phase,
        RunResult,
        RunState,
        StopRequest,
        ToolCall,
        ToolInvocation,
        ToolResult,
        TranscriptPage,
        TranscriptQuery,
        UserInput,
    )
    from tarry.events import EventKind, RunEvent
    from workflows import approvals
    from workflows.details import current_details, llm_summary, tool_summary
    from workflows.memory import (
        QueuedInput,
        RunMemory,
        WorkflowInput,
        call_fingerprint,
        transcript_page,
    )
    from workflows.stream import RunStream

REPEAT_HINT = "You are repeating the same tool call; try a different approach."
REPEAT_HINT_AFTER = 5

_LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(minutes=1),
    # Bad responses have their own, smaller budget: see `_ask_model`.
    non_retryable_error_types=[
        ErrorCode.LLM_AUTH_FAILED,
        ErrorCode.LLM_UNKNOWN_PROFILE,
        ErrorCode.LLM_BAD_RESPONSE,
    ],
)
_CODES = frozenset(ErrorCode)
_TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# A tool that must not run twice gets one attempt: a retry after its worker died could
# repeat a side effect (a mail sent, a payment made) that the first attempt completed.
_TOOL_ONCE = RetryPolicy(maximum_attempts=1)
# Runs recorded before continue-as-new existed replay without it.
_HAND_OVER_PATCH = "continue-as-new"


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, input: WorkflowInput) -> None:
        self._input = input
        self._keeps_its_history = False
        self._callers = 0
        if input.memory is not None:  # handed over by the previous run of the chain
            self._m = input.memory
        else:
            self._m = RunMemory()
            if input.prompt:
                self._receive(UserInput(text=input.prompt))
            else:
                self._m.phase = Phase.WAITING_USER
        self._stream = RunStream(self._m.stream)
        self._m.stream = None  # the stream holds it now; the next hand-over takes it again

    @workflow.run
    async def run(self, input: WorkflowInput) -> RunResult:
        self._enter(self._m.phase)
        while not self._m.phase.ended:
            if self._m.phase is Phase.WAITING_USER:
                await workflow.wait_condition(
                    lambda: bool(self._m.inbox) or self._m.stop_requested or self._hand_over_due()
                )
                if self._m.stop_requested:
                    self._settle(Phase.COMPLETED)
                    break
                if not self._m.inbox:
                    self._hand_over()  # returns only where the run keeps its history
                    continue
                self._enter(Phase.RUNNING)
            await self._step()
        # A `send` caller is owed its answer before the run closes; an observer's poll
        # is answered now and a new one waits for the run to close.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        m = self._m
        output = m.output if m.output is not None else m.last_assistant_text
        return RunResult(phase=m.phase, output=output, error=m.error, usage=m.usage, turns=m.turn)

    # --- Handlers: they record intent; the main loop acts on it -----------------

    @workflow.signal
    def user_input(self, input: UserInput) -> None:
        if self._m.phase.ended:
            workflow.logger.warning("reply to an ended run ignored")
        elif not input.text.strip():
            self._m.warning = ErrorCode.INPUT_EMPTY
        elif len(input.text.encode()) > MAX_INPUT_BYTES:
            # Only a caller that bypasses the client gets here: the client refuses first.
            self._m.warning = ErrorCode.INPUT_TOO_LARGE
        else:
            self._receive(input)

    @workflow.signal
    def pause(self) -> None:
        # A run that already waits has nothing to pause; a stale request must not
        # swallow the answer to the next reply.
        if self._m.phase is Phase.RUNNING:
            self._m.pause_requested = True

    @workflow.signal
    def stop(self, request: StopRequest | None = None) -> None:
        self._m.stop_requested = True
        self._m.stop_reason = request.reason if request else None

    @workflow.signal
    def approve(self, decision: Decision) -> None:
        if problem := approvals.decision_problem(self._m, decision):
            # A signal cannot answer; a bad decision changes nothing and is logged.
            workflow.logger.warning("approve signal ignored: %s", problem.message)
            return
        approvals.record(self._m, decision, "signal", workflow.now())

    @workflow.update
    async def decide(self, decision: Decision) -> RunState:
        """Decide on pending tool calls and answer with the state at the next stop point."""
        stops = self._m.stops
        approvals.record(self._m, decision, "update", workflow.now())
        # With other calls of the answer still undecided, the run stays at this stop point.
        if not self._m.undecided():
            with self._caller():
                await workflow.wait_condition(lambda: self._m.stops > stops)
        else:
            self._publish_stop()  # for observers of this `decide`, as for any answer
        return self._m.state()

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        if problem := approvals.decision_problem(self._m, decision):
            raise problem

    @workflow.update
    async def send(self, input: UserInput) -> RunState:
        """Deliver a reply and answer with the state at the run's next stop point."""
        seq = self._receive(input)
        with self._caller():
            await workflow.wait_condition(lambda: self._m.answered >= seq)
        return self._m.state()

    @send.validator
    def _validate_send(self, input: UserInput) -> None:
        # Rejected updates never enter history: nothing is lost and nothing is stored.
        if self._m.phase.ended:
            raise ApplicationError(
                f"the run has ended ({self._m.phase}); start a new run to continue",
                type=ErrorCode.RUN_ENDED,
            )
        if not input.text.strip():
            raise ApplicationError("the reply is empty", type=ErrorCode.INPUT_EMPTY)
        size = len(input.text.encode())
        if size > MAX_INPUT_BYTES:
            raise ApplicationError(
                f"the reply has {size} bytes; the limit is {MAX_INPUT_BYTES}",
                type=ErrorCode.INPUT_TOO_LARGE,
            )

    @workflow.query
    def state(self) -> RunState:
        return self._state()

    @workflow.query
    def transcript(self, query: TranscriptQuery | None = None) -> TranscriptPage:
        return transcript_page(self._m.transcript, query or TranscriptQuery())

    # --- The loop ---------------------------------------------------------------

    async def _step(self) -> None:
        """One turn boundary and, unless something stops the run there, one turn."""
        m = self._m
        self._deliver_inbox()
        if m.stop_requested:
            return self._abort()
        if m.pause_requested:
            m.pause_requested = False
            return self._settle(Phase.WAITING_USER)
        if m.turns_since_input >= self._input.max_turns:
            m.warning = ErrorCode.ENGINE_MAX_TURNS
            return self._settle(Phase.WAITING_USER)
        if self._hand_over_due():
            self._hand_over()
        if m.streak >= REPEAT_HINT_AFTER:
            m.streak = 0
            m.transcript.append(ChatMessage(role="user", content=REPEAT_HINT))

        answer = await self._ask_model()
        if answer is None:
            return
        m.turn += 1
        m.turns_since_input += 1
        m.segment_turns += 1
        m.context = answer.context
        m.usage += answer.usage
        m.transcript.append(answer.message)
        self._publish_messages()
        if answer.message.content:
            m.last_assistant_text = answer.message.content
        if answer.finish_reason == "length":
            # Cut off at the model's output limit: kept as it is, and flagged.
            m.warning = ErrorCode.LLM_TRUNCATED
        workflow.set_current_details(current_details(m, self._input))
        if answer.message.tool_calls:
            await self._run_tools(answer.message.tool_calls, answer)
        elif self._input.mode is Mode.TASK:
            m.output = m.last_assistant_text
            self._settle(Phase.COMPLETED)
        else:
            self._settle(Phase.WAITING_USER)

    async def _ask_model(self) -> LlmResponse | None:
        """The LLM activity, cancelled by `stop`; None when the run ended instead."""
        bad_responses_left = self._input.bad_response_attempts
        while True:
            request = self._llm_request()
            try:
                return await self._call_model(request)
            except ActivityError as e:
                if isinstance(e.cause, CancelledError):
                    self._keep_interrupted(request.turn)
                    self._abort()
                    return None
                error = _error_of(e, default=ErrorCode.LLM_HTTP_ERROR)
                if error.code is ErrorCode.LLM_CONTEXT_MISSING and self._m.context:
                    # This worker cannot read the stored conversation: send it whole once.
                    self._m.context = None
                    continue
                if error.code is ErrorCode.LLM_BAD_RESPONSE:
                    bad_responses_left -= 1
                    if bad_responses_left > 0:
                        continue
                self._fail(error.code, error.message)
                return None

    async def _call_model(self, request: LlmRequest) -> LlmResponse:
        # A turn's events begin with the messages that led to it.
        if request.turn != self._m.turn_of_events:
            self._m.previous_turn_events = self._m.turn_events
            self._m.turn_of_events = request.turn
        self._m.turn_events = self._stream.offset()
        self._publish_messages()
        timeouts = self._input.timeouts
        call = workflow.start_activity(
            LLM_ACTIVITY,
            request,
            result_type=LlmResponse,
            start_to_close_timeout=timeouts.llm_attempt,
            heartbeat_timeout=timeouts.llm_heartbeat,
            schedule_to_close_timeout=timeouts.llm_retry_window,
            retry_policy=_LLM_RETRY,
            # Wait for the activity to confirm, so its HTTP request is really aborted.
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=llm_summary(request.turn, self._input.model),
        )
        await workflow.wait_condition(lambda: call.done() or self._m.stop_requested)
        call.cancel()  # a no-op when the call is done
        response: LlmResponse = await call
        return response

    async def _run_tools(self, calls: list[ToolCall], answer: LlmResponse) -> None:
        """Runs every call concurrently, gated ones once decided; records the results
        in the order of the calls."""
        m = self._m
        gated = [c for c in calls if c.function.name in answer.gated_tools]
        if gated:
            m.gated_schemas = answer.gated_tools
            timeout = self._input.approval_timeout
            deadline = workflow.now() + timeout if timeout else None
            m.pending = [
                PendingApproval(
                    call_id=c.id,
                    tool=c.function.name,
                    arguments=c.function.arguments,
                    deadline=deadline,
                )
                for c in gated
            ]
            self._settle(Phase.WAITING_USER)
        results = await asyncio.gather(*(self._run_tool(c, answer) for c in calls))
        finished: str | None = None
        for call, result in zip(calls, results, strict=True):
            m.transcript.append(
                ChatMessage(
                    role="tool",
                    tool_call_id=call.id,
                    content=result.to_content(),
                    decision=m.decisions.pop(call.id, None),
                )
            )
            self._track_streak(call.function.name)
            if call.function.name == FINISH_TOOL and result.ok:
                finished = str(result.data)
            elif not result.ok:
                key = call_fingerprint(call)
                m.failures[key] = m.failures.get(key, 0) + 1
                if m.failures[key] >= self._input.max_repeated_failures:
                    m.warning = ErrorCode.ENGINE_LOOP_DETECTED
        stopped_while_pending = bool(m.pending) and m.stop_requested
        m.pending = []
        if finished is not None or stopped_while_pending:
            # A stop while calls waited for a decision rejected them: the run ends as a
            # stop while waiting does.
            m.output = finished
            self._settle(Phase.COMPLETED)
        elif m.warning is ErrorCode.ENGINE_LOOP_DETECTED:
            self._settle(Phase.WAITING_USER)

    async def _run_tool(self, call: ToolCall, answer: LlmResponse) -> ToolResult:
        name, offered = call.function.name, answer.offered_tools
        if name not in offered:
            return ToolResult.failure(
                ErrorCode.TOOL_NOT_FOUND,
                f"no tool {name!r} in this run; available: {', '.join(offered)}",
            )
        if name == FINISH_TOOL:
            try:
                args = FinishArguments.model_validate_json(call.function.arguments)
            except ValidationError as e:
                return ToolResult.failure(ErrorCode.TOOL_INVALID_ARGUMENTS, str(e))
            return ToolResult.success(args.result)
        arguments = call.function.arguments
        if any(p.call_id == call.id for p in self._m.pending):
            decision = await self._decision_on(call)
            if not decision.approved:
                return _rejection(decision)
            if decision.arguments is not None:
                arguments = json.dumps(decision.arguments)
        once = name in answer.non_idempotent_tools
        try:
            result: ToolResult = await workflow.execute_activity(
                name,
                ToolInvocation(
                    run_id=workflow.info().workflow_id, call_id=call.id, arguments=arguments
                ),
                result_type=ToolResult,
                start_to_close_timeout=self._input.timeouts.tool,
                retry_policy=_TOOL_ONCE if once else _TOOL_RETRY,
                summary=tool_summary(name, arguments),
            )
        except ActivityError as e:
            if once:
                return ToolResult.failure(
                    ErrorCode.TOOL_OUTCOME_UNKNOWN,
                    f"the call was cut short ({e.cause or e}); it may or may not have taken "
                    "effect, and it was not run again: check before calling it again",
                )
            return ToolResult(ok=False, error=_error_of(e, default=ErrorCode.TOOL_FAILED))
        return result

    async def _decision_on(self, call: ToolCall) -> DecisionRecord:
        """Waits for a person's decision on a gated call: a durable wait that may last
        weeks, ended by a decision, a stop, or the deadline's default."""
        m = self._m
        with contextlib.suppress(TimeoutError):  # the deadline passed: its default applies
            await workflow.wait_condition(
                lambda: call.id in m.decisions or m.stop_requested,
                timeout=self._input.approval_timeout,
                timeout_summary=f"approval deadline for {call.function.name}",
            )
        if call.id not in m.decisions:
            by = "stop" if m.stop_requested else "deadline"
            approve = by == "deadline" and self._input.approval_default is ApprovalDefault.APPROVE
            m.decisions[call.id] = DecisionRecord(approved=approve, by=by, at=workflow.now())
        if m.phase is Phase.WAITING_USER and not m.undecided() and not m.stop_requested:
            self._enter(Phase.RUNNING)
        return m.decisions[call.id]

    # --- State changes ------------------------------------------------------------

    def _receive(self, input: UserInput) -> int:
        """Queues a reply once; returns the `seq` it was (or had been) queued as."""
        m = self._m
        if input.id is not None and input.id in m.seen_ids:
            return m.seen_ids[input.id]
        m.received += 1
        if input.id is not None:
            m.seen_ids[input.id] = m.received
        m.inbox.append(QueuedInput(seq=m.received, input=input))
        return m.received

    def _deliver_inbox(self) -> None:
        m = self._m
        if not m.inbox:
            return
        for queued in m.inbox:
            m.transcript.append(ChatMessage(role="user", content=queued.input.text))
        m.inbox = []
        # A reply delivered at the boundary a pause asked for is what the pause waits for.
        m.pause_requested = False
        m.turns_since_input = 0
        m.warning = None
        m.failures = {}

    def _track_streak(self, tool: str) -> None:
        m = self._m
        m.streak = m.streak + 1 if tool == m.streak_tool else 1
        m.streak_tool = tool

    def _abort(self) -> None:
        reason = f": {self._m.stop_reason}" if self._m.stop_reason else ""
        self._fail(ErrorCode.ENGINE_ABORTED, f"stopped by the user{reason}")

    def _fail(self, code: ErrorCode, message: str) -> None:
        self._m.error = ErrorInfo(code=code, message=message)
        self._settle(Phase.FAILED)

    def _enter(self, phase: Phase) -> None:
        """Every phase change is visible: search attributes to list runs by, details to read."""
        m = self._m
        m.phase = phase
        waiting_for = m.waiting_for()
        workflow.upsert_search_attributes(
            [
                PHASE_ATTRIBUTE.value_set(phase.value),
                TURNS_ATTRIBUTE.value_set(m.turn),
                MODEL_ATTRIBUTE.value_set(self._input.model),
                WAITING_FOR_ATTRIBUTE.value_set(waiting_for.value)
                if waiting_for
                else WAITING_FOR_ATTRIBUTE.value_unset(),
            ]
        )
        workflow.set_current_details(current_details(m, self._input))

    def _settle(self, phase: Phase) -> None:
        """Moves to a stop point: every reply delivered so far now has its answer."""
        m = self._m
        delivered = m.inbox[0].seq - 1 if m.inbox else m.received
        m.answered = m.received if phase.ended else delivered
        m.stops += 1
        m.pause_requested = False  # any stop point is the pause a caller asked for
        self._enter(phase)
        self._publish_stop()

    # --- The event stream: observers see messages and stop points as they happen -------

    def _state(self) -> RunState:
        update = {"events": self._stream.offset(), "turn_events": self._m.turn_events}
        return self._m.state().model_copy(update=update)

    def _publish_stop(self) -> None:
        self._publish_messages()
        self._stream.publish(RunEvent(kind=EventKind.STOP, state=self._state()))

    def _publish_messages(self) -> None:
        m = self._m
        for index in range(m.published, len(m.transcript)):
            message = m.transcript[index]
            self._stream.publish(RunEvent(kind=EventKind.MESSAGE, index=index, message=message))
        m.published = len(m.transcript)

    def _keep_interrupted(self, turn: int) -> None:
        """A stop cut the answer short: the words the model had written stay, marked."""
        if words := self._stream.partial_answer(turn, since=self._m.turn_events):
            message = ChatMessage(role="assistant", content=words, interrupted=True)
            self._m.transcript.append(message)

    def _llm_request(self) -> LlmRequest:
        """Only the messages the stored conversation lacks: history grows by each turn's
        news, not by the whole conversation again (see `ContextRef`)."""
        m = self._m
        stored = m.context.count if m.context else 0
        return LlmRequest(
            profile=self._input.model,
            system=self._input.system,
            context=m.context,
            messages=m.transcript[stored:],
            tools=self._input.tools,
            turn=m.turn + 1,
            require_approval=self._input.require_approval,
        )

    # --- Continue-as-new ------------------------------------------------------------

    def _hand_over_due(self) -> bool:
        """Due, and no `send` or `decide` caller still waits for an answer from this run."""
        due = (
            self._m.segment_turns >= self._input.continue_as_new_after_turns
            or workflow.info().is_continue_as_new_suggested()
        )
        # Not `all_handlers_finished()`: an observer's poll of the event stream is a handler
        # too, and one is nearly always waiting while someone watches.
        return due and not self._keeps_its_history and not self._callers

    @contextlib.contextmanager
    def _caller(self) -> Iterator[None]:
        """Counts a `send` or `decide` caller waiting for this run's next stop point."""
        self._callers += 1
        try:
            yield
        finally:
            self._callers -= 1

    def _hand_over(self) -> None:
        """Continues as new with the whole memory. Signals and updates that arrive
        meanwhile reach the next run: the server refuses to close this one while it has
        unseen events, and the new run starts with everything this one knew."""
        if not workflow.patched(_HAND_OVER_PATCH):
            self._keeps_its_history = True  # started before continue-as-new existed
            return
        # Observers' polls end here; they follow the chain to the next run, whose stream
        # goes on from the same offsets with only the last two turns' events: the rest
        # would ride along through every hand-over. Two, so an observer a turn behind
        # (its polls slowed by the hand-over) still finds its place.
        self._stream.detach_pollers()
        self._stream.truncate(self._m.previous_turn_events)
        stream = self._stream.get_state()
        memory = self._m.model_copy(update={"segment_turns": 0, "stream": stream})
        workflow.continue_as_new(self._input.model_copy(update={"memory": memory}))


def _rejection(decision: DecisionRecord) -> ToolResult:
    """The tool result the model sees for a call that did not run."""
    if decision.by == "deadline":
        return ToolResult.failure(
            ErrorCode.TOOL_APPROVAL_EXPIRED, "nobody decided on this call before its deadline"
        )
    if decision.by == "stop":
        return ToolResult.failure(ErrorCode.TOOL_REJECTED, "the run was stopped before a decision")
    return ToolResult.failure(ErrorCode.TOOL_REJECTED, decision.reason or "rejected by the user")


def _error_of(e: ActivityError, *, default: ErrorCode) -> ErrorInfo:
    """The code and message of the failure behind an activity error.

    A retry window that runs out surfaces as a timeout whose cause is the last
    attempt's failure, so our own coded error is looked for down the whole chain."""
    timed_out = False
    cause: BaseException | None = e.cause
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type in _CODES:
            return ErrorInfo(code=ErrorCode(cause.type), message=cause.message)
        timed_out = timed_out or isinstance(cause, TimeoutFailure)
        cause = cause.__cause__
    if timed_out:
        code = (
            ErrorCode.LLM_TIMEOUT if default is ErrorCode.LLM_HTTP_ERROR else ErrorCode.TOOL_TIMEOUT
        )
        return ErrorInfo(code=code, message=f"timed out: {e.cause}")
    return ErrorInfo(code=default, message=str(e.cause or e))
