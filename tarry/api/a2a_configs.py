"""The push-notification configs of Tarry's A2A tasks, as the a2a-sdk's request handler
sets, gets, lists and deletes them (`tarry.api.a2a.RunsAsTasks`).

A config is kept by the task's run (`RunHandle.set_push_config`), not by this process:
it lasts as long as the run, whatever restarts the API, and the run pushes to it at its
stop points (`workflows.notifications`). Each config is its owner's, the person who set
it: another reader of the task neither sees nor deletes it, as the SDK's own stores scope
configs by their owner. A token is sealed under the action key before the run records it
and never given back: a config reads back without it.

A URL at a private address is refused here, unless the deployment allows them
(`TARRY_A2A_PUSH_PRIVATE`), for a clear answer at once: only a literal address or
`localhost`, without a lookup. The worker's check, at each push, is the one that holds
(`activities.public_http`): a name may resolve anywhere, then or later."""

from __future__ import annotations

from urllib.parse import urlsplit

from a2a.types import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
)
from pydantic import SecretStr

from tarry.client.run_handle import RunHandle
from tarry.contracts.a2a_configs import PushConfig
from tarry.core.a2a_push import seal_token
from tarry.core.addresses import is_public

__all__ = ["config_of", "find_config", "shown", "stored"]


def stored(
    params: TaskPushNotificationConfig,
    owner: str,
    key: SecretStr | None,
    *,
    private: bool = False,
) -> PushConfig:
    """The config the run keeps for `params`, set by `owner`: its id the task's when it
    names none (the SDK's default), its token sealed under `key`; its URL at a public
    address unless `private` (the deployment allows private ones)."""
    if urlsplit(params.url).scheme not in ("http", "https") or not urlsplit(params.url).netloc:
        raise InvalidParamsError(message=f"url: an http or https URL, not {params.url!r}")
    if not private and (host := _private_host(params.url)):
        raise InvalidParamsError(
            message=f"url: {host} is not a public address, and the workers post only to"
            " public ones; a deployment whose receivers are on its own network sets"
            " TARRY_A2A_PUSH_PRIVATE=1"
        )
    if params.HasField("authentication"):
        raise InvalidParamsError(
            message="authentication: not taken; give a token, which every push carries"
            " in X-A2A-Notification-Token and signs (Tarry-Signature)"
        )
    sealed = None
    if params.token:
        if key is None:
            raise PushNotificationNotSupportedError(
                message="a push config's token is sealed under the action key, and this"
                " deployment has none: set TARRY_ACTION_KEY for the API and the workers"
            )
        sealed = seal_token(key, params.token)
    return PushConfig(
        id=params.id or params.task_id,
        url=params.url,
        owner=owner,
        sealed_token=sealed,
    )


def _private_host(url: str) -> str | None:
    """The URL's host when it is `localhost` or a literal address that is not global."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return host
    try:
        return None if is_public(host) else host
    except ValueError:  # a name: the worker resolves it
        return None


def shown(task_id: str, config: PushConfig) -> TaskPushNotificationConfig:
    """A config as its owner reads it back: without its token."""
    return TaskPushNotificationConfig(task_id=task_id, id=config.id, url=config.url)


async def config_of(run: RunHandle, owner: str) -> list[PushConfig]:
    """`owner`'s configs of the run."""
    return [c for c in await run.push_configs() if c.owner == owner]


async def find_config(run: RunHandle, owner: str, id: str) -> PushConfig:
    """`owner`'s config `id` of the run; "task not found" for none, as the SDK answers."""
    for config in await config_of(run, owner):
        if config.id == id:
            return config
    raise TaskNotFoundError(message=f"task {run.id!r} has no push config {id!r} of yours")
