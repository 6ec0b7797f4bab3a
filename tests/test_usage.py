"""What the runs spent, seen (issue 58, item 6): `tarry usage` and `GET /v1/usage` count
each run's turns and estimated cost per person, model profile and day, caps or none; a
person sees their own usage, an admin everyone's."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tarry.api import ApiServer, create_app
from tarry.client.usage import UsageBy, UsageReport, usage_report
from tarry.config.settings import ModelProfile, Prices, load_settings
from tarry.contracts import Phase, RunInput, Usage
from tarry.core.identities import Caller
from tarry.testing.scripted_model import ScriptedModel, say
from tests.cli import Cli
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import deadline
from tests.http_api import api_client
from tests.test_http_api import error_of

PRICES = Prices(input=2.0, output=10.0)
ONE_CALL = Usage(prompt_tokens=1000, completion_tokens=100, total_tokens=1100)
ONE_CALL_USD = 0.003  # 1,000 * $2/M + 100 * $10/M


async def usage_agent(agent_factory: Any, **profiles: Any) -> Agent:
    agent: Agent = await agent_factory(prices=PRICES, **profiles)
    agent.model.add(*(say(f"answer {n}", usage=ONE_CALL) for n in range(3)))
    return agent


async def run_as(agent: Agent, user: str, **input: Any) -> None:
    tarry = agent.tarry.acting_as(Caller(user))
    run = await tarry.start(RunInput(prompt="hello", timeouts=agent.timeouts, **input))
    await run.wait_for({Phase.WAITING_USER}, deadline(20))


async def listed(agent: Agent, by: UsageBy, runs: int, **filters: Any) -> UsageReport:
    """The agent's usage once visibility, which trails history by a moment, lists `runs`
    runs with their cost."""
    since = datetime.now(UTC) - timedelta(hours=1)
    async with asyncio.timeout(deadline(10)):
        while True:
            report = await usage_report(
                agent.tarry.client,
                agent.tarry.task_queue,
                by=by,
                since=since,
                time_zone="UTC",
                **filters,
            )
            if report.total.runs == runs and report.total.cost_usd >= runs * ONE_CALL_USD * 0.99:
                return report
            await asyncio.sleep(0.1)


def rows(report: UsageReport) -> dict[str, tuple[int, float]]:
    return {row.key: (row.runs, round(row.cost_usd, 6)) for row in report.rows}


async def test_usage_counts_each_persons_runs_and_cost(agent_factory: Any) -> None:
    agent = await usage_agent(agent_factory)
    for user in ("alice", "alice", "bob"):
        await run_as(agent, user)

    report = await listed(agent, UsageBy.USER, runs=3)

    assert rows(report) == {"alice": (2, 2 * ONE_CALL_USD), "bob": (1, ONE_CALL_USD)}
    assert report.total.turns == 3


async def test_usage_by_model_counts_each_profile_and_by_day_today(agent_factory: Any) -> None:
    async with ScriptedModel() as cheap_model:
        cheap = ModelProfile(
            base_url=cheap_model.base_url, api_key=SecretStr(CANARY_KEY), prices=PRICES
        )
        agent = await usage_agent(agent_factory, more_profiles={"cheap": cheap})
        cheap_model.add(say("cheap answer", usage=ONE_CALL))
        await run_as(agent, "alice")
        await run_as(agent, "alice", model="cheap")

        by_model = await listed(agent, UsageBy.MODEL, runs=2)
        by_day = await listed(agent, UsageBy.DAY, runs=2)

    assert rows(by_model) == {"default": (1, ONE_CALL_USD), "cheap": (1, ONE_CALL_USD)}
    assert rows(by_day) == {datetime.now(UTC).date().isoformat(): (2, 2 * ONE_CALL_USD)}


async def test_usage_of_one_person_leaves_the_others_out(agent_factory: Any) -> None:
    agent = await usage_agent(agent_factory)
    for user in ("alice", "bob"):
        await run_as(agent, user)

    report = await listed(agent, UsageBy.USER, runs=1, users=frozenset({"bob"}))

    assert rows(report) == {"bob": (1, ONE_CALL_USD)}


async def test_tarry_usage_prints_a_row_per_model_as_json(agent_factory: Any) -> None:
    agent = await usage_agent(agent_factory)
    await run_as(agent, "alice")
    await listed(agent, UsageBy.MODEL, runs=1)

    out = await Cli.of(agent).ok("usage", "--by", "model", "--since", "1h", "--json")

    report = UsageReport.model_validate(json.loads(out))
    assert rows(report) == {"default": (1, ONE_CALL_USD)}


API_CONFIG = """
[api]
admins = ["erin"]

[api.users]
alice = "alice-token-0123456789"
erin = "erin-token-0123456789a"

[api.groups]
team = ["alice", "bob"]
"""


async def test_over_http_a_person_sees_their_own_usage_and_an_admin_everyones(
    agent_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(API_CONFIG)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    agent = await usage_agent(agent_factory)
    for user in ("alice", "bob"):
        await run_as(agent, user)
    await listed(agent, UsageBy.USER, runs=2)

    async with ApiServer(create_app(agent.tarry, load_settings()), "127.0.0.1", 0) as server:
        async with api_client(server.url, "alice-token-0123456789") as alice:
            own = await alice.get("/v1/usage")
            refused = await alice.get("/v1/usage", params={"user": "bob"})
        async with api_client(server.url, "erin-token-0123456789a") as erin:
            everyone = await erin.get("/v1/usage")
            team = await erin.get("/v1/usage", params={"group": "team", "by": "model"})
            unknown = await erin.get("/v1/usage", params={"group": "nobody"})

    assert rows(UsageReport.model_validate(own.json())) == {"alice": (1, ONE_CALL_USD)}
    assert error_of(refused) == (403, "NOT_ALLOWED")
    assert set(rows(UsageReport.model_validate(everyone.json()))) == {"alice", "bob"}
    assert rows(UsageReport.model_validate(team.json())) == {"default": (2, 2 * ONE_CALL_USD)}
    assert UsageReport.model_validate(unknown.json()).rows == []  # no members known
