"""The activities of remote A2A agents' calls (`workflows.remote_agents`): send a message,
get a task, cancel it, each with the a2a-sdk's client over HTTP.

A send is idempotent by its message id: the call's messages carry a context id derived
from the call, so an attempt after the first looks for the message in that context's
tasks before it sends, and a message that got there is not sent twice. Each request
carries the agent's headers from the worker's config (`[agents.NAME] a2a_headers`); the
first message of a call asks the remote to push its task's news to the API, with a token
only the API and the workers can make (`tarry.core.a2a_push`).

A remote that cannot be reached, or answers an HTTP error, fails the attempt, which
Temporal retries; a remote that refuses the request (an A2A error) fails it for good.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, A2AClientError, Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from pydantic import SecretStr
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import traces
from tarry.contracts import ErrorCode
from tarry.contracts.a2a import (
    A2A_CANCEL_ACTIVITY,
    A2A_SEND_ACTIVITY,
    A2A_TASK_ACTIVITY,
    RemoteMessage,
    RemoteState,
    RemoteTask,
    RemoteTaskRef,
)
from tarry.core.a2a_push import push_path, push_token
from tarry.core.a2a_tasks import remote_task

__all__ = ["RemoteAgents"]

_T = TypeVar("_T")

REQUEST_TIMEOUT = 30.0
"""Seconds a remote agent has to answer one request."""


class RemoteAgents:
    """The clients of the remote agents of the worker's config: their headers, and where
    their pushes go (the API's public URL, with the action key's tokens; no key: no
    pushes, and the calls poll)."""

    def __init__(
        self, headers: Mapping[str, Mapping[str, str]], public_url: str, key: SecretStr | None
    ) -> None:
        self._headers = headers
        self._public_url = public_url
        self._key = key
        self._clients: dict[tuple[str, str], Client] = {}

    def activities(self) -> list[Callable[..., Awaitable[object]]]:
        return [self.send, self.task, self.cancel]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    @activity.defn(name=A2A_SEND_ACTIVITY)
    async def send(self, message: RemoteMessage) -> RemoteTask:
        """Sends `message` once, answering with its task as it stands."""

        client = await self._client(message.agent, message.card)
        context_id = message.context_id or message.call
        with traces.remote_call(message.agent, "send", message.task_id, message.message_id) as span:
            task = await self._sent(client, message, context_id)
            traces.remote_task_named(span, task.task_id)
        return task

    async def _sent(self, client: Client, message: RemoteMessage, context_id: str) -> RemoteTask:
        """`message` sent, unless an earlier attempt's got there: its task as it stands."""
        if activity.info().attempt > 1:
            listed = await _refused_for_good(
                client.list_tasks(ListTasksRequest(context_id=context_id, history_length=50))
            )
            for task in listed.tasks:
                if any(m.message_id == message.message_id for m in task.history):
                    return remote_task(task)  # it got there: not sent twice
        configuration = SendMessageConfiguration(return_immediately=True)
        if message.task_id is None and self._key is not None:
            push = TaskPushNotificationConfig(
                url=self._public_url + push_path(message.run_id, message.call),
                token=push_token(self._key, message.run_id, message.call),
            )
            configuration.task_push_notification_config.CopyFrom(push)
        request = SendMessageRequest(
            message=Message(
                message_id=message.message_id,
                role=Role.ROLE_USER,
                parts=[Part(text=message.text)],
                task_id=message.task_id or "",
                context_id=context_id,
            ),
            configuration=configuration,
        )
        answers = [answer async for answer in _streamed_for_good(client, request)]
        last = answers[-1] if answers else None
        if last is not None and last.HasField("task"):
            return remote_task(last.task)
        if last is not None and last.HasField("message"):  # answered at once, with no task
            said = "".join(part.text for part in last.message.parts)
            return RemoteTask(
                task_id=last.message.task_id or message.message_id,
                context_id=last.message.context_id or context_id,
                state=RemoteState.COMPLETED,
                text=said,
            )
        raise ApplicationError(
            f"remote agent {message.agent} answered the message with no task",
            type=ErrorCode.AGENT_FAILED,
            non_retryable=True,
        )

    @activity.defn(name=A2A_TASK_ACTIVITY)
    async def task(self, ref: RemoteTaskRef) -> RemoteTask:
        """The remote task as it stands."""

        client = await self._client(ref.agent, ref.card)
        with traces.remote_call(ref.agent, "get", ref.task_id):
            task = await _refused_for_good(client.get_task(GetTaskRequest(id=ref.task_id)))
        return remote_task(task)

    @activity.defn(name=A2A_CANCEL_ACTIVITY)
    async def cancel(self, ref: RemoteTaskRef) -> None:
        """Cancels the remote task (the lead was stopped)."""

        client = await self._client(ref.agent, ref.card)
        with traces.remote_call(ref.agent, "cancel", ref.task_id):
            await _refused_for_good(client.cancel_task(CancelTaskRequest(id=ref.task_id)))

    async def _client(self, agent: str, card_url: str) -> Client:
        """The agent's client, made once from its card, with its headers."""

        key = (agent, card_url)
        if key not in self._clients:
            headers = dict(self._headers.get(agent, {}))
            http = httpx.AsyncClient(headers=headers, timeout=REQUEST_TIMEOUT)
            parts = urlsplit(card_url)
            resolver = A2ACardResolver(http, f"{parts.scheme}://{parts.netloc}")
            card = await resolver.get_agent_card(relative_card_path=parts.path)
            config = ClientConfig(streaming=False, httpx_client=http)
            self._clients[key] = ClientFactory(config).create(card)
        return self._clients[key]


async def _refused_for_good(call: Awaitable[_T]) -> _T:
    """`call`'s answer; an A2A error (the remote refused the request) fails the activity
    for good, anything else (unreachable, an HTTP error) only this attempt."""
    try:
        return await call
    except Exception as e:
        if (refusal := _refusal(e)) is not None:
            raise refusal from e
        raise


async def _streamed_for_good(
    client: Client, request: SendMessageRequest
) -> AsyncIterator[StreamResponse]:
    """The answers to a send, as `_refused_for_good` fails it."""
    try:
        async for answer in client.send_message(request):
            yield answer
    except Exception as e:
        if (refusal := _refusal(e)) is not None:
            raise refusal from e
        raise


def _refusal(e: Exception) -> ApplicationError | None:
    """The activity's failure for good, for an error that says the remote refused."""

    if isinstance(e, A2AError) and not isinstance(e, A2AClientError):
        return ApplicationError(
            f"the remote agent refused the request: {e}",
            type=ErrorCode.AGENT_FAILED,
            non_retryable=True,
        )
    return None
