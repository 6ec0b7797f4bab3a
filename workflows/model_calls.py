"""Model calls: the request a turn sends, the activity's options, what its failures mean
and which of them are asked again.

The workflow sends the model activity the tool definitions of its own catalogue (see
`RunCatalogue.tools`), and only with a request that starts a stored conversation: the
conversation keeps them, so a turn adds to history only its news.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.exceptions import TimeoutError as TimeoutFailure

from tarry.contracts import (
    LLM_ACTIVITY,
    ChatMessage,
    ErrorCode,
    ErrorInfo,
    LlmRequest,
    LlmResponse,
    Mode,
)
from tarry.contracts.compatibility import ASK_ON_MODEL_FAILURE
from tarry.contracts.guardrails import GuardCheck, GuardPoint
from workflows import guardrails, pins
from workflows.details import count_usage, llm_summary
from workflows.fallback import TurnFallback, is_down
from workflows.memory import RunMemory, WorkflowInput
from workflows.stage import RunScope

LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(minutes=1),
    # Bad responses have their own, smaller budget: see `ask`.
    non_retryable_error_types=[
        ErrorCode.LLM_AUTH_FAILED,
        ErrorCode.LLM_UNKNOWN_PROFILE,
        ErrorCode.LLM_BAD_RESPONSE,
    ],
)
_CODES = frozenset(ErrorCode)


async def ask(run: RunScope) -> LlmResponse | ErrorInfo | None:
    """The model's answer; the error that ends the run instead; or None when a `stop`
    cancelled the call. A call a `stop` or a reply cuts short keeps the words the model
    had written by then, marked; after a reply (`ReplyPolicy.INTERRUPT`) the model is
    asked again at once, with it.

    Runs from before reply policies replay unchanged without a patch: their memory's
    policy is `queue`, under which `interrupting()` is never true."""
    m, input, stream = run.memory, run.input, run.stream
    bad_responses_left = input.bad_response_attempts
    fallback = TurnFallback(allowed=input.models)
    while True:
        if m.interrupting():  # the reply that cut the last call short, or came before this one
            m.deliver_inbox()
        if await guardrails.guard_replies(run):  # before any reply reaches the model
            return None  # a stop ended a wait for a decision on one
        request = _request_for(m, input, fallback)
        stream.begin_turn(m, request.turn)
        try:
            queue = m.catalogue.queue_of(fallback.asking or m.requests.model)
            answer = await _call_model(request, input, queue, functools.partial(_cut, m))
            count_usage(request.profile, answer)
            return answer
        except ActivityError as e:
            if is_down(e):  # only a profile with a fallback is ever down
                fallback.down(e)
                continue
            if isinstance(e.cause, CancelledError):
                # The activity confirmed its cancellation only after sending its last
                # words (`AnswerObservers.close`), so they are in history and the stream.
                if interrupted := stream.interrupted_answer(m, request.turn):
                    m.conversation.transcript.append(interrupted)
                if m.requests.stop or not m.interrupting():  # a stop wins over a reply
                    return None
                continue
            error = error_of(e, default=ErrorCode.LLM_HTTP_ERROR)
            if error.code is ErrorCode.LLM_CONTEXT_MISSING and m.conversation.context:
                # This worker cannot read the stored conversation: begin it again with
                # the messages in memory (all of them, or the window of a paged run).
                c = m.conversation
                c.context, c.context_from = None, c.paged
                continue
            if error.code is ErrorCode.LLM_BAD_RESPONSE:
                bad_responses_left -= 1
                if bad_responses_left > 0:
                    continue
            timeouts = input.timeouts
            asks = timeouts.llm_ask_after < timeouts.llm_retry_window
            gave_up = e.retry_state is RetryState.TIMEOUT
            if asks and gave_up and workflow.patched(ASK_ON_MODEL_FAILURE.id):
                # Retried past `llm_ask_after` without an answer: a person decides (retry,
                # another profile, a reply) rather than the run failing.
                m.model_failure = error
            return error


async def ask_aside(run: RunScope, messages: list[ChatMessage]) -> LlmResponse | None:
    """The run's model asked beside its turns (a remote agent's question for it to
    answer, `workflows.remote_agents`): `messages` whole, with the run's system prompt
    and tools, its words held back from the turn's stream, its usage the run's. None:
    the call failed, or a stop cut it short; the caller falls back on a person."""
    m, input = run.memory, run.input
    own = m.requests.model or input.model
    request = LlmRequest(
        profile=own,
        system=input.system,
        messages=messages,
        turn=m.conversation.turn,
        tool_definitions=m.catalogue.tools,
        sampling=input.sampling,
        hold_words=True,
        private=input.sensitive,
    )
    queue = m.catalogue.queue_of(own)
    try:
        answer = await _call_model(request, input, queue, lambda: m.requests.stop)
    except ActivityError as e:
        workflow.logger.warning("the model asked aside did not answer: %s", e.cause or e)
        return None
    count_usage(own, answer)
    m.conversation.usage += answer.usage
    return answer


def _cut(memory: RunMemory) -> bool:
    """Whether the model call in flight is to be cancelled: a stop, or a reply that
    interrupts."""
    return memory.requests.stop or memory.interrupting()


def _request_for(memory: RunMemory, input: WorkflowInput, fallback: TurnFallback) -> LlmRequest:
    """Only the messages the stored conversation lacks: history grows by each turn's
    news, not by the whole conversation again (see `ContextRef`)."""
    m, c = memory, memory.conversation
    stored = c.context_from + c.context.count if c.context else c.paged
    own = m.requests.model or input.model
    run_guardrails = guardrails.guardrails_of(m, input)
    request = LlmRequest(
        profile=fallback.profile(own),
        system=input.system,
        context=c.context,
        messages=c.messages_from(stored),
        turn=c.turn + 1,
        tool_definitions=None if c.context else m.catalogue.tools,
        sampling=input.sampling,
        output_schema=input.output_schema if input.mode is Mode.TASK else None,
        hold_words=any(g.on is GuardPoint.OUTPUT for g in run_guardrails),
        fallback_of=fallback.fallback_of(own),
        circuit=not fallback.exhausted,
        private=input.sensitive or any(g.check is GuardCheck.PII for g in run_guardrails),
        pins=pins.sent(m),
    )
    return request


async def _call_model(
    request: LlmRequest, input: WorkflowInput, queue: str | None, stopped: Callable[[], bool]
) -> LlmResponse:
    """The model activity on `queue` (None: the run's own), cancelled as soon as
    `stopped()` (a stop, or an interrupting reply); the cancellation waits for the
    activity to confirm, so its HTTP request is really aborted."""
    timeouts = input.timeouts
    window = timeouts.llm_retry_window
    if workflow.patched(ASK_ON_MODEL_FAILURE.id):
        window = min(window, timeouts.llm_ask_after)
    call = workflow.start_activity(
        LLM_ACTIVITY,
        request,
        result_type=LlmResponse,
        task_queue=queue,
        start_to_close_timeout=timeouts.llm_attempt,
        heartbeat_timeout=timeouts.llm_heartbeat,
        schedule_to_close_timeout=window,
        retry_policy=LLM_RETRY,
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=llm_summary(request.turn, request.profile, request.fallback_of),
    )
    await workflow.wait_condition(lambda: call.done() or stopped())
    call.cancel()  # a no-op when the call is done
    response: LlmResponse = await call
    return response


def error_of(e: ActivityError, *, default: ErrorCode) -> ErrorInfo:
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
