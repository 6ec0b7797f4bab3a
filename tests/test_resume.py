"""An ended run can go on: a model error once its retries are spent, or a stop, need not
end a weeks-long conversation for good. `RunHandle.resume` starts a run
under the same id with the ended run's whole memory, waiting for a reply."""

from __future__ import annotations

import pytest

from tarry.client import TarryError
from tarry.contracts import Door, ErrorCode, Phase
from tarry.core.identities import Caller
from tarry.testing.scripted_model import fail, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}


async def test_a_run_failed_by_a_model_error_goes_on_with_its_whole_conversation(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello!"), fail(400), say("Back again."))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    await run.reply("and now?")
    failed = await run.result()
    assert failed.phase is Phase.FAILED

    resumed = await run.resume()
    state = await resumed.send("try again")

    assert resumed.id == run.id
    assert state.phase is Phase.WAITING_USER
    assert state.last_assistant_text == "Back again."
    assert state.turn == 2
    assert state.usage.total_tokens > failed.usage.total_tokens > 0
    transcript = [m.content for m in await resumed.transcript()]
    assert transcript == ["hi", "Hello!", "and now?", "try again", "Back again."]
    # The model was sent the whole conversation, the reply that met the error included.
    sent = [m["content"] for m in agent.model.requests[-1].body["messages"]]
    assert sent == ["hi", "Hello!", "and now?", "try again"]


async def test_a_resumed_run_shows_the_error_that_ended_it_until_the_next_reply(
    agent: Agent,
) -> None:
    agent.model.add(fail(401), say("Hello!"))
    run = await agent.start("hi")
    await run.result()

    resumed = await run.resume()
    waiting = await resumed.wait_for(WAITING, TIMEOUT)
    answered = await resumed.send("hello again")

    assert waiting.warning is ErrorCode.LLM_AUTH_FAILED
    assert waiting.error is not None
    assert waiting.error.code is ErrorCode.LLM_AUTH_FAILED
    assert (answered.warning, answered.error) == (None, None)
    assert answered.last_assistant_text == "Hello!"


async def test_a_stopped_run_goes_on_where_it_stopped(agent: Agent) -> None:
    agent.model.add(say("Hello!"), say("Good morning."))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    await run.stop("done for today")
    assert (await run.result()).stop_reason == "done for today"

    resumed = await run.resume()
    state = await resumed.send("morning!")

    assert (state.phase, state.stop_reason) == (Phase.WAITING_USER, None)
    assert [m.content for m in await resumed.transcript()] == [
        "hi",
        "Hello!",
        "morning!",
        "Good morning.",
    ]


async def test_resuming_a_run_that_has_not_ended_is_refused(agent: Agent) -> None:
    agent.model.add(say("Hello!"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await run.resume()

    assert refused.value.code is ErrorCode.RUN_NOT_ENDED


async def test_a_resume_is_recorded_as_its_person_s_after_the_stop_as_the_stopper_s(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello!"))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    await run.stop("done for today")
    await run.result()
    bea = agent.tarry.acting_as(Caller("bea", door=Door.API))

    resumed = await bea.get(run.id).resume()
    await resumed.wait_for(WAITING, TIMEOUT)
    records = (await agent.tarry.audit(run=run.id)).records

    assert [(r.act, r.by, r.door) for r in records] == [
        ("start", agent.tarry.caller.user, "cli"),
        ("stop", agent.tarry.caller.user, "cli"),
        ("resume", "bea", "api"),
    ]


async def test_a_resumed_run_says_who_stopped_it_and_why_until_the_next_reply(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello!"), say("Good morning."))
    run = await agent.start("hi")
    await run.wait_for(WAITING, TIMEOUT)
    await run.stop("done for today")
    await run.result()

    resumed = await run.resume()
    waiting = await resumed.wait_for(WAITING, TIMEOUT)
    answered = await resumed.send("morning!")

    assert (waiting.stopped_by, waiting.stop_reason) == (
        agent.tarry.caller.user,
        "done for today",
    )
    assert (answered.stopped_by, answered.stop_reason) == (None, None)
