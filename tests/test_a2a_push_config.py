"""Push notifications of Tarry's own A2A tasks: the `a2a-sdk`'s client sets, reads, lists
and deletes a task's push config over real HTTP to `tarry serve`'s app; the run keeps
the config (an API restart keeps it) and, at its stop points, posts the task's status to
a small receiver on a free port, with the config's token, signed under it. Another
user's task is "task not found" here as at every method.

The receiver is on loopback, where a deployment's workers do not push unless it lets
them (`TARRY_A2A_PUSH_PRIVATE`): the tests' deployment does, but for the tests of that
guard itself."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client
from a2a.helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    InvalidParamsError,
    ListTaskPushNotificationConfigsRequest,
    StreamResponse,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
)
from aiohttp import web
from google.protobuf.json_format import ParseDict
from pydantic import SecretStr

from tarry.api.a2a_configs import stored
from tarry.contracts import Act, Door
from tarry.contracts.a2a_configs import MAX_PUSH_CONFIGS
from tarry.core.addresses import is_public
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Api
from tests.local_http import serving_app
from tests.test_a2a_server import a2a_as, last_state, streamed, text_message
from tests.test_owners import ALICE, BOB, CONFIG, people_api

ACTION_KEY = "a2a-push-config-test-action-key-0123456789"
TOKEN = "alices-push-token-6f1c2e"


@dataclass
class Push:
    """One POST the receiver took: its headers and its body as it arrived."""

    headers: dict[str, str]
    body: bytes

    @property
    def update(self) -> StreamResponse:
        """The body as the SDK reads a push: a `StreamResponse`."""
        return ParseDict(json.loads(self.body), StreamResponse())


@dataclass
class Receiver:
    """A push receiver on a free port of 127.0.0.1 (its `url`), taking every POST."""

    pushes: list[Push] = field(default_factory=list)
    url: str = ""
    down: int = 0
    """How many POSTs to answer 503 first, as a receiver that is down."""

    async def take(self, request: web.Request) -> web.Response:
        self.pushes.append(Push(dict(request.headers), await request.read()))
        if self.down:
            self.down -= 1
            return web.Response(status=503)
        return web.Response(status=204)

    async def until(self, count: int) -> list[Push]:
        async with asyncio.timeout(TIMEOUT):
            while len(self.pushes) < count:
                await asyncio.sleep(0.05)
        return self.pushes


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    made = Receiver()
    app = web.Application()
    app.router.add_post("/pushes", made.take)
    async with serving_app(app) as url:
        made.url = f"{url}/pushes"
        yield made


async def pushing_agent(
    agent_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, private: bool
) -> Agent:
    """An agent whose worker opens push tokens with the action key the API seals them
    under, and the API's people (alice, bob, ...) and key for `people_api`; its worker
    and API let push configs name private addresses if `private`."""
    made: Agent = await agent_factory(
        worker_settings={
            "tarry_action_key": SecretStr(ACTION_KEY),
            "tarry_a2a_push_private": private,
        }
    )
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_ACTION_KEY", ACTION_KEY)
    monkeypatch.setenv("TARRY_A2A_PUSH_PRIVATE", "1" if private else "0")
    return made


@pytest.fixture
async def pushing(agent_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Agent:
    """A deployment that pushes to receivers on its own network, as the tests' is."""
    return await pushing_agent(agent_factory, tmp_path, monkeypatch, private=True)


@pytest.fixture
async def api(pushing: Agent) -> AsyncIterator[Api]:
    async with people_api(pushing) as served:
        yield served


@pytest.fixture
async def guarded_api(
    agent_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Api]:
    """The API of a deployment that pushes only to public addresses, as by default."""
    agent = await pushing_agent(agent_factory, tmp_path, monkeypatch, private=False)
    async with people_api(agent) as served:
        yield served


def loopback_name() -> str:
    """A host name (not `localhost`) that resolves to loopback: the machine's own, which
    /etc/hosts names."""
    name = socket.gethostname()
    found = {str(info[4][0]) for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)}
    assert found, name
    assert all(a.startswith("127.") for a in found), (name, found)
    return name


async def asking_task(api: Api, client: Client, *questions: str) -> str:
    """Alice's task, its run asking her "Which launch date?", then each of `questions`
    in turn, then finishing."""
    api.agent.model.add(
        say("Which launch date?"),
        *(say(q) for q in questions),
        call("finish", {"result": "launch on Friday at noon"}),
    )
    events = await streamed(client, text_message("plan the launch"))
    task_id = events[0].task.id
    api.run(task_id)
    assert last_state(events) == TaskState.TASK_STATE_INPUT_REQUIRED
    return task_id


