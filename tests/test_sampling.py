"""Sampling settings: a profile's, checked at load, and a run's overrides of them, sent
to either provider in its own words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tarry.config.settings import ConfigError, ModelProfile, TarrySettings
from tarry.contracts import ErrorCode, Phase, RunInput, Sampling
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}
PROFILE = {
    "temperature": 0.2,
    "top_p": 0.9,
    "max_tokens": 300,
    "stop": ["END"],
    "extra_body": {"reasoning_effort": "low", "seed": 7},
}


async def test_an_openai_profile_sends_its_sampling_settings(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(**PROFILE)
    agent.model.add(say("hi"))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    body = agent.model.requests[0].body
    assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "stop")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 300,
        "stop": ["END"],
    }
    assert (body["reasoning_effort"], body["seed"]) == ("low", 7)


async def test_a_run_overrides_the_profile_field_by_field(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(**PROFILE)
    agent.model.add(say("hi"))
    run = await agent.start(
        "hello", sampling=Sampling(temperature=1.1, extra_body={"reasoning_effort": "high"})
    )
    await run.wait_for(WAITING, TIMEOUT)

    body = agent.model.requests[0].body
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (1.1, 0.9, 300)
    assert (body["reasoning_effort"], body["seed"]) == ("high", 7)


async def test_an_anthropic_profile_sends_them_in_its_own_words(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(provider="anthropic", **PROFILE)
    agent.model.add(say("hi"))
    run = await agent.start("hello", sampling=Sampling(max_tokens=50))
    await run.wait_for(WAITING, TIMEOUT)

    body = agent.model.requests[0].body
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.2, 0.9, 50)
    assert body["stop_sequences"] == ["END"]
    assert "stop" not in body
    assert (body["reasoning_effort"], body["seed"]) == ("low", 7)


async def test_without_sampling_a_request_sends_none_and_history_records_none(
    agent: Agent,
) -> None:
    agent.model.add(say("hi"))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    body = agent.model.requests[0].body
    assert not {"temperature", "top_p", "max_tokens", "stop"} & set(body)
    # Inputs encode as they did before sampling existed, so recorded histories replay.
    assert "sampling" not in await agent.history_json(run)


@pytest.mark.parametrize(
    "setting",
    [{"temperature": 2.5}, {"top_p": 0}, {"max_tokens": 0}, {"provider": "gemini"}],
)
def test_a_profile_with_a_setting_out_of_range_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: dict[str, Any]
) -> None:
    ((name, value),) = setting.items()
    config = tmp_path / "tarry.toml"
    config.write_text(f"[profiles.bad]\n{name} = {value!r}\n")
    monkeypatch.setenv("TARRY_CONFIG", str(config))

    with pytest.raises(ConfigError, match=rf"\[profiles\.bad\] {name}: "):
        TarrySettings()


def test_a_run_with_a_setting_out_of_range_is_refused() -> None:
    with pytest.raises(ValidationError, match="temperature"):
        RunInput.model_validate({"prompt": "hi", "sampling": {"temperature": -1}})


def test_an_anthropic_key_in_the_environment_adds_an_anthropic_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")

    profiles = TarrySettings().model_profiles()

    assert profiles["default"].provider == "openai"
    anthropic = profiles["anthropic"]
    assert (anthropic.provider, anthropic.base_url) == ("anthropic", "http://127.0.0.1:9/")
    assert anthropic.model == ModelProfile(provider="anthropic").model
    assert anthropic.api_key is not None
    assert anthropic.api_key.get_secret_value() == "sk-ant-test"


def test_without_an_anthropic_key_there_is_no_anthropic_profile() -> None:
    assert set(TarrySettings().model_profiles()) == {"default"}


def test_a_profile_file_names_its_provider_and_gets_that_providers_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text('[profiles.claude]\nprovider = "anthropic"\nmodel = "claude-haiku-4-5"\n')
    monkeypatch.setenv("TARRY_CONFIG", str(config))

    claude = TarrySettings().model_profiles()["claude"]

    assert (claude.base_url, claude.model) == ("https://api.anthropic.com", "claude-haiku-4-5")


async def test_without_a_tool_choice_the_model_decides(agent: Agent) -> None:
    agent.model.add(say("hi"))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[0].body["tool_choice"] == "auto"


async def test_a_profile_can_require_a_tool_call_and_a_run_can_name_the_tool(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(tool_choice="required")
    agent.model.add(say("hi"), say("hi"))
    first = await agent.start("hello")
    await first.wait_for(WAITING, TIMEOUT)
    named = await agent.start("hello", sampling=Sampling(tool_choice="list_files"))
    await named.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[0].body["tool_choice"] == "required"
    assert agent.model.requests[1].body["tool_choice"] == {
        "type": "function",
        "function": {"name": "list_files"},
    }


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("read_file", {"type": "tool", "name": "read_file"}),
    ],
)
async def test_anthropic_is_sent_the_tool_choice_in_its_own_shape(
    agent_factory: Any, choice: str, sent: dict[str, str]
) -> None:
    agent: Agent = await agent_factory(provider="anthropic")
    agent.model.add(say("hi"))
    run = await agent.start("hello", sampling=Sampling(tool_choice=choice))
    await run.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[0].body["tool_choice"] == sent


async def test_a_tool_choice_naming_no_tool_of_the_run_fails_it_saying_which_there_are(
    agent: Agent,
) -> None:
    run = await agent.start("hello", sampling=Sampling(tool_choice="send_email"))

    result = await run.result()

    assert result.error is not None
    assert result.error.code is ErrorCode.INPUT_INVALID
    assert "'send_email'" in result.error.message
    assert "read_file" in result.error.message
    assert agent.model.requests == []
