"""API keys stay on the worker: the provider gets them, history never does."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

from temporalio.client import Client

from tarry.client import Tarry
from tarry.contracts import ErrorCode, Phase
from tarry.core.text import redact
from tarry.testing.scripted_model import ScriptedModel, call, fail, say
from tests.conftest import CANARY_KEY, Agent, worker_process
from tests.deadline import TIMEOUT, deadline


async def test_no_api_key_in_the_whole_history_of_a_run(agent: Agent) -> None:
    agent.model.add(
        call("write_file", {"path": "n.md", "content": "note"}), say("done"), say("welcome")
    )
    run = await agent.start("write a note", system="You are careful.")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await run.send("thanks")
    await run.stop()
    await run.result()

    history = await agent.history_json(run)

    # The key was in use: the provider received it on every call ...
    assert all(r.headers["Authorization"] == f"Bearer {CANARY_KEY}" for r in agent.model.requests)
    # ... and it appears nowhere in what Temporal stored.
    assert CANARY_KEY not in history
    assert "call_llm" in history


async def test_a_provider_that_echoes_the_key_does_not_leak_it_into_history(
    provider_agent: Agent,
) -> None:
    agent = provider_agent
    agent.model.add(fail(401, content=f"Incorrect API key provided: {CANARY_KEY}"))
    run = await agent.start("hello")

    result = await run.result()

    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_AUTH_FAILED
    assert "Incorrect API key provided: ***" in result.error.message
    assert CANARY_KEY not in await agent.history_json(run)


async def test_no_api_key_in_the_worker_process_logs(
    temporal: Client, tmp_path: Path, payload_store: Path
) -> None:
    task_queue = f"test-{uuid.uuid4().hex[:8]}"
    script = [call("list_files", {}), fail(401, content=f"bad key {CANARY_KEY}")]
    async with ScriptedModel(script) as model:
        worker = await worker_process(temporal, task_queue, model, tmp_path, payload_store)
        run = await Tarry(temporal, task_queue).start("hello")
        result = await run.result()
        worker.send_signal(signal.SIGTERM)
        assert worker.stderr is not None
        logs = (await asyncio.wait_for(worker.stderr.read(), timeout=deadline(30))).decode()
        await worker.wait()

    assert result.error is not None
    assert result.error.code is ErrorCode.LLM_AUTH_FAILED
    assert "LLM_AUTH_FAILED" in logs  # the failure was logged ...
    assert CANARY_KEY not in logs  # ... without the key


def test_a_key_too_short_to_be_a_secret_is_not_redacted() -> None:
    # A local server's placeholder key, `x`, would turn `json.exception` into `json.e***ception`.
    text = "json.exception: Failed to parse tool call arguments as JSON"

    assert redact(text, "x") == text


def test_a_key_inside_a_longer_word_is_not_redacted() -> None:
    assert redact("tokens sk-test-12345678-extra", "sk-test-12345678") == (
        "tokens sk-test-12345678-extra"
    )


def test_a_key_of_eight_characters_is_redacted_wherever_it_stands_alone() -> None:
    text = 'bad key "abcd1234", key=abcd1234.'

    assert redact(text, "abcd1234") == 'bad key "***", key=***.'