def push_config(task_id: str, url: str, id: str = "hook", token: str = TOKEN) -> Any:
    return TaskPushNotificationConfig(task_id=task_id, id=id, url=url, token=token)


def payloads_of(history: str) -> str:
    """Every payload of a history (as `Agent.history_json` gives it), decoded: what the
    history holds in the clear."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(data := node.get("data"), str) and "metadata" in node:
                found.append(base64.b64decode(data).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history))
    return "\n".join(found)


def signed_with(token: str, push: Push) -> bool:
    """What a receiver checks of `Tarry-Signature` (docs/guides/reaching-people.md)."""
    fields = dict(part.split("=", 1) for part in push.headers["Tarry-Signature"].split(","))
    signed = f"{fields['t']}.".encode() + push.body
    expected = hmac.new(token.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])


async def test_a_task_s_push_config_reads_back_and_lists_without_its_token(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice)
        created = await alice.create_task_push_notification_config(
            push_config(task_id, receiver.url)
        )
        read = await alice.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )

    assert (created.id, created.url, created.token) == ("hook", receiver.url, "")
    assert (read.task_id, read.id, read.url, read.token) == (task_id, "hook", receiver.url, "")
    assert [(c.id, c.url) for c in listed.configs] == [("hook", receiver.url)]


async def test_the_receiver_is_pushed_the_task_when_its_run_asks_and_when_it_completes(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice, "At what time?")
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        await streamed(alice, text_message("Friday", task_id=task_id))
        asked = await receiver.until(1)
        await streamed(alice, text_message("noon", task_id=task_id))
        pushes = await receiver.until(2)

    updates = [p.update.status_update for p in pushes]
    assert asked[0].update.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(updates[0].status.message) == "At what time?"
    assert [u.status.state for u in updates] == [
        TaskState.TASK_STATE_INPUT_REQUIRED,
        TaskState.TASK_STATE_COMPLETED,
    ]
    assert {u.task_id for u in updates} == {task_id}
    assert [p.headers["X-A2A-Notification-Token"] for p in pushes] == [TOKEN, TOKEN]
    assert all(signed_with(TOKEN, p) for p in pushes)
    assert len({p.headers["Tarry-Event-Id"] for p in pushes}) == 2


async def test_a_push_whose_receiver_is_down_is_tried_again_with_the_same_event_id(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice, "At what time?")
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        receiver.down = 1
        await streamed(alice, text_message("Friday", task_id=task_id))
        refused, taken = await receiver.until(2)

    assert refused.headers["Tarry-Event-Id"] == taken.headers["Tarry-Event-Id"]
    assert taken.update.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED


async def test_a_task_its_owner_cancels_is_pushed_as_canceled(api: Api, receiver: Receiver) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice)
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        await alice.cancel_task(CancelTaskRequest(id=task_id))
        [push] = await receiver.until(1)

    status = push.update.status_update.status
    assert status.state == TaskState.TASK_STATE_CANCELED
    assert "Stopped by alice" in get_message_text(status.message)


async def test_a_task_keeps_at_most_its_cap_of_push_configs(api: Api, receiver: Receiver) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice)
        for n in range(MAX_PUSH_CONFIGS):
            await alice.create_task_push_notification_config(
                push_config(task_id, receiver.url, id=f"hook-{n}")
            )
        with pytest.raises(InvalidParamsError, match="delete one first"):
            await alice.create_task_push_notification_config(
                push_config(task_id, receiver.url, id="one-more")
            )
        again = await alice.create_task_push_notification_config(
            push_config(task_id, receiver.url, id="hook-0")
        )

    assert again.id == "hook-0"


async def test_a_push_config_s_token_never_enters_history_in_the_clear(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice, "At what time?")
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        await streamed(alice, text_message("Friday", task_id=task_id))
        await receiver.until(1)

    history = payloads_of(await api.agent.history_json(api.run(task_id)))

    assert receiver.url in history  # the config is there, as the update that set it
    assert TOKEN not in history


async def test_bob_cannot_set_read_list_or_delete_a_push_config_of_alices_task(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice, a2a_as(api, BOB) as bob:
        task_id = await asking_task(api, alice)
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        with pytest.raises(TaskNotFoundError):
            await bob.create_task_push_notification_config(push_config(task_id, receiver.url))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
            )
        with pytest.raises(TaskNotFoundError):
            await bob.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
        with pytest.raises(TaskNotFoundError):
            await bob.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
            )
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )

    assert [c.id for c in listed.configs] == ["hook"]


async def test_a_push_config_outlasts_an_api_restart(pushing: Agent, receiver: Receiver) -> None:
    async with people_api(pushing) as first, a2a_as(first, ALICE) as alice:
        task_id = await asking_task(first, alice)
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))

    async with people_api(pushing) as restarted, a2a_as(restarted, ALICE) as alice:
        read = await alice.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )

    assert (read.id, read.url) == ("hook", receiver.url)


async def test_a_deleted_push_config_is_gone_and_pushed_nothing(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice)
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        await alice.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        await streamed(alice, text_message("Friday", task_id=task_id))
    run = api.run(task_id)
    await run.result()

    assert list(listed.configs) == []
    assert "a2a_task_push" not in await api.agent.history_json(run)
    assert receiver.pushes == []


async def test_setting_and_deleting_a_push_config_are_audited_as_the_person_at_the_a2a_door(
    api: Api, receiver: Receiver
) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice)
        await alice.create_task_push_notification_config(push_config(task_id, receiver.url))
        await alice.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )

    trail = await api.agent.tarry.audit(run=task_id)
    pushes = (Act.PUSH_CONFIG, Act.PUSH_CONFIG_DELETE)
    assert [(r.act, r.by, r.door, r.what) for r in trail.records if r.act in pushes] == [
        (Act.PUSH_CONFIG, "alice", Door.A2A, "push config 'hook' set"),
        (Act.PUSH_CONFIG_DELETE, "alice", Door.A2A, "push config 'hook' deleted"),
    ]


async def test_a_push_config_needs_an_http_url(api: Api) -> None:
    async with a2a_as(api, ALICE) as alice:
        task_id = await asking_task(api, alice)
        with pytest.raises(InvalidParamsError, match="http or https URL"):
            await alice.create_task_push_notification_config(
                push_config(task_id, "file:///etc/passwd")
            )


async def test_a_push_config_to_a_private_address_is_refused_at_the_door(
    guarded_api: Api, receiver: Receiver
) -> None:
    private = [
        receiver.url,
        "http://localhost:8080/pushes",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.7/pushes",
        "https://[::1]/pushes",
    ]
    async with a2a_as(guarded_api, ALICE) as alice:
        task_id = await asking_task(guarded_api, alice)
        for url in private:
            with pytest.raises(InvalidParamsError, match="not a public address"):
                await alice.create_task_push_notification_config(push_config(task_id, url))
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )

    assert list(listed.configs) == []


async def test_a_push_whose_host_resolves_to_a_private_address_is_not_sent(
    guarded_api: Api, receiver: Receiver
) -> None:
    url = receiver.url.replace("127.0.0.1", loopback_name())
    async with a2a_as(guarded_api, ALICE) as alice:
        task_id = await asking_task(guarded_api, alice)
        taken = await alice.create_task_push_notification_config(push_config(task_id, url))
        await streamed(alice, text_message("Friday", task_id=task_id))
    run = guarded_api.run(task_id)
    result = await run.result()
    history = await guarded_api.agent.history_json(run)

    assert taken.url == url  # a name passes the door: the worker resolves it
    assert result.output == "launch on Friday at noon"
    assert receiver.pushes == []
    assert "push config 'hook' of alice is not pushed to" in history
    assert "not a public address" in history


async def test_the_card_says_push_notifications_are_offered(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=deadline(30)) as anyone:
        card = (await anyone.get("/a2a/.well-known/agent-card.json")).json()

    assert card["capabilities"]["pushNotifications"] is True


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1::1", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("100.64.0.1", False),  # shared (carrier-grade NAT)
        ("169.254.169.254", False),  # the clouds' metadata service
        ("224.0.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fe80::1%eth0", False),
        ("::ffff:127.0.0.1", False),  # IPv4 in IPv6 is judged as itself
        ("64:ff9b::a9fe:a9fe", False),  # NAT64's 169.254.169.254
    ],
)
def test_only_a_global_unicast_address_is_public(address: str, public: bool) -> None:
    assert is_public(address) is public


def test_a_config_id_defaults_to_the_task_s_as_the_sdk_s_stores_do() -> None:
    task_id = uuid.uuid4().hex
    params = TaskPushNotificationConfig(task_id=task_id, url="https://hooks.example/tarry")
    config = stored(params, "alice", None)

    assert (config.id, config.owner, config.sealed_token) == (task_id, "alice", None)
