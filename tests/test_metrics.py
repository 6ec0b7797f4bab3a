"""A worker's Prometheus endpoint (`TARRY_METRICS_PORT`) shows what its runs did: model
calls with their tokens and cost, and tool calls, beside the SDK's own metrics."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from temporalio.client import Client

from tarry.cli.processes import free_port
from tarry.client import Tarry
from tarry.config.settings import Prices, TarrySettings
from tarry.contracts import Mode, Phase, RunInput, Usage
from tarry.core.identities import Caller
from tarry.testing.scripted_model import call, say
from tests.deadline import TIMEOUT, deadline
from workers.telemetry import worker_runtime

_SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str, **labels: str) -> list[float]:
    """The values of the series `name` whose labels include `labels`."""
    found = []
    for line in text.splitlines():
        if (match := _SAMPLE.match(line)) and match[1] == name:
            series = dict(_LABEL.findall(match[2]))
            if labels.items() <= series.items():
                found.append(float(match[3]))
    return found


async def scrape(url: str, until: str) -> str:
    """The endpoint's text once it has the series `until` (exported a moment later)."""
    async with httpx.AsyncClient() as http, asyncio.timeout(deadline(10)):
        while until not in (text := (await http.get(url)).text):
            await asyncio.sleep(0.1)
    return text


async def metered(temporal: Client, port: int) -> Client:
    """A client of the test server whose runtime's metrics `port` serves, as a worker's."""
    runtime = worker_runtime(TarrySettings.model_construct(tarry_metrics_port=port))
    return await Client.connect(
        temporal.service_client.config.target_host,
        data_converter=temporal.data_converter,
        runtime=runtime,
    )


async def test_the_metrics_endpoint_shows_a_runs_model_calls_tokens_and_tool_calls(
    temporal: Client, agent_factory: Any
) -> None:
    port = free_port()
    client = await metered(temporal, port)
    agent = await agent_factory(client=client, prices=Prices(input=2.0, output=10.0))
    agent.model.add(
        call("list_files", usage=Usage(prompt_tokens=100, completion_tokens=20, total_tokens=120)),
        say("Two files.", usage=Usage(prompt_tokens=200, completion_tokens=10, total_tokens=210)),
    )
    run = await agent.start("look around")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    text = await scrape(f"http://127.0.0.1:{port}/metrics", until="tarry_tool_calls_total")

    model = {"profile": "default", "model": "scripted"}
    assert samples(text, "tarry_model_calls_total", outcome="ok", **model) == [2]
    assert samples(text, "tarry_model_tokens_total", kind="prompt", **model) == [300]
    assert samples(text, "tarry_model_tokens_total", kind="completion", **model) == [30]
    assert samples(text, "tarry_model_latency_count", **model) == [2]
    (cost,) = samples(text, "tarry_model_cost_usd_sum", **model)
    assert round(cost, 6) == 0.0009  # 300 * $2/M + 30 * $10/M
    assert samples(text, "tarry_tool_calls_total", tool="list_files", outcome="ok") == [1]
    assert samples(text, "tarry_run_phases_total", phase="WaitingUser", waiting_for="input") == [1]
    # The SDK's own metrics share the endpoint.
    assert samples(text, "temporal_activity_execution_latency_count", activity_type="call_llm")


async def test_the_metrics_endpoint_counts_guardrail_hits_by_guardrail_and_verdict(
    temporal: Client, agent_factory: Any
) -> None:
    port = free_port()
    client = await metered(temporal, port)
    agent = await agent_factory(client=client)
    agent.model.add(say("Noted."), say("Noted again."))
    rail = {"name": "no-pii", "on": "input", "check": "pii", "verdict": "redact"}
    run = await agent.start("write to jane@example.com", guardrails=[rail])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await run.send("and to bob@example.org")

    text = await scrape(f"http://127.0.0.1:{port}/metrics", until="tarry_guardrail_hits_total")

    assert samples(text, "tarry_guardrail_hits_total", guardrail="no-pii", verdict="redact") == [2]


async def test_the_metrics_endpoint_labels_a_call_the_response_cache_answered(
    temporal: Client, agent_factory: Any
) -> None:
    port = free_port()
    client = await metered(temporal, port)
    agent = await agent_factory(client=client, cache=True, prices=Prices(input=2.0, output=10.0))
    agent.model.add(say("Hi.", usage=Usage(prompt_tokens=100, completion_tokens=10)))
    for _ in range(2):
        await (await agent.start("hello", mode=Mode.TASK)).result()

    text = await scrape(f"http://127.0.0.1:{port}/metrics", until='cached="true"')

    assert samples(text, "tarry_model_calls_total", outcome="ok", cached="false") == [1]
    assert samples(text, "tarry_model_calls_total", outcome="ok", cached="true") == [1]
    assert samples(text, "tarry_model_cost_usd_sum", cached="true") == [0]


async def test_the_metrics_endpoint_counts_each_persons_tokens_and_cost_by_model(
    temporal: Client, agent_factory: Any
) -> None:
    port = free_port()
    client = await metered(temporal, port)
    agent = await agent_factory(client=client, prices=Prices(input=2.0, output=10.0))
    agent.model.add(
        say("One.", usage=Usage(prompt_tokens=100, completion_tokens=20, total_tokens=120)),
        say("Two.", usage=Usage(prompt_tokens=200, completion_tokens=10, total_tokens=210)),
    )
    alice = Tarry(agent.tarry.client, agent.tarry.task_queue, Caller("alice"))
    bob = Tarry(agent.tarry.client, agent.tarry.task_queue, Caller("bob"))
    for tarry in (alice, bob):
        run = await tarry.start(RunInput(prompt="hello", timeouts=agent.timeouts))
        await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    text = await scrape(f"http://127.0.0.1:{port}/metrics", until='user="bob"')

    alices, bobs = {"user": "alice", "model": "default"}, {"user": "bob", "model": "default"}
    assert samples(text, "tarry_user_tokens_total", kind="prompt", **alices) == [100]
    assert samples(text, "tarry_user_tokens_total", kind="completion", **alices) == [20]
    assert samples(text, "tarry_user_tokens_total", kind="prompt", **bobs) == [200]
    (cost,) = samples(text, "tarry_user_cost_usd_sum", **bobs)
    assert round(cost, 6) == 0.0005  # 200 * $2/M + 10 * $10/M
