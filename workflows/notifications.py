"""Notifications: a run tells the receivers of the worker's `[[notify]]` entries of its
stop points (waiting for input, an approval or its budget; ended), one `notify`
activity per stop point, retried with backoff while a receiver is down. The push configs
A2A clients set on the run's task (`RunMemory.push_configs`) are told alike, one
`a2a_task_push` activity per stop point.

The workflow cannot read the configuration: it learns with its tool catalogue, at its
start, which events some entry wants (`learn`), and schedules an activity only for those,
so a run on a worker with no `[[notify]]` adds nothing to its history. The activity
(`activities.notifications`) holds the receivers' URLs and secrets and the key that signs the
action links; the workflow sends what the run knows and an id for the event.

Hazard: the server drops the activities of a closed run, and a run closes when it
continues as new as much as when it ends. A notification still retrying then would be
lost. So a run waits for its notifications before it hands over (`sending` keeps the
hand-over from being due) and before it returns (`delivered`). Handing them over in the
memory instead would send each again from the next run without knowing whether an attempt
had arrived; waiting only delays a hand-over, which its threshold tolerates, and a
notification is given up after `RETRY_WINDOW`, so no receiver holds a run open for good.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import (
    NOTIFY_ACTIVITY,
    Catalogue,
    Notification,
    NotifyEvent,
    PendingApproval,
    Phase,
    WaitingFor,
)
from tarry.contracts.a2a_configs import A2A_TASK_PUSH_ACTIVITY, TaskPush
from tarry.contracts.compatibility import NOTIFICATIONS
from tarry.contracts.guardrails import held_line
from tarry.contracts.previews import Preview
from tarry.contracts.waits import wait_kind
from tarry.core.ownership import RunAccess
from workflows import waits
from workflows.memory import RunMemory

ATTEMPT = timedelta(seconds=30)
"""One attempt: a POST to each receiver that has not taken the notification yet."""
HEARTBEAT = timedelta(seconds=5)
"""How soon an attempt whose worker died is noticed and tried again on another."""
RETRY_WINDOW = timedelta(days=1)
"""How long a notification is retried before it is given up (and logged)."""
_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
)
SUMMARY_CHARS = 500


def learn(memory: RunMemory, catalogue: Catalogue) -> None:
    """Keeps the events the worker's `[[notify]]` entries want, from the run's catalogue."""
    if catalogue.notify_events and workflow.patched(NOTIFICATIONS.id):
        memory.catalogue.notify_events = list(catalogue.notify_events)


def event_of(memory: RunMemory) -> NotifyEvent | None:
    """The event a stop point is; None for one no receiver hears of (its kind of wait
    has none: `tarry.contracts.waits`)."""
    if memory.phase.ended:
        return NotifyEvent.ENDED
    waiting = waits.recorded(memory)
    return None if waiting is None else wait_kind(waiting).notify


def task_state(memory: RunMemory) -> str | None:
    """The A2A task state a stop point is, as `tarry.api.a2a_tasks` answers a task: failed,
    canceled (a person stopped it), completed; auth-required, input-required. None for a
    run queued behind its owner's other runs: its task still works."""
    if memory.phase is Phase.FAILED:
        return "TASK_STATE_FAILED"
    if memory.phase.ended:
        requests = memory.requests
        stopped = requests.stopped_by is not None or requests.stop_reason is not None
        return "TASK_STATE_CANCELED" if stopped else "TASK_STATE_COMPLETED"
    waiting = waits.recorded(memory)
    if waiting is WaitingFor.SLOT:
        return None
    if waiting is WaitingFor.AUTH:
        return "TASK_STATE_AUTH_REQUIRED"
    return "TASK_STATE_INPUT_REQUIRED"


