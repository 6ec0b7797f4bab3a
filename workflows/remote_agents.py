"""Remote A2A agents as sub-agents: a call of `agent__NAME`, for an agent whose
`[agents.NAME]` names an `a2a` card, runs as a task of that remote agent.

The lead delegates to it as to a local sub-agent, and the call is as durable as the run:
- Each message is one activity (`A2A_SEND_ACTIVITY`), its id derived from the call and
  the message's count (`LEAD:NAME-N#K`): an activity retried after its worker died, or
  while the remote was out, sends the same id again, never a second message.
- Waiting for the remote is a wait in the workflow, not in a worker: the remote's push
  notification, which the API checks and signals the run with (`A2A_PUSH_SIGNAL`), ends
  it; without one, the run asks the task how it stands every `Timeouts.remote_poll`.
- A remote task that asks (`input-required`) makes the lead wait for a person
  (`waiting_for: "remote"`, its `question`); their next reply to the lead is the answer,
  sent to the remote as the task's next message. An agent whose definition lets the
  lead's model answer (`a2a_answers = "model"`) has it answered by that model instead,
  asked aside with the question as the call's interim result.
- A stop of the lead cancels the remote task.
- One budget: the tokens the remote reports it spent count in the lead's usage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import AgentArguments, ChatMessage, ErrorCode, ToolResult, Usage
from tarry.contracts.a2a import (
    A2A_CANCEL_ACTIVITY,
    A2A_PUSH_SIGNAL,
    A2A_SEND_ACTIVITY,
    A2A_TASK_ACTIVITY,
    RemoteAnswerer,
    RemoteMessage,
    RemoteState,
    RemoteTask,
    RemoteTaskRef,
)
from tarry.core.text import shorten
from workflows import model_calls
from workflows.agents import child_id
from workflows.memory import RunMemory
from workflows.memory_groups import RemoteCall
from workflows.stage import RunScope

_REMOTE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2,
    maximum_interval=timedelta(minutes=5),
)
"""A remote that is out is waited for, not given up on: its activity fails only on an
answer that says the message was refused (non-retryable)."""
_REMOTE_PATIENCE = timedelta(days=1)
"""How long one message or poll keeps trying a remote that is out before the call fails."""
UNDER_WAY = "(under way)"
"""The interim result, for the lead's model asked aside, of its answer's other calls."""


def is_remote(memory: RunMemory, name: str) -> bool:
    """Whether the sub-agent `name` is a remote A2A agent."""
    return memory.agents.specs[name].a2a is not None


async def delegate(run: RunScope, name: str, arguments: str, tool_call_id: str) -> ToolResult:
    """Hands the task `arguments` names to the remote agent `name` and answers with
    its result, once its task has ended (`tool_call_id`: the lead's call of it)."""
    m = run.memory
    try:
        task = AgentArguments.model_validate_json(arguments).task
    except ValidationError as e:
        return ToolResult.failure(ErrorCode.TOOL_INVALID_ARGUMENTS, str(e))
    m.agents.started += 1
    call_id = child_id(workflow.info().workflow_id, name, m.agents.started)
    call = m.agents.remote[call_id] = RemoteCall(agent=name)
    # The call stays in memory once ended, the latest ones only: the run's tree lists
    # them (`RunState.remote_calls`).
    outcome = await _converse(run, Asked(call_id, call, task, tool_call_id))
    m.agents.forget_ended()
    if isinstance(outcome, ToolResult):
        return outcome
    if outcome.tokens:
        m.conversation.usage += Usage(total_tokens=outcome.tokens)  # the tree's one budget
    if outcome.state is not RemoteState.COMPLETED:
        why = f": {outcome.text}" if outcome.text else ""
        return ToolResult.failure(
            ErrorCode.AGENT_FAILED,
            f"remote agent {name} ({call_id}) ended {outcome.state}{why}",
            {"run_id": call_id, "task_id": outcome.task_id},
        )
    return ToolResult.success(outcome.text or "")


@dataclass(frozen=True)
class Asked:
    """A call of a remote agent, as the lead made it."""

    call_id: str
    """Its id in the lead, `LEAD:NAME-N`."""
    call: RemoteCall
    task: str
    tool_call_id: str
    """The lead's model's call of `agent__NAME` it runs."""


async def _converse(run: RunScope, asked: Asked) -> RemoteTask | ToolResult:
    """Sends the task, then each answer to the remote's questions, until its task ends
    (its last state) or the lead is stopped (a failed result, the task cancelled)."""
    call_id, call = asked.call_id, asked.call
    text, sent = asked.task, 0
    while True:
        sent += 1
        answered = await _send(run, call_id, call, text, sent)
        if isinstance(answered, ToolResult):
            return answered
        latest = await _until_it_asks_or_ends(run, call, answered)
        if latest is None:
            return await _cancel(run, call)
        if latest.state.ended:
            return latest
        question = latest.text or "(the remote agent asks for input)"
        answer = await _model_answer(run, asked, question) or await _answer(run, call, question)
        if answer is None:
            return await _cancel(run, call)
        text = answer


async def _send(
    run: RunScope, call_id: str, call: RemoteCall, text: str, sent: int
) -> RemoteTask | ToolResult:
    """Sends one message: the task's state it answers with, or the failed result."""
    spec = run.memory.agents.specs[call.agent]
    assert spec.a2a is not None
    message = RemoteMessage(
        agent=call.agent,
        card=spec.a2a,
        message_id=f"{call_id}#{sent}",
        text=text,
        call=call_id,
        run_id=workflow.info().workflow_id,
        task_id=call.task_id,
        context_id=call.context_id,
    )
    try:
        got: RemoteTask = await workflow.execute_activity(
            A2A_SEND_ACTIVITY,
            message,
            result_type=RemoteTask,
            start_to_close_timeout=run.input.timeouts.tool,
            schedule_to_close_timeout=_REMOTE_PATIENCE,
            retry_policy=_REMOTE_RETRY,
            summary=shorten(f"{call.agent}: {text}", 200),
        )
    except ActivityError as e:
        call.state = RemoteState.FAILED
        return ToolResult.failure(
            ErrorCode.AGENT_FAILED, f"remote agent {call.agent} ({call_id}): {e.cause or e}"
        )
    call.task_id, call.context_id, call.state = got.task_id, got.context_id, got.state
    return got


async def _until_it_asks_or_ends(
    run: RunScope, call: RemoteCall, latest: RemoteTask
) -> RemoteTask | None:
    """Waits, durably, until the remote task asks or ends: a push ends the wait, else
    a poll every `remote_poll`. None: the lead was stopped meanwhile."""
    m = run.memory
    while not (latest.state.asks or latest.state.ended):
        try:
            await workflow.wait_condition(
                lambda: call.news is not None or m.requests.stop,
                timeout=run.input.timeouts.remote_poll,
            )
        except TimeoutError:
            latest = await _task(run, call)
            continue
        if m.requests.stop:
            return None
        news, call.news = call.news, None
        assert news is not None
        if news.state.asks or news.state.ended:
            latest = await _task(run, call)  # the push says what changed; the task says it whole
    return latest


async def _task(run: RunScope, call: RemoteCall) -> RemoteTask:
    """The remote task as it stands."""
    task: RemoteTask = await workflow.execute_activity(
        A2A_TASK_ACTIVITY,
        _ref(run, call),
        result_type=RemoteTask,
        start_to_close_timeout=run.input.timeouts.tool,
        schedule_to_close_timeout=_REMOTE_PATIENCE,
        retry_policy=_REMOTE_RETRY,
        summary=f"{call.agent}: task {call.task_id}",
    )
    call.state = task.state
    return task


async def _model_answer(run: RunScope, asked: Asked, question: str) -> str | None:
    """The lead's model's answer to the remote's question, if the agent's definition
    lets it answer (`a2a_answers = "model"`): the question is the call's interim result
    in the lead's conversation, the other calls of that answer still under way. None:
    a person answers (not allowed, the model failed, or it answered with no text)."""
    m = run.memory
    if m.agents.specs[asked.call.agent].a2a_answers is not RemoteAnswerer.MODEL:
        return None
    kept = m.conversation.messages_from(m.conversation.paged)
    holding = [
        i for i, k in enumerate(kept) if any(c.id == asked.tool_call_id for c in k.tool_calls or [])
    ]
    if not holding:  # the answer that made the call is no longer in memory: a person answers
        return None
    at = holding[-1]
    interim = [
        ChatMessage(role="tool", tool_call_id=c.id, content=UNDER_WAY)
        if c.id != asked.tool_call_id
        else ChatMessage(
            role="tool",
            tool_call_id=c.id,
            content=f"The remote agent {asked.call.agent} asks: {question}\n"
            "Answer it in your next message: its text alone goes to the agent as its answer.",
        )
        for c in kept[at].tool_calls or []
    ]
    answer = await model_calls.ask_aside(run, [*kept[: at + 1], *interim])
    said = (answer.message.content or "").strip() if answer is not None else ""
    return said or None


async def _answer(run: RunScope, call: RemoteCall, question: str) -> str | None:
    """The person's answer to the remote's question: the lead waits for it at a stop
    point (`waiting_for: "remote"`), and takes the first reply after the question. None:
    the lead was stopped meanwhile."""
    m = run.memory
    call.question, call.asked_at = question, m.inbox.received
    run.phases.follow()

    def answered() -> bool:
        return m.requests.stop or m.inbox.first_after(call.asked_at) is not None

    await workflow.wait_condition(answered)
    call.question = None
    if m.requests.stop:
        return None
    reply = m.inbox.first_after(call.asked_at)
    assert reply is not None
    m.inbox.queued.remove(reply)
    run.phases.follow()
    return reply.input.text


async def _cancel(run: RunScope, call: RemoteCall) -> ToolResult:
    """Cancels the remote task of a stopped lead; a remote that cannot be told still
    leaves the lead stopped."""
    if call.task_id is not None:
        try:
            await workflow.execute_activity(
                A2A_CANCEL_ACTIVITY,
                _ref(run, call),
                start_to_close_timeout=run.input.timeouts.tool,
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"{call.agent}: cancel task {call.task_id}",
            )
        except ActivityError as e:
            workflow.logger.warning("remote task %s not cancelled: %s", call.task_id, e)
    call.state = RemoteState.CANCELED
    return ToolResult.failure(
        ErrorCode.AGENT_FAILED, f"remote agent {call.agent}: the run stopped, its task cancelled"
    )


def _ref(run: RunScope, call: RemoteCall) -> RemoteTaskRef:
    spec = run.memory.agents.specs[call.agent]
    assert spec.a2a is not None
    assert call.task_id is not None
    return RemoteTaskRef(agent=call.agent, card=spec.a2a, task_id=call.task_id)


def take_push(memory: RunMemory, news: RemoteTask) -> None:
    """The `a2a_push` signal: news of a remote call's task, for its wait to act on; news
    of a call that has ended, or of another task, changes nothing."""
    call = memory.agents.remote.get(news.call or "")
    if call is None or call.ended() or call.task_id not in (None, news.task_id):
        workflow.logger.info("push for a remote call not under way: ignored")
        return
    call.news = news


def install(run: RunScope) -> None:
    """Registers the `a2a_push` signal: a remote agent's task changed, says its push
    (checked by the API), for the call's wait to act on."""

    def a2a_push(news: RemoteTask) -> None:
        take_push(run.memory, news)

    workflow.set_signal_handler(A2A_PUSH_SIGNAL, a2a_push)
