"""Remote A2A agents as sub-agents: what a run's remote calls carry across the worker's
activities (`activities.a2a_remote`) and the API's push route (`tarry.api.a2a_push`).

An agent whose `[agents.NAME]` names an `a2a` card URL runs as a task of that remote
agent, not as a child run (`workflows.remote_agents`). Nothing here holds a secret: the
remote's credentials stay in the worker's config, and the push token is derived by the
worker and the API from their action key, never written to history.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none

__all__ = [
    "A2A_CANCEL_ACTIVITY",
    "A2A_PUSH_SIGNAL",
    "A2A_SEND_ACTIVITY",
    "A2A_TASK_ACTIVITY",
    "RemoteAnswerer",
    "RemoteCallInfo",
    "RemoteMessage",
    "RemoteState",
    "RemoteTask",
    "RemoteTaskRef",
]

A2A_SEND_ACTIVITY = "a2a_send"
"""Sends one message to a remote agent (`RemoteMessage`), answering its task."""
A2A_TASK_ACTIVITY = "a2a_task"
"""Gets a remote task as it stands (`RemoteTaskRef`): the polling fallback."""
A2A_CANCEL_ACTIVITY = "a2a_cancel"
"""Cancels a remote task (`RemoteTaskRef`): the lead was stopped."""
A2A_PUSH_SIGNAL = "a2a_push"
"""The signal the API's push route sends a run with a remote task's news (`RemoteTask`)."""


class RemoteState(StrEnum):
    """A remote task's state, as A2A names it (without its `TASK_STATE_` prefix)."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    AUTH_REQUIRED = "auth_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"

    @property
    def ended(self) -> bool:
        return self in _ENDED

    @property
    def asks(self) -> bool:
        """The remote waits for an answer from its caller."""
        return self in (RemoteState.INPUT_REQUIRED, RemoteState.AUTH_REQUIRED)


_ENDED = frozenset(
    {RemoteState.COMPLETED, RemoteState.FAILED, RemoteState.CANCELED, RemoteState.REJECTED}
)


class RemoteAnswerer(StrEnum):
    """Who answers a remote agent's question (`[agents.NAME] a2a_answers`)."""

    PERSON = "person"
    """The lead waits for a person's reply (`waiting_for: "remote"`)."""
    MODEL = "model"
    """The lead's model answers at once, from the lead's conversation; a person only if
    it answers with no text."""


class RemoteTaskRef(BaseModel):
    """A remote agent's task: whom to ask (the agent's name, which the worker's config
    maps to its card and credentials) and which task."""

    agent: str
    card: str
    """The agent card's URL (`AgentSpec.a2a`), as the run resolved it at its start."""
    task_id: str


class RemoteMessage(BaseModel):
    """One message to a remote agent: a task's first, or an answer to its question."""

    agent: str
    card: str
    message_id: str
    """Derived from the run, the call and the message's count: an activity retried after
    its worker died sends the same id, which the remote may use to drop the second."""
    text: str
    call: str
    """The remote call's id in the run (`LEAD:NAME-N`): the push route's address."""
    run_id: str
    task_id: str | None = Field(default=None, exclude_if=when_none)
    """The task the message answers; null: the first message, which starts one."""
    context_id: str | None = Field(default=None, exclude_if=when_none)


class RemoteTask(BaseModel):
    """A remote task as it stands: the send's answer, a poll's, or a push's."""

    task_id: str
    context_id: str | None = None
    state: RemoteState
    text: str | None = None
    """Its status message's text (its question, or why it failed), else, once completed,
    its artifacts' text: what the lead reads."""
    tokens: int | None = Field(default=None, exclude_if=when_none)
    """The tokens the remote reports it spent (its `usage` metadata), where it says."""
    call: str | None = Field(default=None, exclude_if=when_none)
    """With a push: the remote call it is news of (`RemoteMessage.call`)."""


class RemoteCallInfo(BaseModel):
    """A call of a remote agent, as the lead's state lists it in its tree (`RunState.
    remote_calls`): no run of this deployment's to link to, so its agent, its remote task
    and how that task stands."""

    call: str
    """The call's id in the lead, `LEAD:NAME-N`."""
    agent: str
    task_id: str | None = None
    """The remote task's id; null until the remote took the call's first message."""
    state: RemoteState | None = None
    """How its task last stood, as the lead heard; null until the remote took it."""

    def line(self) -> str:
        """One line of it: `researcher LEAD:researcher-1 task T input_required`."""
        return f"{self.agent} {self.call} task {self.task_id or '-'} {self.state or 'sending'}"