def summary_of(memory: RunMemory, event: NotifyEvent) -> str:
    """A short paragraph for a person: what the run wants of them, or how it ended."""
    if event is NotifyEvent.WAITING_FOR_APPROVAL:
        # What each call would do, in a line (its preview's summary); the run's link shows it
        # whole. A text a guardrail holds is named by its guardrail, never quoted here.
        undecided = memory.undecided()
        held = [held_line(p.tool, p.guardrail) for p in undecided if p.guardrail]
        calls = "; ".join(
            f"{p.tool}: {p.preview.summary}" if p.preview else f"{p.tool} {p.arguments}"
            for p in undecided
            if p.guardrail is None
        )
        text = f"Wants to run {calls}"
        if held:
            text = "; ".join([*held, text] if calls else held)
    elif event is NotifyEvent.WAITING_FOR_BUDGET:
        usage = memory.conversation.usage
        text = (
            f"Spent its budget ({usage.total_tokens} tokens, ${usage.cost_usd:.2f});"
            " raise it to go on."
        )
    elif event is NotifyEvent.WAITING_FOR_AUTH:
        who = "; ".join(
            f"{n.person or 'someone'} to connect {n.server}" for n in memory.auth_needed
        )
        text = f"Waits for {who}."
    elif event is NotifyEvent.ENDED:
        text = _how_it_ended(memory)
    else:
        text = memory.conversation.last_assistant_text or "Waits for a reply."
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _how_it_ended(memory: RunMemory) -> str:
    """A stopped run says who stopped it and why (its phase, `Completed`, would read as
    work done); any other, its phase and its error, result or last words."""
    stopped_by, reason = memory.requests.stopped_by, memory.requests.stop_reason
    if memory.requests.stop and stopped_by is not None:
        return f"Stopped by {stopped_by}" + (f": {reason}" if reason else "")
    said = memory.error.message if memory.error else memory.conversation.output
    return f"{memory.phase}: {said or memory.conversation.last_assistant_text or ''}".rstrip(": ")


def _short(pending: PendingApproval) -> PendingApproval:
    """A call as a notification carries it: its preview's summary, not its blocks (a diff
    may be long, and the run's link shows it whole), nor the files the preview read."""
    if pending.preview is None:
        return pending
    return pending.model_copy(update={"preview": Preview(summary=pending.preview.summary)})


class Outbox:
    """The run's notifications on their way: one per stop point a receiver wants."""

    def __init__(self) -> None:
        self._sending: set[asyncio.Task[None]] = set()

    @property
    def sending(self) -> bool:
        """Some notification is not delivered yet (nor given up)."""
        return bool(self._sending)

    def stop_point(self, memory: RunMemory) -> None:
        """Schedules what the stop point the run just reached tells: its notification,
        if some receiver wants it, and its A2A task's push, if a client set a config."""
        self._notify(memory)
        self._push(memory)

    def _notify(self, memory: RunMemory) -> None:
        event = event_of(memory)
        if event is None or event not in memory.catalogue.notify_events:
            return
        info = workflow.info()
        run_id = info.workflow_id
        access = RunAccess.of(info.typed_search_attributes)
        notification = Notification(
            # The stop point's number is unique along the whole chain (handed over, resumed).
            id=f"{run_id}/{memory.stops}",
            event=event,
            run_id=run_id,
            phase=memory.phase,
            waiting_for=waits.recorded(memory),
            pending_approvals=[_short(p) for p in memory.undecided()],
            auth_needed=memory.auth_needed,
            summary=summary_of(memory, event),
            owner=access.owner,
            readers=sorted(access.readers),
            writers=sorted(access.writers),
        )
        self._start(NOTIFY_ACTIVITY, notification, notification.id, f"notify: {event}")

    def _push(self, memory: RunMemory) -> None:
        """The run's task status to each push config's URL (`activities.a2a_pushes`): a
        run no client set one on records nothing of pushes in its history."""
        if not memory.push_configs or (state := task_state(memory)) is None:
            return
        run_id = workflow.info().workflow_id
        push = TaskPush(
            id=f"{run_id}/{memory.stops}",
            run_id=run_id,
            state=state,
            text=summary_of(memory, event_of(memory) or NotifyEvent.WAITING_FOR_INPUT),
            configs=list(memory.push_configs),
        )
        self._start(A2A_TASK_PUSH_ACTIVITY, push, push.id, f"a2a push: {state}")

    def _start(self, activity: str, arg: Notification | TaskPush, id: str, summary: str) -> None:
        task = asyncio.create_task(self._send(activity, arg, id, summary))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def delivered(self) -> None:
        """Returns once every notification is delivered or given up."""
        if self._sending:
            await workflow.wait_condition(lambda: not self._sending)

    async def _send(
        self, activity: str, arg: Notification | TaskPush, id: str, summary: str
    ) -> None:
        try:
            await workflow.execute_activity(
                activity,
                arg,
                start_to_close_timeout=ATTEMPT,
                heartbeat_timeout=HEARTBEAT,
                schedule_to_close_timeout=RETRY_WINDOW,
                retry_policy=_RETRY,
                summary=summary,
            )
        except ActivityError as e:  # a notification never fails the run it is about
            workflow.logger.warning("notification %s given up: %s", id, e.cause or e)
