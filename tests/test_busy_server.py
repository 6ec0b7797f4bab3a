"""A server answer that says nothing costs a caller nothing. A busy dev server has
answered `DescribeTaskQueue`, the client's check that a worker serves a run, with
`CANCELLED` ("operation was canceled"): the client asks again, and the start or the
reply goes through once. The server here is real, behind a proxy that gives that answer
to the first two checks (`tests/grpc_faults.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.grpc_faults import FailingProxy, failing_proxy


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
