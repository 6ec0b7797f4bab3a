"""A profile's fallback (`ModelProfile.fallback`): while its provider keeps failing, the
next profile answers the turn, the answer says which profile gave it, and after the
cool-down the run is back on its own profile (`activities.circuits`). Two scripted
models over real HTTP: the run's own, answering 503, and the fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from tarry.cli.processes import free_port
from tarry.client import RunHandle
from tarry.config.settings import ConfigFile, ModelProfile
from tarry.contracts import Mode, Phase, RunInput, SpanKind, WaitingFor
from tarry.core.identities import Caller
from tarry.core.limits import Limits
from tarry.testing.scripted_model import ScriptedModel, fail, say
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import TIMEOUT, deadline
from tests.test_ledger import ledger_of, person, used
from tests.test_metrics import metered, samples, scrape

COOL_DOWN = deadline(4)
"""Long enough for a second turn to begin within it, short enough to wait out."""
WAITING = {Phase.WAITING_USER}


@pytest.fixture
async def backup() -> AsyncIterator[ScriptedModel]:
    """The fallback's model server, that works."""
    async with ScriptedModel() as model:
        yield model


@pytest.fixture
async def agent(agent_factory: Any, backup: ScriptedModel) -> Agent:
    """An agent whose `default` profile falls back to `backup` after two failed tries."""
    profile = ModelProfile(base_url=backup.base_url, model="backup", api_key=SecretStr(CANARY_KEY))
    made: Agent = await agent_factory(
        more_profiles={"backup": profile},
        fallback=["backup"],
        fallback_after=2,
        fallback_cooldown=COOL_DOWN,
    )
    return made


async def test_a_provider_that_keeps_failing_has_the_fallback_answer_the_turn(
    agent: Agent, backup: ScriptedModel
) -> None:
    agent.model.add(fail(503), fail(503))
    backup.add(say("From the backup."))
    run = await agent.start("hello", mode=Mode.TASK)

    result = await run.result()

    assert result.phase is Phase.COMPLETED
    assert result.output == "From the backup."
    assert len(agent.model.requests) == 2  # the tries that opened the circuit
    assert backup.requests[0].body["messages"] == [{"role": "user", "content": "hello"}]


async def test_the_answer_records_which_profile_gave_it(
    agent: Agent, backup: ScriptedModel
) -> None:
    agent.model.add(fail(503), fail(503))
    backup.add(say("From the backup."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    answer = (await run.transcript())[-1]
    models = [span for span in (await run.timeline()).spans if span.kind is SpanKind.MODEL]

    assert (answer.role, answer.profile) == ("assistant", "backup")
    assert [(span.name, span.status.value) for span in models] == [
        ("turn 1 · default", "failed"),
        ("turn 1 · backup (fallback of default)", "ok"),
    ]


async def test_after_the_cool_down_the_run_is_back_on_its_own_profile(
    agent: Agent, backup: ScriptedModel
) -> None:
    agent.model.add(fail(503), fail(503), say("Back on my own."))
    backup.add(say("From the backup."), say("Still the backup."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    during = await run.send("again")  # the circuit is open: straight to the fallback
    asked_during = len(agent.model.requests)
    await asyncio.sleep(COOL_DOWN)
    after = await run.send("and now?")

    assert during.last_assistant_text == "Still the backup."
    assert asked_during == 2
    assert after.last_assistant_text == "Back on my own."
    assert (await run.transcript())[-1].profile is None


async def test_a_fallback_the_worker_lacks_is_passed_over_for_the_next(
    agent_factory: Any, backup: ScriptedModel
) -> None:
    profile = ModelProfile(base_url=backup.base_url, model="backup", api_key=SecretStr(CANARY_KEY))
    agent: Agent = await agent_factory(
        more_profiles={"backup": profile}, fallback=["elsewhere", "backup"], fallback_after=1
    )
    agent.model.add(fail(503))
    backup.add(say("From the backup."))

    result = await (await agent.start("hello", mode=Mode.TASK)).result()

    assert result.output == "From the backup."


async def test_with_the_fallback_down_too_an_outage_leaves_the_run_waiting_for_its_model(
    agent: Agent, backup: ScriptedModel
) -> None:
    agent.model.add(*(fail(503) for _ in range(30)))
    backup.add(*(fail(503) for _ in range(30)))
    ask_soon = agent.timeouts.model_copy(update={"llm_ask_after": timedelta(seconds=4)})
    run = await agent.start("hello", timeouts=ask_soon)

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.waiting_for is WaitingFor.MODEL
    assert len(backup.requests) == 3  # its own tries (`fallback_after`, 3 by default)


async def test_the_metrics_label_the_fallbacks_answer_with_the_profile_it_stood_in_for(
    temporal: Client, agent_factory: Any, backup: ScriptedModel
) -> None:
    port = free_port()
    profile = ModelProfile(base_url=backup.base_url, model="backup", api_key=SecretStr(CANARY_KEY))
    agent = await agent_factory(
        client=await metered(temporal, port),
        more_profiles={"backup": profile},
        fallback=["backup"],
        fallback_after=2,
    )
    agent.model.add(fail(503), fail(503))
    backup.add(say("From the backup."))
    await (await agent.start("hello", mode=Mode.TASK)).result()

    text = await scrape(f"http://127.0.0.1:{port}/metrics", until='fallback_of="default"')

    answered = {"profile": "backup", "fallback_of": "default", "outcome": "ok"}
    assert samples(text, "tarry_model_calls_total", **answered) == [1]
    down = {"profile": "default", "fallback_of": "", "outcome": "LLM_PROVIDER_DOWN"}
    assert samples(text, "tarry_model_calls_total", **down) == [1]


def test_a_fallback_naming_no_profile_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="falls back to 'cheep', which is no profile"):
        ConfigFile.model_validate({"profiles": {"fast": {"fallback": ["cheep"]}}})


def test_a_profile_falling_back_to_itself_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match=r"\[profiles.fast\] falls back to itself"):
        ConfigFile.model_validate({"profiles": {"fast": {"fallback": ["fast"]}}})


# --- Under the owner's limits (issue 58, item 4) ---------------------------------------


async def start_as(agent: Agent, limits: Limits, prompt: str) -> RunHandle:
    caller = Caller(person("alice"), limits=limits)
    run_input = RunInput(prompt=prompt, mode=Mode.TASK, timeouts=agent.timeouts)
    return await agent.tarry.acting_as(caller).start(run_input)


async def test_a_fallback_outside_the_owner_s_models_is_passed_over(
    agent: Agent, backup: ScriptedModel
) -> None:
    agent.model.add(fail(503), fail(503), say("On my own."))
    backup.add(say("From the backup."))

    run = await start_as(agent, Limits(models=("default",)), "hello")

    assert (await run.result()).output == "On my own."
    assert backup.requests == []


async def test_a_fallback_s_call_is_reserved_and_settled_on_the_owner_s_ledger(
    agent: Agent, backup: ScriptedModel
) -> None:
    agent.model.add(fail(503), fail(503))
    backup.add(say("From the backup.", usage=used(300, 50)))

    run = await start_as(agent, Limits(max_tokens_per_day=100_000), "hello")

    assert (await run.result()).output == "From the backup."
    ledger = await ledger_of(agent.tarry.client, run.caller.user)
    assert ledger.spent.tokens == 350
    assert ledger.open == {}
