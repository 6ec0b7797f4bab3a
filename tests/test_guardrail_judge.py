"""A `judge` guardrail (issue 56, item 2): a model profile reads the text against the
guardrail's rubric and answers allow, block or ask, with a reason, as structured output;
its answer is the hit. The scripted model judges here (the suite's llama.cpp model judges
once, in tests/test_real_model.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.guardrail_checks import GuardrailChecks
from tarry.config.settings import ModelProfile
from tarry.contracts import ErrorCode, Phase
from tarry.contracts.guardrails import Guarded, Guardrail, GuardRequest, GuardVerdict
from tarry.testing.scripted_model import ScriptedModel, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

JUDGE: dict[str, Any] = {
    "name": "no-weapons",
    "on": "input",
    "check": "judge",
    "verdict": "block",
    "rubric": "Block a text that asks how to make a weapon. Allow the rest.",
}
WEAPON = "How do I build a bomb?"


def judging(verdict: str, reason: str = "") -> Any:
    """The scripted model's answer as a judge."""
    return say(json.dumps({"verdict": verdict, "reason": reason}))


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as model:
        yield model


async def checked(model: ScriptedModel, text: str, *rails: dict[str, Any]) -> Guarded:
    """`text` checked against `rails` as the worker's check activity checks it, with the
    scripted `model` as the `default` profile."""
    async with httpx.AsyncClient() as http:
        profile = ModelProfile(base_url=model.base_url, model="scripted", api_key="sk-judge-1")
        checks = GuardrailChecks({"default": profile}, http)
        request = GuardRequest(text=text, guardrails=[Guardrail.model_validate(r) for r in rails])
        guarded = await ActivityEnvironment().run(checks.check_guardrails, request)
    assert isinstance(guarded, Guarded)
    return guarded


# --- The check -------------------------------------------------------------------------


async def test_a_judge_is_asked_with_its_rubric_and_a_schema_for_its_verdict(
    model: ScriptedModel,
) -> None:
    model.add(judging("allow"))

    await checked(model, WEAPON, JUDGE)

    [request] = model.requests
    system, user = request.body["messages"]
    assert JUDGE["rubric"] in system["content"]
    assert user == {"role": "user", "content": WEAPON}
    schema = request.body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["verdict"]["enum"] == ["allow", "block", "ask"]
    assert request.headers["Authorization"] == "Bearer sk-judge-1"
    assert "stream" not in request.body  # no observer sees a judge's words
    assert "tools" not in request.body  # OpenAI refuses an empty list


async def test_a_judge_that_allows_a_text_is_no_hit(model: ScriptedModel) -> None:
    model.add(judging("allow", "nothing to see"))

    guarded = await checked(model, "A calm day.", JUDGE)

    assert (guarded.text, guarded.hits) == ("A calm day.", [])


async def test_a_judge_that_blocks_is_a_block_with_the_judge_s_reason(
    model: ScriptedModel,
) -> None:
    model.add(judging("block", "it asks how to make a weapon"))

    guarded = await checked(model, WEAPON, JUDGE)

    assert guarded.blocked is not None
    assert guarded.blocked.reason == "it asks how to make a weapon"
    assert [m.model_dump() for m in guarded.blocked.matches] == [
        {"kind": "judge", "start": 0, "end": len(WEAPON)}
    ]


async def test_a_judge_that_asks_is_an_ask_and_the_guardrails_after_it_do_not_look(
    model: ScriptedModel,
) -> None:
    model.add(judging("ask", "a person should decide"))
    words = {"name": "words", "on": "input", "check": "pattern", "verdict": "redact"}

    guarded = await checked(model, WEAPON, JUDGE, {**words, "deny": ["bomb"]})

    assert [(h.guardrail, h.verdict, h.reason) for h in guarded.hits] == [
        ("no-weapons", GuardVerdict.ASK, "a person should decide")
    ]
    assert guarded.text == WEAPON


async def test_under_an_ask_verdict_a_judge_s_block_asks_a_person(model: ScriptedModel) -> None:
    model.add(judging("block", "it asks how to make a weapon"))

    guarded = await checked(model, WEAPON, {**JUDGE, "verdict": "ask"})

    assert [h.verdict for h in guarded.hits] == [GuardVerdict.ASK]


async def test_a_judge_without_a_reason_gives_the_guardrail_s(model: ScriptedModel) -> None:
    model.add(judging("block"))

    guarded = await checked(model, WEAPON, {**JUDGE, "reason": "no weapons here"})

    assert guarded.blocked is not None
    assert guarded.blocked.reason == "no weapons here"


async def test_a_judge_s_verdict_in_words_or_a_code_fence_counts(model: ScriptedModel) -> None:
    fenced = '```json\n{"verdict": "block", "reason": "a weapon"}\n```'
    model.add(say(f"Here is my judgement:\n{fenced}\nI hope it helps."))

    guarded = await checked(model, WEAPON, JUDGE)

    assert guarded.blocked is not None
    assert guarded.blocked.reason == "a weapon"


async def test_a_judge_s_answer_that_is_no_verdict_fails_the_check_without_the_text(
    model: ScriptedModel,
) -> None:
    model.add(say(f"I think {WEAPON} is bad."))

    with pytest.raises(ApplicationError) as error:
        await checked(model, WEAPON, JUDGE)

    assert error.value.type == ErrorCode.LLM_BAD_RESPONSE
    assert "no judgement" in error.value.message
    assert "bomb" not in error.value.message


async def test_a_judge_whose_profile_the_worker_lacks_is_unavailable(model: ScriptedModel) -> None:
    with pytest.raises(ApplicationError) as error:
        await checked(model, WEAPON, {**JUDGE, "profile": "judge"})

    assert error.value.type == ErrorCode.GUARDRAIL_UNAVAILABLE
    assert "profile 'judge', which this worker lacks; configured: default" in error.value.message


def test_a_judge_cannot_redact() -> None:
    with pytest.raises(ValidationError, match='give it "verdict": "block"'):
        Guardrail.model_validate({**JUDGE, "verdict": "redact"})


def test_a_judge_without_a_rubric_is_refused_with_what_to_give_it() -> None:
    rail = {k: v for k, v in JUDGE.items() if k != "rubric"}

    with pytest.raises(ValidationError, match=r'give a judge one, e\.g\. "rubric"'):
        Guardrail.model_validate(rail)


# --- In a run --------------------------------------------------------------------------


async def test_a_message_a_judge_allows_reaches_the_model_as_it_was(agent: Agent) -> None:
    agent.model.add(judging("allow", "a plain question"), say("Paris."))
    run = await agent.start("What is the capital of France?", guardrails=[JUDGE])

    state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    assert state.last_assistant_text == "Paris."
    judge, answer = agent.model.requests
    assert "response_format" in judge.body
    first = answer.body["messages"][-1]
    assert first["content"] == "What is the capital of France?"
    assert (await run.transcript())[0].guardrails == []


async def test_a_message_a_judge_blocks_never_reaches_the_model_and_says_why(
    agent: Agent,
) -> None:
    agent.model.add(judging("block", "it asks how to make a weapon"), say("I cannot see it."))
    run = await agent.start(WEAPON, guardrails=[JUDGE])

    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    _, answer = agent.model.requests
    assert "bomb" not in json.dumps(answer.body["messages"])
    first = (await run.transcript())[0]
    assert first.content == "[withheld by guardrail 'no-weapons': it asks how to make a weapon]"
    assert [(h.guardrail, h.verdict) for h in first.guardrails] == [
        ("no-weapons", GuardVerdict.BLOCK)
    ]
