"""The `a2a_task_push` activity: tells the push configs A2A clients set on a run's task
of its stop point (`workflows.notifications` schedules it, as it does `notify`).

Each config's URL gets a POST of the task's status update as A2A's push notifications
carry it (a `StreamResponse` with a `statusUpdate`, the a2a-sdk's
`BasePushNotificationSender`'s shape), with the config's token in
`X-A2A-Notification-Token`. It is signed as a `[[notify]]` entry's notification is
(`activities.notifications`): `Tarry-Signature` is the HMAC of the body under the
token, and `Tarry-Event-Id` names the stop point, the same on every retry.

The body is written here as JSON rather than with the a2a-sdk's types: a worker loads
that extra only when its config names a remote agent, and this activity is every
worker's. The token is sealed in the run's history; it is opened here, with the action
key the API sealed it under (`tarry.core.a2a_push`). Retries and heartbeats are the
notifications': a config that took the push is not sent it again.

Anyone who may read a task may set a URL, so a worker posts only to public addresses
(`activities.public_http`, given as `http` by `workers.plugin`) unless its deployment
allows private ones (`TARRY_A2A_PUSH_PRIVATE`): a config whose host resolves to another
is refused, not tried again, and its push for that stop point dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx
from cryptography.fernet import InvalidToken
from pydantic import SecretStr
from temporalio import activity

from activities.notifications import (
    EVENT_ID_HEADER,
    REQUEST_TIMEOUT,
    SIGNATURE_HEADER,
    Refused,
    check_answer,
    failure_of,
    heartbeating,
    signature,
)
from activities.public_http import PrivateAddress
from tarry.contracts.a2a_configs import A2A_TASK_PUSH_ACTIVITY, PushConfig, TaskPush
from tarry.core.a2a_push import PUSH_TOKEN_HEADER, open_token

__all__ = ["TaskPusher", "push_body"]


def push_body(push: TaskPush) -> dict[str, Any]:
    """The push's JSON: a `StreamResponse` whose `statusUpdate` is the task's new status,
    its message what the run says of it."""
    message = {
        "messageId": push.id,
        "contextId": push.run_id,
        "taskId": push.run_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": push.text}],
    }
    status = {"state": push.state, "message": message}
    update = {"taskId": push.run_id, "contextId": push.run_id, "status": status}
    return {"statusUpdate": update}


class TaskPusher:
    """Posts the pushes, opening their tokens with the deployment's action key."""

    def __init__(self, action_key: SecretStr | None, http: httpx.AsyncClient) -> None:
        self._key = action_key
        self._http = http

    @activity.defn(name=A2A_TASK_PUSH_ACTIVITY)
    async def push_task(self, push: TaskPush) -> None:
        """Posts `push` to every config that has not taken it yet."""
        details = activity.info().heartbeat_details
        taken: set[str] = set(details[0]) if details else set()
        body = json.dumps(push_body(push)).encode()

        async def deliver(config: PushConfig) -> None:
            await self._post(push, config, body)
            taken.add(_key(config))

        waiting = [c for c in push.configs if _key(c) not in taken]
        async with heartbeating(taken):
            outcomes = await asyncio.gather(*map(deliver, waiting), return_exceptions=True)
        if failure := failure_of(outcomes):
            raise failure

    async def _post(self, push: TaskPush, config: PushConfig, body: bytes) -> None:
        headers = {"Content-Type": "application/json", EVENT_ID_HEADER: push.id}
        if config.sealed_token is not None:
            token = self._open(config)
            headers[PUSH_TOKEN_HEADER] = token
            headers[SIGNATURE_HEADER] = signature(token, body, int(time.time()))
        # The URL is not named in errors: it is the client's, and may hold a secret.
        where = f"push config {config.id!r} of {config.owner}"
        try:
            response = await self._http.post(
                config.url, content=body, headers=headers, timeout=REQUEST_TIMEOUT
            )
        except httpx.HTTPError as e:
            raise httpx.HTTPError(f"{where} did not answer: {type(e).__name__}") from None
        except PrivateAddress as e:
            activity.logger.warning("%s is not pushed to: %s", where, e)
            raise Refused(
                f"{where} is not pushed to: {e}; a deployment whose receivers are on its"
                " own network sets TARRY_A2A_PUSH_PRIVATE=1 for its workers"
            ) from None
        check_answer(response.status_code, where)

    def _open(self, config: PushConfig) -> str:
        """The config's token; `Refused` (not tried again) when this worker cannot open it."""
        assert config.sealed_token is not None
        if self._key is not None:
            with contextlib.suppress(InvalidToken):
                return open_token(self._key, config.sealed_token)
        raise Refused(
            f"push config {config.id!r}: its token was sealed under an action key this"
            " worker does not have; give the workers the API's TARRY_ACTION_KEY"
        )


def _key(config: PushConfig) -> str:
    """How an attempt's heartbeat names a config that took the push."""
    return f"{config.owner}/{config.id}"
