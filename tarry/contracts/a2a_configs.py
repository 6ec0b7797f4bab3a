"""Push notifications of Tarry's own A2A tasks: the configs a client sets on a task (a
run), which the run keeps in its memory, and the push the run sends at each of its stop
points (`workflows.notifications`, `activities.a2a_pushes`).

A config is the run's, not the API's: it is recorded in the run's history by the update
that sets it, so it outlasts any API process, and it ends with the run. The client's
token never enters history as it was given: the API seals it under the deployment's
action key (`tarry.core.a2a_push`), and only the activity that sends the push opens it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none

__all__ = [
    "A2A_TASK_PUSH_ACTIVITY",
    "DELETE_PUSH_CONFIG_UPDATE",
    "MAX_PUSH_CONFIGS",
    "PUSH_CONFIGS_QUERY",
    "SET_PUSH_CONFIG_UPDATE",
    "PushConfig",
    "PushConfigRef",
    "TaskPush",
]

A2A_TASK_PUSH_ACTIVITY = "a2a_task_push"
SET_PUSH_CONFIG_UPDATE = "set_push_config"
"""The run's update that keeps a push config (`workflows.a2a_configs`)."""
DELETE_PUSH_CONFIG_UPDATE = "delete_push_config"
"""The run's update that drops one of its owner's push configs."""
PUSH_CONFIGS_QUERY = "push_configs"
"""The run's query of its push configs, their tokens sealed."""
"""Posts a run's task status to the URL of each push config it has (`TaskPush`)."""
MAX_PUSH_CONFIGS = 10
"""The most push configs one run keeps: each stop point posts to every one."""


class PushConfig(BaseModel):
    """Where to push a task's news, set by `owner`, who alone reads and deletes it."""

    id: str = Field(max_length=200)
    url: str = Field(max_length=2000)
    owner: str
    sealed_token: str | None = Field(default=None, exclude_if=when_none)
    """The client's token (`X-A2A-Notification-Token`), sealed under the action key;
    None: the client gave none, and the push is neither tokened nor signed."""


class PushConfigRef(BaseModel):
    """One config of a run, as its owner names it to delete it."""

    id: str
    owner: str


class TaskPush(BaseModel):
    """A task's status at one of its run's stop points, to post to each of `configs`."""

    id: str
    """The stop point (`RUN/N`), the same on every retry: `Tarry-Event-Id`."""
    run_id: str
    state: str
    """The A2A task state, as the protocol's JSON names it (`TASK_STATE_COMPLETED`)."""
    text: str
    """What the run says of it: its question, the calls it waits on, how it ended."""
    configs: list[PushConfig]
