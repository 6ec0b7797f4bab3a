"""A server answer that says nothing costs a caller nothing. A busy dev server has
answered `DescribeTaskQueue`, the client's check that a worker serves a run, with
`CANCELLED` ("operation was canceled"): the client asks again, and the start or the
reply goes through once. So does a refusal of an update the server did not admit, which
the door that starts a run on its first message (`?start=true`) asks again like every
other reply. The server here is real, behind a proxy that gives those answers to the
first two calls (`tests/grpc_faults.py`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.client import Client

from tarry.api import ApiServer, create_app
from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.testing.scripted_model import say
from tests.conftest import FAST_TIMEOUTS, Agent
from tests.deadline import TIMEOUT, deadline
from tests.grpc_faults import (
    EXECUTE_MULTI_OPERATION,
    UNADMITTED_WITH_START,
    FailingProxy,
    failing_proxy,
)
from tests.http_api import Access

_FAST = json.loads(FAST_TIMEOUTS.model_dump_json())


@pytest.fixture
async def proxied(agent: Agent) -> AsyncIterator[tuple[Tarry, FailingProxy]]:
    """The agent's Tarry, connected through a proxy that cancels its first two checks
    for a worker."""
    client = agent.tarry.client
    async with failing_proxy(client.service_client.config.target_host, times=2) as proxy:
        through = await Client.connect(
            proxy.address, namespace=client.namespace, data_converter=client.data_converter
        )
        yield Tarry(through, agent.tarry.task_queue), proxy


async def test_a_start_whose_worker_check_is_cancelled_asks_again_and_starts_the_run(
    agent: Agent, proxied: tuple[Tarry, FailingProxy]
) -> None:
    tarry, proxy = proxied
    agent.model.add(say("Hello!"))

    # A start naming tools asks a worker whether it has them, once one polls.
    run = await tarry.start(RunInput(prompt="hi", tools=["write_file"], timeouts=agent.timeouts))
    agent.runs.append(run)

    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert proxy.failed == 2
    assert [m.role for m in await run.transcript()] == ["user", "assistant"]
    assert state.last_assistant_text == "Hello!"


async def test_a_reply_whose_worker_check_is_cancelled_asks_again_and_enters_once(
    agent: Agent, proxied: tuple[Tarry, FailingProxy]
) -> None:
    tarry, proxy = proxied
    agent.model.add(say("Hello!"), say("Noted."))
    run = await agent.start("hi")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    state = await tarry.get(run.id).send("Remember the milk.")

    assert proxy.failed == 2
    assert state.phase is Phase.WAITING_USER
    transcript = await run.transcript()
    assert [(m.role, m.content) for m in transcript[2:]] == [
        ("user", "Remember the milk."),
        ("assistant", "Noted."),
    ]


async def test_a_first_message_the_server_refuses_unadmitted_is_asked_again_and_enters_once(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello, Ada."))
    client = agent.tarry.client
    target = client.service_client.config.target_host
    refusing = failing_proxy(target, EXECUTE_MULTI_OPERATION, refusal=UNADMITTED_WITH_START)
    async with refusing as proxy:
        through = await Client.connect(
            proxy.address, namespace=client.namespace, data_converter=client.data_converter
        )
        tarry = Tarry(through, agent.tarry.task_queue)
        app = create_app(tarry, Access.of().settings)
        async with (
            ApiServer(app, "127.0.0.1", 0) as server,
            httpx.AsyncClient(base_url=server.url, timeout=deadline(60)) as http,
        ):
            response = await http.post(
                "/v1/runs/thread-ada/messages",
                params={"start": True, "wait": True},
                json={"text": "I am Ada", "input": {"timeouts": _FAST}},
            )

    assert response.status_code == 200, response.text
    assert response.json()["last_assistant_text"] == "Hello, Ada."
    assert proxy.failed == 2
    run = agent.tarry.get("thread-ada")
    agent.runs.append(run)
    assert [(m.role, m.content) for m in await run.transcript()] == [
        ("user", "I am Ada"),
        ("assistant", "Hello, Ada."),
    ]
    assert await agent.updates(run) == ["send"]
