"""API keys stay on the worker: the provider gets them, history never does."""

from __future__ import annotations

from tarry.contracts import Phase
from tarry.scripted_llm import call, say
from tests.conftest import CANARY_KEY, Agent


async def test_no_api_key_in_the_whole_history_of_a_run(agent: Agent) -> None:
    agent.model.add(
        call("write_file", {"path": "n.md", "content": "note"}), say("done"), say("welcome")
    )
    run = await agent.start("write a note", system="You are careful.")
    await run.wait_for({Phase.WAITING_USER})
    await run.send("thanks")
    await run.stop()
    await run.result()

    history = await agent.history_json(run)

    # The key was in use: the provider received it on every call ...
    assert all(r.headers["Authorization"] == f"Bearer {CANARY_KEY}" for r in agent.model.requests)
    # ... and it appears nowhere in what Temporal stored.
    assert CANARY_KEY not in history
    assert "call_llm" in history
