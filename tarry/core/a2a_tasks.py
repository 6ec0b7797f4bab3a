"""What Tarry reads of a remote A2A agent's task (`RemoteTask`), from the a2a-sdk's
types: a task the remote answers with (`activities.a2a_remote`), or the news its push
notification carries (`tarry.api.a2a_push`). It needs the `a2a` extra, which the API's
brings, and which a worker loads only when its config names a remote agent."""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import Message, StreamResponse, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from tarry.contracts.a2a import RemoteState, RemoteTask

__all__ = ["news_of", "remote_task"]


def remote_task(task: Task) -> RemoteTask:
    """A task as it stands: its state; its status message's text, or once completed its
    artifacts'; the tokens it reports (`metadata.usage.total_tokens`)."""
    state = _state(task.status)
    said = _text(task.status.message)
    if state is RemoteState.COMPLETED and task.artifacts:
        said = "\n".join("".join(p.text for p in artifact.parts) for artifact in task.artifacts)
    usage = MessageToDict(task.metadata).get("usage", {})
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    return RemoteTask(
        task_id=task.id,
        context_id=task.context_id or None,
        state=state,
        text=said or None,
        tokens=int(tokens) if isinstance(tokens, int | float) else None,
    )


def news_of(body: dict[str, Any]) -> RemoteTask | None:
    """The task's news a push notification's body (a `StreamResponse` as JSON) carries:
    its task, or its new status; None for news of no state (an artifact, a message).
    Raises `ValueError` for a body that is no `StreamResponse`."""
    try:
        response = ParseDict(body, StreamResponse(), ignore_unknown_fields=True)
    except ParseError as e:
        raise ValueError(f"not an A2A StreamResponse: {e}") from e
    if response.HasField("task"):
        return remote_task(response.task)
    if response.HasField("status_update"):
        update = response.status_update
        return RemoteTask(
            task_id=update.task_id,
            context_id=update.context_id or None,
            state=_state(update.status),
            text=_text(update.status.message) or None,
        )
    return None


def _state(status: TaskStatus) -> RemoteState:
    return RemoteState(TaskState.Name(status.state).removeprefix("TASK_STATE_").lower())


def _text(message: Message) -> str:
    return "".join(part.text for part in message.parts)
